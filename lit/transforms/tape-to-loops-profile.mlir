// RUN: tapeml-opt %s -p 'tape-to-loops{profile=true}' | filecheck %s
// RUN: tapeml-opt %s -p 'tape-to-loops{profile=true},convert-scf-to-cf,convert-loops-to-llvm' | filecheck %s --check-prefix=LLVM

// A profiled lowering: a kernel.mark before each op's loops (none for the reshape, a view), one
// before the results are copied out, and -1 (the clock stops) before the return; the
// function's tapeml.profile names what each entry counts.
// CHECK:       func.func @f({{.*}}) attributes {tapeml.profile = ["tape.tanh 4x8 -> 4x8 f32", "tape.matmul 4x8, 8x2 -> 4x2 f32", "results copied to the caller's buffers"]} {
// CHECK-NEXT:    kernel.mark {index = 0 : i64}
// CHECK:         kernel.mark {index = 1 : i64}
// CHECK-NEXT:    kernel.gemm
// CHECK-NEXT:    memref.dealloc
// CHECK-NEXT:    kernel.mark {index = 2 : i64}
// CHECK-NEXT:    kernel.mark {index = -1 : i64}
// CHECK-NEXT:    func.return

// Each mark is a call of the backend's clock, declared once.
// LLVM:        %[[I:.*]] = llvm.mlir.constant(0) : i64
// LLVM-NEXT:   llvm.call @tapeml_profile_mark(%[[I]]) : (i64) -> ()
// LLVM:        llvm.func @tapeml_profile_mark(i64)

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x2xf32>) -> (tensor<4x2xf32> {tapeml.name = "y"}) {
  %h = tape.tanh %x : tensor<4x8xf32>
  %r = tape.reshape %h : tensor<4x8xf32> -> tensor<4x8xf32>
  %y = tape.matmul %r, %w : tensor<4x8xf32>, tensor<8x2xf32> -> tensor<4x2xf32>
  func.return %y : tensor<4x2xf32>
}
