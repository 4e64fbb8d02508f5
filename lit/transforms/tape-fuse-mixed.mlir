// RUN: tapeml-opt %s --split-input-file -p tape-fuse | filecheck %s
// RUN: tapeml-opt %s --split-input-file -p tape-fuse,tape-to-loops | filecheck %s --check-prefix=LOOPS

// A causal mask: cmp of two iotas feeding a select, broadcast to the scores. One group, the
// iotas its positions (tape.index, axes moved past the leading dim), no mask buffer.
// CHECK-LABEL: func.func @causal
// CHECK-NEXT:    %{{.*}} = tape.fused %s : tensor<2x4x4xf32> -> tensor<2x4x4xf32> {
// CHECK-NEXT:    ^bb0(%[[X:.*]]: tensor<f32>):
// CHECK-DAG:       %[[I:.*]] = tape.index axis = 1 : tensor<i64>
// CHECK-DAG:       %[[J:.*]] = tape.index axis = 2 : tensor<i64>
// CHECK-DAG:       %[[NINF:.*]] = tape.constant dense<"0x000080FF"> : tensor<f32>
// CHECK:           %[[KEEP:.*]] = tape.cmp ge, %[[I]], %[[J]] : tensor<i64> -> tensor<i1>
// CHECK-NEXT:      %[[Y:.*]] = tape.select %[[KEEP]], %[[X]], %[[NINF]] : tensor<i1>, tensor<f32>, tensor<f32> -> tensor<f32>
// CHECK-NEXT:      tape.yield %[[Y]] : tensor<f32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return
// LOOPS-LABEL: func.func @causal
// LOOPS-NOT:     memref.alloc
// LOOPS:         "scf.parallel"(%{{.*}}) <{operandSegmentSizes = array<i32: 3, 3, 3, 0>}> ({
// LOOPS-NEXT:    ^bb0(%{{.*}}: index, %[[R:.*]]: index, %[[C:.*]]: index):
// LOOPS:           %[[X:.*]] = memref.load %s[%{{.*}}] : memref<32xf32>
// LOOPS-DAG:       %[[J:.*]] = arith.index_cast %[[C]] : index to i64
// LOOPS-DAG:       %[[I:.*]] = arith.index_cast %[[R]] : index to i64
// LOOPS:           %[[KEEP:.*]] = arith.cmpi sge, %[[I]], %[[J]] : i64
// LOOPS-NEXT:      %[[Y:.*]] = arith.select %[[KEEP]], %[[X]], %{{.*}} : f32
// LOOPS:           memref.store %[[Y]], %out.y[%{{.*}}] : memref<32xf32>
// LOOPS-NEXT:      scf.reduce
// LOOPS-NEXT:    })
// LOOPS-NEXT:    func.return
func.func @causal(%s: tensor<2x4x4xf32>) -> tensor<2x4x4xf32> {
  %i = tape.iota axis = 0 : tensor<4x4xi64>
  %j = tape.iota axis = 1 : tensor<4x4xi64>
  %keep = tape.cmp ge, %i, %j : tensor<4x4xi64> -> tensor<4x4xi1>
  %b = tape.broadcast %keep : tensor<4x4xi1> -> tensor<2x4x4xi1>
  %ninf = tape.constant dense<"0x000080FF"> : tensor<2x4x4xf32>
  %y = tape.select %b, %s, %ninf : tensor<2x4x4xi1>, tensor<2x4x4xf32>, tensor<2x4x4xf32> -> tensor<2x4x4xf32>
  func.return %y : tensor<2x4x4xf32>
}

// -----

