// RUN: tapeml-opt %s -p 'tape-to-loops{libm=true any_batch=true},merge-loop-nests{every=true}' | filecheck %s

// Under any_batch each nest is tagged with the tape op it comes from (its kind and shapes), and
// merge-loop-nests{every} shares a function only between nests of alike ops: tanh over %w
// (24 elements) lowers to the very loop of tanh over %x (4 x 6), but a batch of another size
// would part them, so they stay apart at this one too; the two tanh over 4 x 6 share one.
// CHECK:       func.func @f(
// CHECK-NEXT:    func.call @f_nest0(%x, %out.a) : (memref<24xf32>, memref<24xf32>) -> ()
// CHECK-NEXT:    func.call @f_nest0(%y, %out.b) : (memref<24xf32>, memref<24xf32>) -> ()
// CHECK-NEXT:    func.call @f_nest1(%w, %out.c) : (memref<24xf32>, memref<24xf32>) -> ()
// CHECK-NEXT:    func.return
// CHECK:       func.func @f_nest1(
// CHECK:         "scf.parallel"
// CHECK:           math.tanh
// CHECK:         }) {tapeml.origin = "tape.tanh 24 -> 24 f32"}
// CHECK:       func.func @f_nest0(
// CHECK:         "scf.parallel"
// CHECK:           math.tanh
// CHECK:         }) {tapeml.origin = "tape.tanh 4x6 -> 4x6 f32"}

func.func @f(%x: tensor<4x6xf32>, %y: tensor<4x6xf32>, %w: tensor<24xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<24xf32>) {
  %a = tape.tanh %x : tensor<4x6xf32>
  %b = tape.tanh %y : tensor<4x6xf32>
  %c = tape.tanh %w : tensor<24xf32>
  func.return %a, %b, %c : tensor<4x6xf32>, tensor<4x6xf32>, tensor<24xf32>
}
