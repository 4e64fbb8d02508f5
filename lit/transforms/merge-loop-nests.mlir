// RUN: tapeml-opt %s -p 'tape-to-loops{libm=true},merge-loop-nests' | filecheck %s
// RUN: tapeml-opt %s -p 'tape-to-loops{libm=true},merge-loop-nests' | tapeml-opt | filecheck %s
// RUN: tapeml-opt %s -p 'tape-to-loops{libm=true},merge-loop-nests,convert-scf-to-cf,convert-loops-to-llvm' -t llvm | filecheck %s --check-prefix=IR

// tanh over %x and tanh over %y are one nest over other buffers: one function, called twice
// with each copy's buffers; exp over %x is another nest and stays where it is.
// CHECK:       func.func @f(%x: memref<24xf32> {{.*}}, %y: memref<24xf32> {{.*}}, %out.a: memref<24xf32> {{.*}}, %out.b: memref<24xf32> {{.*}}, %out.c: memref<24xf32> {{.*}}) {
// CHECK-NEXT:    func.call @f_nest0(%x, %out.a) : (memref<24xf32>, memref<24xf32>) -> ()
// CHECK-NEXT:    func.call @f_nest0(%y, %out.b) : (memref<24xf32>, memref<24xf32>) -> ()
// CHECK:         "scf.parallel"
// CHECK:           math.exp
// CHECK:         func.return
// CHECK:       func.func @f_nest0(%{{.*}}: memref<24xf32>, %{{.*}}: memref<24xf32>) {
// CHECK:         "scf.parallel"
// CHECK:           math.tanh
// CHECK-NOT:       math.exp
// CHECK:         func.return

// In LLVM IR the calls stay calls of the one function.
// IR:      define void @"tapeml.f"(
// IR:        call {{.*}}@"tapeml.f_nest0"(ptr
// IR:        call {{.*}}@"tapeml.f_nest0"(ptr
// IR:      define void @"tapeml.f_nest0"(

func.func @f(%x: tensor<4x6xf32>, %y: tensor<4x6xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>) {
  %a = tape.tanh %x : tensor<4x6xf32>
  %b = tape.tanh %y : tensor<4x6xf32>
  %c = tape.exp %x : tensor<4x6xf32>
  func.return %a, %b, %c : tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>
}