// A mask of positions read by two groups (the forward and the backward select) is
// recomputed in each: it reads no buffer. Any other group with two users stays one.
// CHECK-LABEL: func.func @two_users
// CHECK-NEXT:    %{{.*}} = tape.fused %a : tensor<4x4xf32> -> tensor<4x4xf32> {
// CHECK:           tape.index axis = 0
// CHECK:           tape.index axis = 1
// CHECK:           tape.select
// CHECK:         %{{.*}} = tape.fused %c : tensor<4x4xf32> -> tensor<4x4xf32> {
// CHECK:           tape.index axis = 0
// CHECK:           tape.index axis = 1
// CHECK:           tape.select
// CHECK-NOT:     tape.iota
// CHECK:         func.return
func.func @two_users(%a: tensor<4x4xf32>, %c: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %i = tape.iota axis = 0 : tensor<4x4xi64>
  %j = tape.iota axis = 1 : tensor<4x4xi64>
  %keep = tape.cmp le, %j, %i : tensor<4x4xi64> -> tensor<4x4xi1>
  %zero = tape.constant dense<0.0> : tensor<4x4xf32>
  %x = tape.select %keep, %a, %zero : tensor<4x4xi1>, tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %y = tape.select %keep, %c, %zero : tensor<4x4xi1>, tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  func.return %x, %y : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// Casts inside a float chain and integer index arithmetic: one group each, every block
// argument and value typed as its own element.
// CHECK-LABEL: func.func @casts
// CHECK-NEXT:    %{{.*}} = tape.fused %x, %n : tensor<8xf32>, tensor<8xi32> -> tensor<8xf64> {
// CHECK-NEXT:    ^bb0(%{{.*}}: tensor<f32>, %{{.*}}: tensor<i32>):
// CHECK-DAG:       tape.cast %{{.*}} : tensor<f32> -> tensor<i64>
// CHECK-DAG:       tape.cast %{{.*}} : tensor<i32> -> tensor<i64>
// CHECK:           tape.floordiv
// CHECK:           tape.cast %{{.*}} : tensor<i64> -> tensor<f64>
// CHECK:           tape.yield %{{.*}} : tensor<f64>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return
func.func @casts(%x: tensor<8xf32>, %n: tensor<8xi32>) -> tensor<8xf64> {
  %xi = tape.cast %x : tensor<8xf32> -> tensor<8xi64>
  %ni = tape.cast %n : tensor<8xi32> -> tensor<8xi64>
  %q = tape.floordiv %xi, %ni : tensor<8xi64>
  %f = tape.cast %q : tensor<8xi64> -> tensor<8xf64>
  %h = tape.constant dense<0.5> : tensor<8xf64>
  %y = tape.mul %f, %h : tensor<8xf64>
  func.return %y : tensor<8xf64>
}

// -----

// An iota along a dim of 1 broadcast wider is zeros there, not the group's position: it
// stays an input.
// CHECK-LABEL: func.func @broadcast_iota
// CHECK-NEXT:    %[[I:.*]] = tape.iota axis = 0 : tensor<1x4xi64>
// CHECK-NEXT:    %{{.*}} = tape.fused %[[I]], %x : tensor<1x4xi64>, tensor<3x4xi64> -> tensor<3x4xi64> {
// CHECK-NOT:       tape.index
// CHECK:         func.return
func.func @broadcast_iota(%x: tensor<3x4xi64>) -> tensor<3x4xi64> {
  %i = tape.iota axis = 0 : tensor<1x4xi64>
  %b = tape.broadcast %i : tensor<1x4xi64> -> tensor<3x4xi64>
  %y = tape.add %b, %x : tensor<3x4xi64>
  func.return %y : tensor<3x4xi64>
}

// -----

// A bias add read by an activation and by another group (its pullback, say) is computed in
// each: it reads one buffer as large as itself, so neither reads more, and it is never
// written. An exp read twice is written once and read back (it is not cheap).
// CHECK-LABEL: func.func @copies
// CHECK-NEXT:    %{{.*}} = tape.fused %x, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32> {
// CHECK:           tape.add
// CHECK:           tape.tanh
// CHECK:         %{{.*}} = tape.fused %x, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32> {
// CHECK:           tape.add
// CHECK:           tape.exp
// CHECK:         %[[E:.*]] = tape.exp %x
// CHECK-NEXT:    %{{.*}} = tape.tanh %[[E]]
// CHECK-NEXT:    %{{.*}} = tape.fused %[[E]]
// CHECK:           tape.mul
// CHECK:         func.return
func.func @copies(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %bb = tape.broadcast %b : tensor<8xf32> -> tensor<4x8xf32>
  %h = tape.add %x, %bb : tensor<4x8xf32>
  %t = tape.tanh %h : tensor<4x8xf32>
  %u = tape.exp %h : tensor<4x8xf32>
  %e = tape.exp %x : tensor<4x8xf32>
  %two = tape.constant dense<2.0> : tensor<4x8xf32>
  %te = tape.tanh %e : tensor<4x8xf32>
  %me = tape.mul %e, %two : tensor<4x8xf32>
  func.return %t, %u, %te, %me : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
