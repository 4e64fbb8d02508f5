// Two functions and neither is @main: tapeml-run needs --symbol.
func.func @g(%x: tensor<2xf32>) -> tensor<2xf32> {
  func.return %x : tensor<2xf32>
}
func.func @h(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = tape.neg %x : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
