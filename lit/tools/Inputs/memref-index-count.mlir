func.func @f(%s: memref<f32>, %x: f32) {
  %c0 = arith.constant 0 : index
  memref.store %x, %s[%c0] : memref<f32>
  func.return
}
