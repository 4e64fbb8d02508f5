// The function body is never closed.
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  func.return %a : tensor<2xf32>
