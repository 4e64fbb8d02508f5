// RUN: tapeml-opt %s -p 'tape-to-loops,convert-loops-to-gpu{gemm_tile=8}' | filecheck %s

// The host function keeps its signature and allocates, launches and frees; the kernels are
// outlined into one gpu.module beside it.
// CHECK:       builtin.module attributes {gpu.container_module} {
// CHECK:         func.func @step(%x: memref<12xf32> {tapeml.name = "x"}, %w: memref<24xf32> {tapeml.name = "w"}, %out.s: memref<1xf32> {tapeml.name = "out.s"}) {
// The matmul: 8x8 threads per block, a one-dimensional grid of its tiles of C.
// CHECK:           %[[H:.*]] = "gpu.alloc"() {{.*}} : () -> memref<32xf32>
// CHECK:           "gpu.launch_func"({{.*}}, %x, %w, %[[H]]) <{kernel = @step_kernels::@step_gemm0, {{.*}}}>
// The elementwise op: one thread per element, in blocks of up to 256.
// CHECK:           %[[T:.*]] = "gpu.alloc"() {{.*}} : () -> memref<32xf32>
// CHECK:           "gpu.launch_func"({{.*}}, %[[H]], %[[T]]) <{kernel = @step_kernels::@step_k0, {{.*}}}>
// CHECK:           "gpu.dealloc"(%[[H]])
// The sum to a scalar: one thread adds in order.
// CHECK:           "gpu.launch_func"({{.*}}, %[[T]], %out.s) <{kernel = @step_kernels::@step_k1, {{.*}}}>
// CHECK:           "gpu.dealloc"(%[[T]])
// CHECK-NEXT:      func.return

// CHECK:         "gpu.module"() <{sym_name = "step_kernels"}> ({
// CHECK:           "gpu.func"() <{function_type = (memref<12xf32>, memref<24xf32>, memref<32xf32>) -> (), kernel}> ({
// CHECK:             kernel.shared : memref<64xf32>
// CHECK:             kernel.shared : memref<64xf32>
// CHECK:             "gpu.barrier"()
// CHECK:             "gpu.barrier"()
// CHECK:           }) {sym_name = "step_gemm0", gpu.known_block_size = array<i32: 8, 8, 1>}
// CHECK:           "gpu.func"() <{function_type = (memref<32xf32>, memref<32xf32>) -> (), kernel}> ({
// CHECK:             %{{.*}} = "gpu.block_id"() <{dimension = #gpu<dim x>}> : () -> index
// CHECK:             %{{.*}} = "gpu.block_dim"() <{dimension = #gpu<dim x>}> : () -> index
// CHECK:             %{{.*}} = "gpu.thread_id"() <{dimension = #gpu<dim x>}> : () -> index
// CHECK:             %{{.*}} = arith.cmpi slt, %{{.*}}, %{{.*}} : index
// CHECK:             scf.if
// CHECK:           }) {sym_name = "step_k0", gpu.known_block_size = array<i32: 32, 1, 1>}
// CHECK:           "gpu.func"() <{function_type = (memref<32xf32>, memref<1xf32>) -> (), kernel}> ({
// CHECK:             scf.for
// CHECK:           }) {sym_name = "step_k1", gpu.known_block_size = array<i32: 1, 1, 1>}

func.func @step(%x: tensor<4x3xf32>, %w: tensor<3x8xf32>) -> tensor<f32> {
  %h = tape.matmul %x, %w : tensor<4x3xf32>, tensor<3x8xf32> -> tensor<4x8xf32>
  %t = tape.tanh %h : tensor<4x8xf32>
  %s = tape.sum %t axes = [0, 1] : tensor<4x8xf32> -> tensor<f32>
  func.return %s : tensor<f32>
}
