// @f is only declared: it has no body.
func.func private @f(tensor<2xf32>) -> tensor<2xf32>
