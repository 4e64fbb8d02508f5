// RUN: tapeml-opt %s -p 'tape-to-loops{libm=true},outline-parallel-loops{min_work=10000}' | filecheck %s
// RUN: tapeml-opt %s -p 'tape-to-loops{libm=true},outline-parallel-loops{min_work=10000}' | tapeml-opt | filecheck %s

// The tanh over 64x512 elements is worth threads: a function over a range of its elements
// (its two dims are one loop: both buffers run on contiguously), called through
// kernel.parallel_for. The sum over 64 rows of 4 elements is too little work: it stays an
// scf.parallel.
// CHECK:       func.func @f(%x: memref<32768xf32> {tapeml.name = "x"}, %y: memref<256xf32> {tapeml.name = "y"}, %out.t: memref<32768xf32> {tapeml.name = "out.t"}, %out.s: memref<64xf32> {tapeml.name = "out.s"}) {
// CHECK:         kernel.parallel_for @f_part0(%x, %out.t) {iterations = 32768 : i64} : memref<32768xf32>, memref<32768xf32>
// CHECK:         "scf.parallel"
// CHECK:         func.return
// CHECK:       func.func @f_part0(%x: memref<32768xf32>, %out.t: memref<32768xf32>, %{{.*}}: index, %{{.*}}: index) {
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      %{{.*}} = memref.load %x[%[[I]]]
// CHECK-NEXT:      math.tanh
// CHECK-NEXT:      memref.store %{{.*}}, %out.t[%[[I]]]

func.func @f(%x: tensor<64x512xf32>, %y: tensor<64x4xf32>) -> (tensor<64x512xf32> {tapeml.name = "t"}, tensor<64xf32> {tapeml.name = "s"}) {
  %t = tape.tanh %x : tensor<64x512xf32>
  %s = tape.sum %y axes = [1] : tensor<64x4xf32> -> tensor<64xf32>
  func.return %t, %s : tensor<64x512xf32>, tensor<64xf32>
}
