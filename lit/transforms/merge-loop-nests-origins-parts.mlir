// RUN: tapeml-opt %s -p 'tape-to-loops{libm=true any_batch=true},outline-parallel-loops{any_batch=true},merge-loop-nests{every=true}' | filecheck %s

// On several threads (jit's batch_argnums): each parallel loop outlined for the thread pool
// keeps the tape op it comes from on its loop, so parts alike at this size only (tanh over
// 4 x 6 and over 24) stay two functions, and alike ops (the two tanh over 4 x 6) share one.
// CHECK:       func.func @f(
// CHECK:         kernel.parallel_for @[[SAME:f_part[0-9]+]](%x, %out.a)
// CHECK:         kernel.parallel_for @[[SAME]](%y, %out.b)
// CHECK:         kernel.parallel_for @[[OTHER:f_part[0-9]+]](%w, %out.c)
// CHECK-NEXT:    func.return
// CHECK:       func.func @[[OTHER]](
// CHECK:         math.tanh
// CHECK:       } {tapeml.origin = "tape.tanh 24 -> 24 f32"}
// CHECK:       func.func @[[SAME]](
// CHECK:         math.tanh
// CHECK:       } {tapeml.origin = "tape.tanh 4x6 -> 4x6 f32"}
// CHECK-NOT:   func.func

func.func @f(%x: tensor<4x6xf32>, %y: tensor<4x6xf32>, %w: tensor<24xf32>) -> (tensor<4x6xf32>, tensor<4x6xf32>, tensor<24xf32>) {
  %a = tape.tanh %x : tensor<4x6xf32>
  %b = tape.tanh %y : tensor<4x6xf32>
  %c = tape.tanh %w : tensor<24xf32>
  func.return %a, %b, %c : tensor<4x6xf32>, tensor<4x6xf32>, tensor<24xf32>
}
