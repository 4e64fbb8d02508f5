// RUN: tapeml-opt %s -p 'tape-differentiate{function=f of=0}' | filecheck %s

// A call that reads the argument but feeds no differentiated result is no obstacle: result 0,
// sum(x * x), does not read it (a review found the check refusing it: it had looked at every
// op the argument reaches, not at those the result reads).
// CHECK:       func.func @f(%x: tensor<3xf32>) -> (tensor<f32> {tapeml.name = "s"}, tensor<3xf32> {tapeml.name = "c"}, tensor<3xf32> {tapeml.name = "grad.x"})
// CHECK:         %c = func.call @g(%x)
// CHECK:         tape.mul

func.func @g(%x: tensor<3xf32>) -> tensor<3xf32> {
  %y = tape.exp %x : tensor<3xf32>
  func.return %y : tensor<3xf32>
}

func.func @f(%x: tensor<3xf32>) -> (tensor<f32>, tensor<3xf32>) {
  %y = tape.mul %x, %x : tensor<3xf32>
  %s = tape.sum %y axes = [0] : tensor<3xf32> -> tensor<f32>
  %c = func.call @g(%x) : (tensor<3xf32>) -> tensor<3xf32>
  func.return %s, %c : tensor<f32>, tensor<3xf32>
}
