// RUN: tapeml-opt %s -p 'tape-to-loops{libm=true},merge-loop-nests{every=true}' | filecheck %s
// RUN: tapeml-opt %s -p 'tape-to-loops{libm=true},merge-loop-nests{every=true}' | tapeml-opt | filecheck %s

// `every` (jit's batch_argnums): the nest that occurs once (exp over %x) is a function too, so
// its buffers are parameters, as the repeated one's are.
// CHECK:       func.func @f(
// CHECK-NEXT:    func.call @f_nest0(%x, %out.a) : (memref<24xf32>, memref<24xf32>) -> ()
// CHECK-NEXT:    func.call @f_nest0(%y, %out.b) : (memref<24xf32>, memref<24xf32>) -> ()
// CHECK-NEXT:    func.call @f_nest1(%x, %out.c) : (memref<24xf32>, memref<24xf32>) -> ()
// CHECK-NEXT:    func.return
// CHECK:       func.func @f_nest1(%{{.*}}: memref<24xf32>, %{{.*}}: memref<24xf32>) {
// CHECK:           math.exp
// CHECK:       func.func @f_nest0(%{{.*}}: memref<24xf32>, %{{.*}}: memref<24xf32>) {
// CHECK:           math.tanh

func.func @f(%x: tensor<4x6xf32>, %y: tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>) {
  %a = tape.tanh %x : tensor<4x6xf32>
  %b = tape.tanh %y : tensor<4x6xf32>
  %c = tape.exp %x : tensor<4x6xf32>
  func.return %a, %b, %c : tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>
}
