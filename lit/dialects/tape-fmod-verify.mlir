// The verifier rules of tape.fmod: floats only, operands of one type, the result their type;
// each diagnostic names the op and the types, and is located at the failing op.
//
// RUN: tapeml-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @fmod_takes_floats(%a: tensor<2xi32>) {
  // CHECK: tape-fmod-verify.mlir:[[# @LINE + 1]]:3: error: tape.fmod: lhs must be a statically shaped tensor of f32 or f64, got tensor<2xi32>
  %0 = tape.fmod %a, %a : tensor<2xi32>
  func.return
}

// -----

func.func @fmod_takes_no_i64(%a: tensor<2xf32>, %b: tensor<2xi64>) {
  // CHECK: tape-fmod-verify.mlir:[[# @LINE + 1]]:3: error: tape.fmod: rhs must be a statically shaped tensor of f32 or f64, got tensor<2xi64>
  %0 = tape.fmod %a, %b : tensor<2xf32>, tensor<2xi64> -> tensor<2xf32>
  func.return
}

// -----

func.func @fmod_operands_of_one_type(%a: tensor<2xf32>, %b: tensor<2xf64>) {
  // CHECK: tape-fmod-verify.mlir:[[# @LINE + 1]]:3: error: tape.fmod: operands must have the same type (broadcast explicitly); got tensor<2xf32>, tensor<2xf64>
  %0 = tape.fmod %a, %b : tensor<2xf32>, tensor<2xf64> -> tensor<2xf32>
  func.return
}

// -----

func.func @fmod_keeps_the_type(%a: tensor<2xf64>) {
  // CHECK: tape-fmod-verify.mlir:[[# @LINE + 1]]:3: error: tape.fmod: result type tensor<2xf32> does not match tensor<2xf64>, the type its operands and parameters give
  %0 = tape.fmod %a, %a : tensor<2xf64> -> tensor<2xf32>
  func.return
}
