func.func @f(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = arith.mulf %x, %y : tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}
