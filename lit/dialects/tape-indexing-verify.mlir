// One chunk per verifier rule of tape.take and tape.scatter (tapeml/dialects/tape/indexing.py):
// each call site of check / any_tensor / tensor_of in their shape rules, and the result-type
// check of TapeOp.verify_ (base.py). Each diagnostic is located at the failing op and names it.
//
// With --verify-diagnostics, tapeml-opt prints each chunk's diagnostic on stdout and exits 0.
// RUN: tapeml-opt %s --split-input-file --verify-diagnostics | filecheck %s

// TakeOp: x must be a tape tensor
func.func @case0(%x: tensor<2x?xf32>, %i: tensor<2xi32>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.take: x must be a statically shaped tensor of i1, i32, i64, f32 or f64, got tensor<2x?xf32>
  %0 = tape.take %x, %i axis = 0 : tensor<2x?xf32>, tensor<2xi32> -> tensor<2x?xf32>
  func.return
}

// -----

// TakeOp: indices must be i32 or i64
func.func @case1(%x: tensor<2x3xf32>, %i: tensor<2xf32>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.take: indices must be a statically shaped tensor of i32 or i64, got tensor<2xf32>
  %0 = tape.take %x, %i axis = 0 : tensor<2x3xf32>, tensor<2xf32> -> tensor<2x3xf32>
  func.return
}

// -----

// TakeOp: indices are not i1
func.func @case2(%x: tensor<2x3xf32>, %i: tensor<2xi1>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.take: indices must be a statically shaped tensor of i32 or i64, got tensor<2xi1>
  %0 = tape.take %x, %i axis = 0 : tensor<2x3xf32>, tensor<2xi1> -> tensor<2x3xf32>
  func.return
}

// -----

// TakeOp: axis in range
func.func @case3(%x: tensor<2x3xf32>, %i: tensor<2xi32>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.take: axis 2 is out of range for x tensor<2x3xf32>
  %0 = tape.take %x, %i axis = 2 : tensor<2x3xf32>, tensor<2xi32> -> tensor<2x3xf32>
  func.return
}

// -----

// TakeOp: axis in range (negative axes are normalized by the builder, not the IR)
func.func @case4(%x: tensor<2x3xf32>, %i: tensor<2xi32>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.take: axis -1 is out of range for x tensor<2x3xf32>
  %0 = tape.take %x, %i axis = -1 : tensor<2x3xf32>, tensor<2xi32> -> tensor<2x2xf32>
  func.return
}

// -----

// TakeOp: a rank-0 x has no axis
func.func @case5(%x: tensor<f32>, %i: tensor<2xi32>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.take: axis 0 is out of range for x tensor<f32>
  %0 = tape.take %x, %i axis = 0 : tensor<f32>, tensor<2xi32> -> tensor<2xf32>
  func.return
}

// -----

// TakeOp: nothing to take from an empty axis
func.func @case6(%x: tensor<2x0xf32>, %i: tensor<3xi64>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.take: cannot take tensor<3xi64> positions from axis 1 of x tensor<2x0xf32>: the axis is empty
  %0 = tape.take %x, %i axis = 1 : tensor<2x0xf32>, tensor<3xi64> -> tensor<2x3xf32>
  func.return
}

// -----

// TapeOp.verify_: take's result shape
func.func @case7(%x: tensor<2x3xf32>, %i: tensor<4xi32>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.take: result type tensor<2x3xf32> does not match tensor<2x4xf32>, the type its operands and parameters give
  %0 = tape.take %x, %i axis = 1 : tensor<2x3xf32>, tensor<4xi32> -> tensor<2x3xf32>
  func.return
}

// -----

// TapeOp.verify_: take's result element type
func.func @case8(%x: tensor<2x3xf32>, %i: tensor<4xi32>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.take: result type tensor<2x4xi32> does not match tensor<2x4xf32>, the type its operands and parameters give
  %0 = tape.take %x, %i axis = 1 : tensor<2x3xf32>, tensor<4xi32> -> tensor<2x4xi32>
  func.return
}

// -----

