// RUN: not tapeml-opt %s -p 'tape-to-loops,tape-differentiate' 2>&1 | filecheck %s

// A function lowered already is no function of tape ops to differentiate (the error had been
// "of=0 is not a result of @f (it has 0)": its results are buffer arguments now).
// CHECK: tapeml-opt: error: tape-differentiate: @f is lowered already (its arguments are buffers): differentiate its tape function, before tape-to-loops

func.func @f(%x: tensor<3xf32>) -> tensor<f32> {
  %s = tape.sum %x axes = [0] : tensor<3xf32> -> tensor<f32>
  func.return %s : tensor<f32>
}
