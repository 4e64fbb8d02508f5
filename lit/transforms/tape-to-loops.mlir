// RUN: tapeml-opt %s -p 'tape-to-loops{libm=true}' | filecheck %s

// A fused group becomes one parallel loop (its iterations write disjoint elements) reading its inputs through broadcast strides (the bias
// with stride 0 along rows); the result is computed straight into the caller's output buffer.
// The exp feeding a sum is an intermediate: allocated, then freed after its last use.

// CHECK-LABEL: func.func @bias_relu(%x: memref<32xf32> {tapeml.name = "x"}, %b: memref<8xf32> {tapeml.name = "b"}, %out.y: memref<32xf32> {tapeml.name = "out.y"}, %out.s: memref<4xf32> {tapeml.name = "out.s"}) {
// CHECK-NOT:     memref.alloc
// CHECK:         "scf.parallel"(%{{.*}}) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
// CHECK-NEXT:    ^bb0(%{{.*}}: index, %[[J:.*]]: index):
// CHECK:             memref.load %x[%{{.*}}] : memref<32xf32>
// CHECK:             memref.load %b[%[[J]]] : memref<8xf32>
// CHECK:             arith.addf
// CHECK:             arith.maximumf
// CHECK:             memref.store %{{.*}}, %out.y[%{{.*}}] : memref<32xf32>
// CHECK:         %[[E:.*]] = memref.alloc() : memref<32xf32>
// CHECK:         math.exp
// CHECK:         scf.for
// CHECK:           arith.addf
// CHECK:         memref.store %{{.*}}, %out.s[%{{.*}}] : memref<4xf32>
// CHECK:         memref.dealloc %[[E]] : memref<32xf32>
// CHECK-NEXT:    func.return

func.func @bias_relu(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32> {tapeml.name = "y"}, tensor<4xf32> {tapeml.name = "s"}) {
  %0 = tape.fused %x, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32> {
  ^bb0(%e: tensor<f32>, %f: tensor<f32>):
    %s = tape.add %e, %f : tensor<f32>
    %r = tape.relu %s : tensor<f32>
    tape.yield %r : tensor<f32>
  }
  %e = tape.exp %x : tensor<4x8xf32>
  %s = tape.sum %e axes = [1] : tensor<4x8xf32> -> tensor<4xf32>
  func.return %0, %s : tensor<4x8xf32>, tensor<4xf32>
}

