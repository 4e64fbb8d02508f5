// Mistakes in tape.take's and tape.scatter's custom syntax are parse errors, located at the
// offending token (base.py's TapeOp.parse and its Keyword and Int clauses).
//
// With --parsing-diagnostics, tapeml-opt prints each chunk's parse error on stdout, as
// `file:line:col: error: message` and the source line, and exits 0.
// RUN: tapeml-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// The scatter kind must be one of the four.
func.func @bad_kind(%x: tensor<3xf32>, %i: tensor<2xi32>, %u: tensor<2xf32>) {
  // CHECK:      tape-indexing-parse-errors.mlir:[[# @LINE + 2]]:21: error: Expected one of 'add', 'max', 'min', 'set' (the kind)
  // CHECK-NEXT:   %0 = tape.scatter mul, %x, %i, %u axis = 0 : tensor<3xf32>, tensor<2xi32>, tensor<2xf32> -> tensor<3xf32>
  %0 = tape.scatter mul, %x, %i, %u axis = 0 : tensor<3xf32>, tensor<2xi32>, tensor<2xf32> -> tensor<3xf32>
  func.return
}

// -----

// The kind comes first and is not optional.
func.func @missing_kind(%x: tensor<3xf32>, %i: tensor<2xi32>, %u: tensor<2xf32>) {
  // CHECK: tape-indexing-parse-errors.mlir:[[# @LINE + 1]]:21: error: Expected one of 'add', 'max', 'min', 'set' (the kind)
  %0 = tape.scatter %x, %i, %u axis = 0 : tensor<3xf32>, tensor<2xi32>, tensor<2xf32> -> tensor<3xf32>
  func.return
}

// -----

// take has two operands: x and the indices.
func.func @take_operands(%x: tensor<3xf32>) {
  // CHECK: tape-indexing-parse-errors.mlir:[[# @LINE + 1]]:18: error: tape.take takes 2 operands, got 1
  %0 = tape.take %x axis = 0 : tensor<3xf32> -> tensor<3xf32>
  func.return
}

// -----

// The axis is not optional.
func.func @missing_axis(%x: tensor<3xf32>, %i: tensor<2xi32>) {
  // CHECK: tape-indexing-parse-errors.mlir:[[# @LINE + 1]]:25: error: Expected 'axis'
  %0 = tape.take %x, %i : tensor<3xf32>, tensor<2xi32> -> tensor<2xf32>
  func.return
}
