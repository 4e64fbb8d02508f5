// Parses, but tape.add's operands differ in shape.
func.func @f(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>) -> tensor<2x3xf32> {
  %0 = tape.exp %a : tensor<2x3xf32>
  %1 = tape.add %0, %b : tensor<2x3xf32>, tensor<3x2xf32> -> tensor<2x3xf32>
  func.return %1 : tensor<2x3xf32>
}
