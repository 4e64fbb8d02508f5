func.func private @g(tensor<2xf32>) -> tensor<2xf32>
func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = func.call @g(%x) : (tensor<2xf32>) -> tensor<2xf32>
  %1 = tape.exp %0 : tensor<2xf32>
  func.return %1 : tensor<2xf32>
}
