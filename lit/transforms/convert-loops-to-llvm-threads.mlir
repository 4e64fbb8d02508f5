// RUN: tapeml-opt %s -p 'tape-to-loops{libm=true},outline-parallel-loops{min_work=10000},convert-scf-to-cf,convert-loops-to-llvm' | filecheck %s --check-prefix=ONE
// RUN: tapeml-opt %s -p 'tape-to-loops{libm=true},outline-parallel-loops{min_work=10000},convert-scf-to-cf,convert-loops-to-llvm{threads=3}' | filecheck %s --check-prefix=THREE

// The threads a kernel.parallel_for is shared by is the pass's option (1 unless given), never
// the host's count: the same input lowers the same way on every machine.
// ONE:         %[[N:.*]] = llvm.mlir.constant(1) : i64
// ONE-NEXT:    llvm.call @tapeml_parallel_for(%{{.*}}, %{{.*}}, %{{.*}}, %[[N]])
// THREE:       %[[N:.*]] = llvm.mlir.constant(3) : i64
// THREE-NEXT:  llvm.call @tapeml_parallel_for(%{{.*}}, %{{.*}}, %{{.*}}, %[[N]])

func.func @f(%x: tensor<64x512xf32>) -> tensor<64x512xf32> {
  %t = tape.tanh %x : tensor<64x512xf32>
  func.return %t : tensor<64x512xf32>
}
