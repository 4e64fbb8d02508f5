// Every way an operand can fail to dominate its use is a verifier error at the using op, which
// names the operand (xDSL 0.75 checks no dominance). See also tapeml-opt-dominance.test.
// RUN: tapeml-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Used before its definition, in the same block.
func.func @before(%a: tensor<2xf32>) -> tensor<2xf32> {
  // CHECK: tapeml-opt-dominance.mlir:[[# @LINE + 1]]:3: error: tape.add: operand #1 (%1) is used before it is defined
  %0 = tape.add %a, %1 : tensor<2xf32>
  %1 = tape.neg %a : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

// An op's own result.
func.func @itself(%a: tensor<2xf32>) -> tensor<2xf32> {
  // CHECK: tapeml-opt-dominance.mlir:[[# @LINE + 1]]:3: error: tape.add: operand #0 (%0) is used before it is defined
  %0 = tape.add %0, %a : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

// Defined in another function (a forward reference resolves across functions in xDSL): the
// function's own verifier refuses it.
// CHECK: tapeml-opt-dominance.mlir:[[# @LINE + 1]]:1: error: Operation using value defined out of its IsolatedFromAbove parent: AddOp(%0 = tape.add %a, %x : tensor<2xf32>)
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = tape.add %a, %x : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
func.func @g(%b: tensor<2xf32>) -> tensor<2xf32> {
  %x = tape.neg %b : tensor<2xf32>
  func.return %x : tensor<2xf32>
}

// -----

// Used before a nested region (a fused op's body) that defines it.
func.func @nested(%a: tensor<2xf32>) -> tensor<f32> {
  // CHECK: tapeml-opt-dominance.mlir:[[# @LINE + 1]]:3: error: tape.neg: operand #0 (%e) is defined in a region that does not enclose this op
  %n = tape.neg %e : tensor<f32>
  %0 = tape.fused %a : tensor<2xf32> -> tensor<2xf32> {
  ^bb0(%x: tensor<f32>):
    %e = tape.exp %x : tensor<f32>
    tape.yield %e : tensor<f32>
  }
  func.return %n : tensor<f32>
}

// -----

// Defined in a block that not every path to the use passes through.
func.func @branches(%c: i1, %a: f32) -> f32 {
  cf.cond_br %c, ^left, ^join
^left:
  %n = arith.negf %a : f32
  cf.br ^join
^join:
  // CHECK: tapeml-opt-dominance.mlir:[[# @LINE + 1]]:3: error: func.return: operand #0 (%n) is defined in a block that does not dominate this op
  func.return %n : f32
}

// -----

// ... which is fine where every path does, and for the entry block's arguments.
// CHECK-LABEL: func.func @dominated
// CHECK:         func.return %n : f32
func.func @dominated(%c: i1, %a: f32) -> f32 {
  %n = arith.negf %a : f32
  cf.cond_br %c, ^left, ^join
^left:
  %m = arith.negf %n : f32
  cf.br ^join
^join:
  %s = arith.addf %a, %n : f32
  func.return %n : f32
}
