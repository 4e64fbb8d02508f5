// The host assembly of a lowered function (LLVM O3 for this CPU and its features).
// RUN: tapeml-opt %s -p tape-to-llvm -t host-asm | filecheck %s

// CHECK:       .globl tapeml.scale_shift
// CHECK:       tapeml.scale_shift:
// A 4096-element loop over f32 vectorizes (xmm on any x86-64, ymm/zmm where the CPU has them).
// CHECK:       vmulps
// CHECK:       ret

func.func @scale_shift(%x: tensor<4096xf32>, %y: tensor<4096xf32>) -> tensor<4096xf32> {
  %m = tape.mul %x, %y : tensor<4096xf32>
  %a = tape.add %m, %x : tensor<4096xf32>
  func.return %a : tensor<4096xf32>
}
