// The whole way to LLVM IR: tape-to-llvm (the CPU backend's pipeline), then -t llvm.
// RUN: tapeml-opt %s -p 'tape-to-llvm{libm=true}' -t llvm | filecheck %s
// RUN: tapeml-opt %s -p tape-to-llvm -t llvm | filecheck %s --check-prefix=VECTOR
// RUN: tapeml-opt %s -p tape-to-llvm | filecheck %s --check-prefix=DIALECT

// The function writes its result into the caller's buffer: one pointer per input and output,
// then the arena's (plan-arena), as jit compiles it.
// CHECK:       define void @"tapeml.scaled_tanh"(ptr %".1", ptr %".2", ptr %".3", ptr %".4")
// Buffers are addressed with getelementptr, never inttoptr (LLVM vectorizes GEP loops).
// CHECK:       getelementptr inbounds float, ptr
// CHECK-NOT:   inttoptr
// CHECK:       call float @"llvm.tanh.f32"
// CHECK:       ret void
// CHECK-NOT:   inttoptr

// By default tanh is arithmetic (no libm call), so the loop vectorizes.
// VECTOR:      define void @"tapeml.scaled_tanh"
// VECTOR-NOT:  @"llvm.tanh
// VECTOR:      bitcast
// VECTOR:      ret void

// DIALECT:     llvm.func @tapeml.scaled_tanh(%x: !llvm.ptr, %s: !llvm.ptr, %{{.*}}: !llvm.ptr, %arena: !llvm.ptr)
// DIALECT-NOT: memref.
// DIALECT-NOT: scf.
// DIALECT-NOT: arith.

func.func @scaled_tanh(%x: tensor<4x8xf32>, %s: tensor<8xf32>) -> tensor<4x8xf32> {
  %b = tape.broadcast %s : tensor<8xf32> -> tensor<4x8xf32>
  %m = tape.mul %x, %b : tensor<4x8xf32>
  %t = tape.tanh %m : tensor<4x8xf32>
  func.return %t : tensor<4x8xf32>
}
