// A valid module: @f(x, y) = (x + y, sum(x + y)).
func.func @f(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<f32>) {
  %0 = tape.add %x, %y : tensor<2x3xf32>
  %1 = tape.sum %0 axes = [0, 1] : tensor<2x3xf32> -> tensor<f32>
  func.return %0, %1 : tensor<2x3xf32>, tensor<f32>
}
