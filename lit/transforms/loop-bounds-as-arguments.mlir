// RUN: tapeml-opt %s -p 'tape-to-loops{share=true},outline-parallel-loops{min_work=10000},loop-bounds-as-arguments' | filecheck %s
// RUN: tapeml-opt %s -p 'tape-to-loops{share=true},outline-parallel-loops{min_work=10000},loop-bounds-as-arguments,convert-scf-to-cf,convert-loops-to-llvm{threads=2}' | filecheck %s --check-prefix=LLVM

// Each op's function (here the repeated ops': a function of fewer than 64 ops keeps one that
// occurs once inline) takes its outer loop's bound as an argument, which its calls pass: a
// flat loop's as a number of 64-element runs (128 elements: 2), a loop handed to the thread
// pool as the count of kernel.parallel_for (32768). The same op at another batch size is then
// the same function: the CPU backend compiles it once per process.
// CHECK:       func.func @f(
// CHECK:         %[[N0:.*]] = arith.constant 32768 : index
// CHECK-NEXT:    func.call @f_op0(%x, %{{.*}}, %[[N0]]) : (memref<32768xf32>, memref<32768xf32>, index) -> ()
// CHECK:         func.call @f_op0(%{{.*}}, %out.t2, %{{.*}}) : (memref<32768xf32>, memref<32768xf32>, index) -> ()
// CHECK:         %[[N1:.*]] = arith.constant 2 : index
// CHECK-NEXT:    func.call @f_op1(%y, %{{.*}}, %[[N1]]) : (memref<128xf32>, memref<128xf32>, index) -> ()
// CHECK:       func.func @f_op1(%{{.*}}: memref<128xf32>, %{{.*}}: memref<128xf32>, %[[RUNS:.*]]: index) attributes {tapeml.shared_code} {
// CHECK:         %[[SIXTYFOUR:.*]] = arith.constant 64 : index
// CHECK-NEXT:    %[[BOUND:.*]] = arith.muli %[[RUNS]], %[[SIXTYFOUR]] : index
// CHECK-NEXT:    "scf.parallel"(%{{.*}}, %[[BOUND]], %{{.*}})
// CHECK:       func.func @f_op0(%{{.*}}: memref<32768xf32>, %{{.*}}: memref<32768xf32>, %[[COUNT:.*]]: index) attributes {tapeml.shared_code} {
// CHECK-NEXT:    kernel.parallel_for @f_op0_part0(%{{.*}}, %{{.*}}) count %[[COUNT]] {iterations = 32768 : i64} : memref<32768xf32>, memref<32768xf32>
// CHECK-NEXT:    func.return

// LLVM:        llvm.func @tapeml.f_op0(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %[[COUNT:.*]]: i64) attributes {tapeml.shared_code} {
// LLVM:          llvm.call @tapeml_parallel_for(%{{.*}}, %{{.*}}, %[[COUNT]], %{{.*}})

func.func @f(%x: tensor<64x512xf32>, %y: tensor<16x8xf32>) -> (tensor<64x512xf32>, tensor<16x8xf32>) {
  %t = tape.tanh %x : tensor<64x512xf32>
  %t2 = tape.tanh %t : tensor<64x512xf32>
  %u = tape.tanh %y : tensor<16x8xf32>
  %u2 = tape.tanh %u : tensor<16x8xf32>
  func.return %t2, %u2 : tensor<64x512xf32>, tensor<16x8xf32>
}
