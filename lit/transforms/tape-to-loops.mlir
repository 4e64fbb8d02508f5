// RUN: tapeml-opt %s -p tape-to-loops | filecheck %s

// A fused group becomes one loop nest reading its inputs through broadcast strides (the bias
// with stride 0 along rows) and writing the result; the caller passes the output buffer.

// CHECK-LABEL: func.func @bias_relu(%x: memref<32xf32> {tapeml.name = "x"}, %b: memref<8xf32> {tapeml.name = "b"}, %out.y: memref<32xf32> {tapeml.name = "out.y"}) {
// CHECK:         %[[BUF:.*]] = memref.alloc() : memref<32xf32>
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:           scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:             memref.load %x[%{{.*}}] : memref<32xf32>
// CHECK:             memref.load %b[%[[J]]] : memref<8xf32>
// CHECK:             arith.addf
// CHECK:             arith.maximumf
// CHECK:             memref.store %{{.*}}, %[[BUF]][%{{.*}}] : memref<32xf32>
// The result is copied to the output buffer, then the intermediate is freed.
// CHECK:         memref.store %{{.*}}, %out.y[%{{.*}}] : memref<32xf32>
// CHECK:         memref.dealloc %[[BUF]] : memref<32xf32>
// CHECK-NEXT:    func.return

func.func @bias_relu(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32> {tapeml.name = "y"}) {
  %0 = tape.fused %x, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32> {
  ^bb0(%e: tensor<f32>, %f: tensor<f32>):
    %s = tape.add %e, %f : tensor<f32>
    %r = tape.relu %s : tensor<f32>
    tape.yield %r : tensor<f32>
  }
  func.return %0 : tensor<4x8xf32>
}

