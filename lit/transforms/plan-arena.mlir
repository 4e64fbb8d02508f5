// RUN: tapeml-opt %s -p 'tape-to-loops{libm=true},plan-arena' | filecheck %s
// RUN: tapeml-opt %s -p 'tape-to-loops{libm=true},plan-arena' | tapeml-opt | filecheck %s
// RUN: tapeml-opt %s -p 'tape-to-loops{libm=true},plan-arena,convert-scf-to-cf,convert-loops-to-llvm' -t llvm | filecheck %s --check-prefix=IR

// Three intermediates of 256 bytes, each dead after the next op reads it: %a at 0, %b at 256,
// and %c where %a was (it is freed once %b is computed). The arena is the last argument, and
// no allocation or free is left.
// CHECK:       func.func @f(%x: memref<64xf32> {tapeml.name = "x"}, %out.d: memref<64xf32> {tapeml.name = "out.d"}, %arena: memref<512xi8> {tapeml.name = "arena"}) {
// CHECK-NEXT:    %[[A0:.*]] = arith.constant 0 : index
// CHECK-NEXT:    %a = memref.view %arena[%[[A0]]][] : memref<512xi8> to memref<64xf32>
// CHECK:         %b = memref.view %arena[%{{.*}}][] : memref<512xi8> to memref<64xf32>
// CHECK:         %c = memref.view %arena[%{{.*}}][] : memref<512xi8> to memref<64xf32>
// CHECK-NOT:     memref.alloc
// CHECK-NOT:     memref.dealloc
// CHECK:         func.return

// In LLVM IR each view is the arena's address plus its offset: 0, 256, then 0 again.
// IR:      define void @"tapeml.f"(ptr %{{.*}}, ptr %{{.*}}, ptr %[[ARENA:[^)]*]])
// IR:        getelementptr inbounds i8, ptr %[[ARENA]], i64 0
// IR:        getelementptr inbounds i8, ptr %[[ARENA]], i64 256
// IR:        getelementptr inbounds i8, ptr %[[ARENA]], i64 0
// IR-NOT:    call ptr @malloc
// IR-NOT:    call void @free

func.func @f(%x: tensor<64xf32>) -> (tensor<64xf32> {tapeml.name = "d"}) {
  %a = tape.exp %x : tensor<64xf32>
  %b = tape.tanh %a : tensor<64xf32>
  %c = tape.neg %b : tensor<64xf32>
  %d = tape.add %c, %x : tensor<64xf32>
  func.return %d : tensor<64xf32>
}
