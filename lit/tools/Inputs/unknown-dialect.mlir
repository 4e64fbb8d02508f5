// No dialect is called nodialect.
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "nodialect.op"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
