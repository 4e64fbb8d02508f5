// A two-layer MLP forward pass, batch 4, 3 -> 8 -> 2, in the tape dialect.
// Run it:       tapeml-run examples/mlp.mlir --symbol mlp --args ...
// Print it:     tapeml-opt examples/mlp.mlir [--print-op-generic]
func.func @mlp(%x: tensor<4x3xf32>, %w1: tensor<3x8xf32>, %b1: tensor<8xf32>,
               %w2: tensor<8x2xf32>, %b2: tensor<2xf32>) -> tensor<4x2xf32> {
  %h = tape.matmul %x, %w1 : tensor<4x3xf32>, tensor<3x8xf32> -> tensor<4x8xf32>
  %bb1 = tape.broadcast %b1 : tensor<8xf32> -> tensor<4x8xf32>
  %hb = tape.add %h, %bb1 : tensor<4x8xf32>
  %a = tape.tanh %hb : tensor<4x8xf32>
  %y = tape.matmul %a, %w2 : tensor<4x8xf32>, tensor<8x2xf32> -> tensor<4x2xf32>
  %bb2 = tape.broadcast %b2 : tensor<2xf32> -> tensor<4x2xf32>
  %out = tape.add %y, %bb2 : tensor<4x2xf32>
  func.return %out : tensor<4x2xf32>
}