// ScatterOp: add, max and min take numbers, not i1
func.func @case9(%x: tensor<3xi1>, %i: tensor<2xi32>, %u: tensor<2xi1>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.scatter: x of a scatter add must be a statically shaped tensor of i32, i64, f32 or f64, got tensor<3xi1>
  %0 = tape.scatter add, %x, %i, %u axis = 0 : tensor<3xi1>, tensor<2xi32>, tensor<2xi1> -> tensor<3xi1>
  func.return
}

// -----

// ScatterOp: x must be statically shaped
func.func @case10(%x: tensor<?xf32>, %i: tensor<2xi32>, %u: tensor<2xf32>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.scatter: x must be a statically shaped tensor of i1, i32, i64, f32 or f64, got tensor<?xf32>
  %0 = tape.scatter set, %x, %i, %u axis = 0 : tensor<?xf32>, tensor<2xi32>, tensor<2xf32> -> tensor<?xf32>
  func.return
}

// -----

// ScatterOp: indices must be i32 or i64
func.func @case11(%x: tensor<3xf32>, %i: tensor<2xf64>, %u: tensor<2xf32>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.scatter: indices must be a statically shaped tensor of i32 or i64, got tensor<2xf64>
  %0 = tape.scatter max, %x, %i, %u axis = 0 : tensor<3xf32>, tensor<2xf64>, tensor<2xf32> -> tensor<3xf32>
  func.return
}

// -----

// ScatterOp: axis in range
func.func @case12(%x: tensor<3xf32>, %i: tensor<2xi32>, %u: tensor<2xf32>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.scatter: axis 1 is out of range for x tensor<3xf32>
  %0 = tape.scatter min, %x, %i, %u axis = 1 : tensor<3xf32>, tensor<2xi32>, tensor<2xf32> -> tensor<3xf32>
  func.return
}

// -----

// ScatterOp: updates of x's element type
func.func @case13(%x: tensor<3xf32>, %i: tensor<2xi32>, %u: tensor<2xf64>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.scatter: updates must have x's element type; got x tensor<3xf32> and updates tensor<2xf64>
  %0 = tape.scatter set, %x, %i, %u axis = 0 : tensor<3xf32>, tensor<2xi32>, tensor<2xf64> -> tensor<3xf32>
  func.return
}

// -----

// ScatterOp: updates shaped x.shape[:axis] + indices.shape + x.shape[axis+1:]
func.func @case14(%x: tensor<3x4xf32>, %i: tensor<2x5xi64>, %u: tensor<3x2x4xf32>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.scatter: updates must have shape [3, 2, 5] (x.shape[:axis] + indices.shape + x.shape[axis+1:] for x tensor<3x4xf32>, indices tensor<2x5xi64>, axis 1); got tensor<3x2x4xf32>
  %0 = tape.scatter add, %x, %i, %u axis = 1 : tensor<3x4xf32>, tensor<2x5xi64>, tensor<3x2x4xf32> -> tensor<3x4xf32>
  func.return
}

// -----

// ScatterOp: the kind is one of four (the generic form can hold any string)
func.func @case15(%x: tensor<3xf32>, %i: tensor<2xi32>, %u: tensor<2xf32>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.scatter: kind must be one of set, add, max, min, got 'mul'
  %0 = "tape.scatter"(%x, %i, %u) <{kind = "mul", axis = 0 : i64}> : (tensor<3xf32>, tensor<2xi32>, tensor<2xf32>) -> tensor<3xf32>
  func.return
}

// -----

// TapeOp.verify_: scatter's result is x's type
func.func @case16(%x: tensor<3xf32>, %i: tensor<2xi32>, %u: tensor<2xf32>) {
  // CHECK: tape-indexing-verify.mlir:[[# @LINE + 1]]:3: error: tape.scatter: result type tensor<2xf32> does not match tensor<3xf32>, the type its operands and parameters give
  %0 = tape.scatter set, %x, %i, %u axis = 0 : tensor<3xf32>, tensor<2xi32>, tensor<2xf32> -> tensor<2xf32>
  func.return
}
