// Mistakes in the custom syntax (base.py's TapeOp.parse, the clauses, ConstantOp.parse) are
// parse errors, located at the offending token.
//
// With --parsing-diagnostics, tapeml-opt prints each chunk's parse error on stdout, as
// `file:line:col: error: message` and the source line, and exits 0.
// RUN: tapeml-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// Keyword clause: the predicate must be one of the six.
func.func @bad_predicate(%a: tensor<2xf32>) {
  // CHECK:      tape-parse-errors.mlir:[[# @LINE + 2]]:17: error: Expected one of 'eq', 'ge', 'gt', 'le', 'lt', 'ne' (the predicate)
  // CHECK-NEXT:   %0 = tape.cmp lq, %a, %a : tensor<2xf32> -> tensor<2xi1>
  %0 = tape.cmp lq, %a, %a : tensor<2xf32> -> tensor<2xi1>
  func.return
}

// -----

// Keyword clause: the predicate comes first and is not optional.
func.func @missing_predicate(%a: tensor<2xf32>) {
  // CHECK: tape-parse-errors.mlir:[[# @LINE + 1]]:17: error: Expected one of 'eq', 'ge', 'gt', 'le', 'lt', 'ne' (the predicate)
  %0 = tape.cmp %a, %a : tensor<2xf32> -> tensor<2xi1>
  func.return
}

// -----

// Several operand types need `-> result type`.
func.func @several_types_no_result(%a: tensor<2xf32>, %b: tensor<2xf64>) {
  // CHECK: tape-parse-errors.mlir:[[# @LINE + 1]]:26: error: expected '->' and a result type after several operand types
  %0 = tape.add %a, %b : tensor<2xf32>, tensor<2xf64>
  func.return
}

// -----

// More operands than types.
func.func @operand_type_count(%a: tensor<2xf32>) {
  // CHECK: tape-parse-errors.mlir:[[# @LINE + 1]]:17: error: tape.add takes 2 operands, got 3
  %0 = tape.add %a, %a, %a : tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
  func.return
}

// -----

// tape.constant takes a dense literal.
func.func @constant_not_dense() {
  // CHECK: tape-parse-errors.mlir:[[# @LINE + 1]]:22: error: expected a dense literal such as dense<1.0> : tensor<2xf32>
  %0 = tape.constant 1.0 : f32
  func.return
}

// -----

// Float clause: a number, or inf / -inf / nan.
func.func @float_clause_word(%a: tensor<2xf32>) {
  // CHECK: tape-parse-errors.mlir:[[# @LINE + 1]]:49: error: Expected integer literal or float for value
  %0 = tape.pad %a low = [1] high = [1] value = foo : tensor<2xf32> -> tensor<4xf32>
  func.return
}

// -----

// Clauses are all required (but flags), in order.
func.func @missing_clause(%a: tensor<2xf32>) {
  // CHECK: tape-parse-errors.mlir:[[# @LINE + 1]]:30: error: Expected 'high'
  %0 = tape.pad %a low = [1] value = 0.0 : tensor<2xf32> -> tensor<4xf32>
  func.return
}

// -----

// Flag clause: the word is `keepdims`.
func.func @misspelled_flag(%a: tensor<2xf32>) {
  // CHECK: tape-parse-errors.mlir:[[# @LINE + 1]]:31: error: Expected ':'
  %0 = tape.sum %a axes = [0] keepdim : tensor<2xf32> -> tensor<1xf32>
  func.return
}

// -----

// Int clause: an integer, not a float ...
func.func @int_clause_float(%a: tensor<2xf32>) {
  // CHECK: tape-parse-errors.mlir:[[# @LINE + 1]]:30: error: Expected integer literal
  %0 = tape.concat %a axis = 0.5 : tensor<2xf32>
  func.return
}

// -----

// ... nor a boolean.
func.func @int_clause_bool(%a: tensor<2xf32>) {
  // CHECK: tape-parse-errors.mlir:[[# @LINE + 1]]:30: error: Expected integer literal
  %0 = tape.concat %a axis = true : tensor<2xf32>
  func.return
}

// -----

// IntList clause: a list of integers.
func.func @int_list_clause_float(%a: tensor<2xf32>) {
  // CHECK: tape-parse-errors.mlir:[[# @LINE + 1]]:32: error: Expected integer literal
  %0 = tape.permute %a perm = [0.0] : tensor<2xf32>
  func.return
}

// -----

// An unknown tape op.
func.func @unknown_op(%a: tensor<2xf32>) {
  // CHECK: tape-parse-errors.mlir:[[# @LINE + 1]]:{{[0-9]+}}: error: Operation tape.frobnicate is not registered
  %0 = tape.frobnicate %a : tensor<2xf32>
  func.return
}
