// Parses, but the function returns the wrong type (a func.return verifier failure).
func.func @f(%a: tensor<2xf32>) -> tensor<3xf32> {
  %0 = tape.exp %a : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
