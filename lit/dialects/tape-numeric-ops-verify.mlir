// The verifier rules of issue 17's "Ops" part: each diagnostic names the op and the types, and
// is located at the failing op.
//
// RUN: tapeml-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @erf_takes_floats(%a: tensor<2xi32>) {
  // CHECK: tape-numeric-ops-verify.mlir:[[# @LINE + 1]]:3: error: tape.erf: operand must be a statically shaped tensor of f32 or f64, got tensor<2xi32>
  %0 = tape.erf %a : tensor<2xi32>
  func.return
}

// -----

func.func @abs_takes_no_i1(%a: tensor<2xi1>) {
  // CHECK: tape-numeric-ops-verify.mlir:[[# @LINE + 1]]:3: error: tape.abs: operand must be a statically shaped tensor of i32, i64, f32 or f64, got tensor<2xi1>
  %0 = tape.abs %a : tensor<2xi1>
  func.return
}

// -----

func.func @round_keeps_the_type(%a: tensor<2xf32>) {
  // CHECK: tape-numeric-ops-verify.mlir:[[# @LINE + 1]]:3: error: tape.round: result type tensor<2xi32> does not match tensor<2xf32>, the type its operands and parameters give
  %0 = tape.round %a : tensor<2xf32> -> tensor<2xi32>
  func.return
}

// -----

func.func @argmax_axis_in_range(%a: tensor<2x3xf32>) {
  // CHECK: tape-numeric-ops-verify.mlir:[[# @LINE + 1]]:3: error: tape.argmax: axis 2 must be a dim of tensor<2x3xf32>
  %0 = tape.argmax %a axis = 2 : tensor<2x3xf32> -> tensor<2xi64>
  func.return
}

// -----

func.func @argmin_over_an_empty_axis(%a: tensor<2x0xf32>) {
  // CHECK: tape-numeric-ops-verify.mlir:[[# @LINE + 1]]:3: error: tape.argmin: cannot take the argmin over the empty axis 1 of tensor<2x0xf32>
  %0 = tape.argmin %a axis = 1 : tensor<2x0xf32> -> tensor<2xi64>
  func.return
}

// -----

func.func @argmax_gives_i64(%a: tensor<2x3xf32>) {
  // CHECK: tape-numeric-ops-verify.mlir:[[# @LINE + 1]]:3: error: tape.argmax: result type tensor<2xi32> does not match tensor<2xi64>, the type its operands and parameters give
  %0 = tape.argmax %a axis = 1 : tensor<2x3xf32> -> tensor<2xi32>
  func.return
}

// -----

func.func @cumsum_takes_numbers(%a: tensor<3xi1>) {
  // CHECK: tape-numeric-ops-verify.mlir:[[# @LINE + 1]]:3: error: tape.cumsum: operand must be a statically shaped tensor of i32, i64, f32 or f64, got tensor<3xi1>
  %0 = tape.cumsum %a axis = 0 : tensor<3xi1>
  func.return
}

// -----

func.func @cumsum_of_a_scalar() {
  %s = "test.op"() : () -> tensor<f32>
  // CHECK: tape-numeric-ops-verify.mlir:[[# @LINE + 1]]:3: error: tape.cumsum: axis 0 must be a dim of tensor<f32>
  %0 = tape.cumsum %s axis = 0 : tensor<f32>
  func.return
}

// -----

func.func @iota_of_numbers() {
  // CHECK: tape-numeric-ops-verify.mlir:[[# @LINE + 1]]:3: error: tape.iota: result must be a statically shaped tensor of i32, i64, f32 or f64, got tensor<3xi1>
  %0 = tape.iota axis = 0 : tensor<3xi1>
  func.return
}

// -----

func.func @iota_axis_in_range() {
  // CHECK: tape-numeric-ops-verify.mlir:[[# @LINE + 1]]:3: error: tape.iota: axis 1 must be a dim of tensor<3xi64>
  %0 = tape.iota axis = 1 : tensor<3xi64>
  func.return
}
