// @f is declared twice.
func.func private @f(tensor<2xf32>) -> tensor<2xf32>
func.func @g() {
  func.return
}
func.func private @f(tensor<2xf32>) -> tensor<2xf32>
