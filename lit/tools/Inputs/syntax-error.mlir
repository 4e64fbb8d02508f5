// A missing operand.
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = tape.add %a, : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
