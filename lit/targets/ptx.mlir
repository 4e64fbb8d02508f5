// The whole way to PTX: tape-to-gpu, then -t ptx (for sm_90; ptxas assembles it, see below).
// RUN: tapeml-opt %s -p tape-to-gpu -t ptx | filecheck %s
// RUN: tapeml-opt %s -p tape-to-gpu -t ptx > %t.ptx
// RUN: %if ptxas %{ ptxas --gpu-name sm_90 %t.ptx -o %t.cubin %}

// CHECK:       // gpu.module @layer_kernels
// CHECK:       .version 8.0
// CHECK:       .target sm_90
// The matmul is the tiled GEMM kernel: both tiles in shared memory, read between barriers.
// CHECK:       .visible .entry layer_gemm0(
// CHECK-DAG:   .shared .align 16 .b8 __tapeml_shared_256xf32_0[1024];
// CHECK-DAG:   .shared .align 16 .b8 __tapeml_shared_256xf32_1[1024];
// CHECK:       ld.global.nc.b32
// CHECK:       st.shared.b32
// CHECK:       bar.sync 0;
// CHECK:       ld.shared.b32
// CHECK:       bar.sync 0;
// The fused elementwise group is one kernel: one thread per element, bounds-checked.
// CHECK:       .visible .entry layer_k0(
// CHECK:       mov.u32 {{.*}}%ctaid.x;
// CHECK:       mov.u32 {{.*}}%ntid.x;
// CHECK:       mov.u32 {{.*}}%tid.x;
// CHECK:       setp.gt.u64 {{.*}}, 31;
// exp, log and tanh are arithmetic (as on the CPU): no call, no library.
// CHECK-NOT:   call
// CHECK-NOT:   __nv_
// CHECK:       ld.global.nc.b32
// CHECK:       st.global.b32
// CHECK:       ret;

func.func @layer(%x: tensor<4x3xf32>, %w: tensor<3x8xf32>) -> tensor<4x8xf32> {
  %h = tape.matmul %x, %w : tensor<4x3xf32>, tensor<3x8xf32> -> tensor<4x8xf32>
  %e = tape.exp %h : tensor<4x8xf32>
  %l = tape.log %e : tensor<4x8xf32>
  %t = tape.tanh %l : tensor<4x8xf32>
  func.return %t : tensor<4x8xf32>
}
