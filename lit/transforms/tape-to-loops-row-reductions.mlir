// RUN: tapeml-opt %s -p 'tape-to-loops{row_reductions=true}' | filecheck %s
// RUN: tapeml-opt %s -p 'tape-to-loops' | filecheck %s --check-prefix=ONE

// A sum over the batch (a bias gradient) with row_reductions: a row of 512 f64 accumulators,
// zeroed, then per batch row an inner loop along the contiguous axis, then rounded once.
// CHECK:       func.func @f(%x: memref<6144xf32> {tapeml.name = "x"}, %out.s: memref<512xf32> {tapeml.name = "out.s"}) {
// CHECK-NEXT:    %[[ACC:.*]] = memref.alloc() : memref<512xf64>
// CHECK:         scf.for
// CHECK:           memref.store %{{.*}}, %[[ACC]][%{{.*}}] : memref<512xf64>
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:           scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:             memref.load %x
// CHECK:             arith.extf
// CHECK:             memref.load %[[ACC]]
// CHECK:             arith.addf
// CHECK:             memref.store %{{.*}}, %[[ACC]]
// CHECK:         scf.for
// CHECK:           arith.truncf
// CHECK:           memref.store %{{.*}}, %out.s
// CHECK:         memref.dealloc %[[ACC]] : memref<512xf64>

// Many rows (256): folded in 8 groups of 32 consecutive rows, each into a row of
// accumulators of its own, the groups in parallel; then each output adds the groups' rows in
// order (the first, then 7 more) and is rounded once.
// CHECK:       func.func @g(
// CHECK-NEXT:    %[[ACC:.*]] = memref.alloc() : memref<4096xf64>
// CHECK:         "scf.parallel"
// CHECK:         ^bb0(%[[G:.*]]: index):
// CHECK:           memref.store %{{.*}}, %[[ACC]]
// CHECK:           scf.for %{{.*}} = %{{.*}} to %[[ROWS:.*]] step
// CHECK:             arith.muli %[[G]]
// CHECK:             scf.for
// CHECK:               memref.load %x
// CHECK:               arith.addf
// CHECK:         "scf.parallel"
// CHECK:           memref.load %[[ACC]]
// CHECK:           scf.for {{.*}} iter_args
// CHECK:             memref.load %[[ACC]]
// CHECK:             arith.addf
// CHECK:           arith.truncf
// CHECK:           memref.store %{{.*}}, %out.s
// CHECK:         memref.dealloc %[[ACC]] : memref<4096xf64>

// Without it (the GPU's form): one output per parallel iteration, its terms in a loop.
// ONE:         "scf.parallel"
// ONE:           scf.for {{.*}} iter_args
// ONE-NOT:     memref.alloc

func.func @f(%x: tensor<12x512xf32>) -> (tensor<512xf32> {tapeml.name = "s"}) {
  %s = tape.sum %x axes = [0] : tensor<12x512xf32> -> tensor<512xf32>
  func.return %s : tensor<512xf32>
}

func.func @g(%x: tensor<256x512xf32>) -> (tensor<512xf32> {tapeml.name = "s"}) {
  %s = tape.sum %x axes = [0] : tensor<256x512xf32> -> tensor<512xf32>
  func.return %s : tensor<512xf32>
}
