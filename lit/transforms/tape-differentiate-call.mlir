// RUN: not tapeml-opt %s -p 'tape-differentiate{function=f}' 2>&1 | filecheck %s

// A call on the way from the argument to the result has no pullback: an error, not a gradient
// of zeros (the cotangent stopped at the call, silently).
// CHECK: tapeml-opt: error: tape-differentiate: @f holds func.call on the way from an argument to a result, which has no pullback

func.func @g(%x: tensor<3xf32>) -> tensor<3xf32> {
  %y = tape.exp %x : tensor<3xf32>
  func.return %y : tensor<3xf32>
}

func.func @f(%x: tensor<3xf32>) -> tensor<f32> {
  %y = func.call @g(%x) : (tensor<3xf32>) -> tensor<3xf32>
  %s = tape.sum %y axes = [0] : tensor<3xf32> -> tensor<f32>
  func.return %s : tensor<f32>
}
