// The whole way to PTX: tape-to-gpu, then -t ptx (for sm_90; ptxas assembles it, see below).
// RUN: tapeml-opt %s -p tape-to-gpu -t ptx | filecheck %s
// RUN: tapeml-opt %s -p tape-to-gpu -t ptx > %t.ptx
// RUN: %if ptxas %{ ptxas --gpu-name sm_90 %t.ptx -o %t.cubin %}

// CHECK:       // the kernels of @layer_kernels, @second_kernels
// CHECK:       .version 8.0
// CHECK:       .target sm_90
// The matmul is the tiled GEMM kernel: both tiles in shared memory, read between barriers.
// CHECK:       .visible .entry layer_gemm0(
// Its block size is known: ptxas keeps its registers within what 256 threads may hold.
// CHECK:       .maxntid 16, 16, 1
// CHECK-DAG:   .shared .align 16 .b8 __tapeml_shared_256xf32_0[1024];
// CHECK-DAG:   .shared .align 16 .b8 __tapeml_shared_256xf32_1[1024];
// CHECK:       ld.global.nc.b32
// CHECK:       st.shared.b32
// CHECK:       bar.sync 0;
// CHECK:       ld.shared.b32
// CHECK:       bar.sync 0;
// The fused elementwise group is one kernel: one thread per element, bounds-checked.
// CHECK:       .visible .entry layer_k0(
// CHECK:       .maxntid 32, 1, 1
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
// Every function's kernels are in the one PTX module.
// CHECK:       .visible .entry second_k0(

func.func @layer(%x: tensor<4x3xf32>, %w: tensor<3x8xf32>) -> tensor<4x8xf32> {
  %h = tape.matmul %x, %w : tensor<4x3xf32>, tensor<3x8xf32> -> tensor<4x8xf32>
  %e = tape.exp %h : tensor<4x8xf32>
  %l = tape.log %e : tensor<4x8xf32>
  %t = tape.tanh %l : tensor<4x8xf32>
  func.return %t : tensor<4x8xf32>
}

func.func @second(%x: tensor<3xf64>) -> tensor<3xf64> {
  %y = tape.sqrt %x : tensor<3xf64>
  func.return %y : tensor<3xf64>
}
