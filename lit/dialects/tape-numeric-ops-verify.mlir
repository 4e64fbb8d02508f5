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
