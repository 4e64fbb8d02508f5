// RUN: tapeml-opt %s -p 'tape-to-loops{row_reductions=true any_batch=true},outline-parallel-loops{any_batch=true}' | filecheck %s
// RUN: tapeml-opt %s -p 'tape-to-loops{row_reductions=true any_batch=true},outline-parallel-loops{any_batch=true}' | tapeml-opt | filecheck %s

// For every batch size (jit's batch_argnums): the row max of 2 rows, fewer than the 8 folded
// side by side, keeps its blocks' loop (here of no trips) and its rest's, and both are
// outlined, so that at 8 or more rows the program is the same but for its numbers. Each
// part writes its index's step and lower bound even where they are 1 and 0 (delinearize's
// any_size).
// CHECK:       func.func @f(
// CHECK:         kernel.parallel_for @f_part0(%y, %out.m) {iterations = 0 : i64}
// CHECK:         kernel.parallel_for @f_part1(%y, %out.m) {iterations = 2 : i64}
// CHECK:         func.return
// CHECK:       func.func @f_part1(
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT:      %[[STEP:.*]] = arith.muli %[[I]], %[[ONE]] : index
// CHECK-NEXT:      %[[ZERO:.*]] = arith.constant 0 : index
// CHECK-NEXT:      %{{.*}} = arith.addi %[[STEP]], %[[ZERO]] : index
// CHECK:       func.func @f_part0(

func.func @f(%y: tensor<2x5xf32>) -> (tensor<2xf32> {tapeml.name = "m"}) {
  %m = tape.max %y axes = [1] : tensor<2x5xf32> -> tensor<2xf32>
  func.return %m : tensor<2xf32>
}
