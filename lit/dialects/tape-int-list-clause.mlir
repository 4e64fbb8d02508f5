// Integer-list clauses reject booleans, as the integer clause does.
// RUN: tapeml-opt %s --parsing-diagnostics | filecheck %s

// CHECK: Expected integer literal
func.func @f(%a: tensor<2x1xf32>) {
  %0 = tape.permute %a perm = [true, false] : tensor<2x1xf32> -> tensor<1x2xf32>
  func.return
}
