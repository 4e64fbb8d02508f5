// tape has no op frobnicate.
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = tape.frobnicate %a : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
