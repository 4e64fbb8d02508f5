func.func @f(%x: tensor<2xf32>, %s: f32) {
  func.return
}
