// Float clauses print in MLIR's float syntax (1.0e+20, not Python's 1e+20) and round-trip.
// RUN: tapeml-opt %s | tapeml-opt | filecheck %s --check-prefix=CUSTOM
// RUN: tapeml-opt %s | tapeml-opt --print-op-generic | filecheck %s
// CUSTOM: tape.pad %a low = [1] high = [0] value = 1.0e+20 : tensor<2xf32> -> tensor<3xf32>
// CUSTOM: tape.pad %a low = [1] high = [0] value = 1.0e-05 : tensor<2xf32> -> tensor<3xf32>

// CHECK: "tape.pad"(%a) <{low = array<i64: 1>, high = array<i64: 0>, value = 1.000000e+20 : f64}>
// CHECK: "tape.pad"(%a) <{low = array<i64: 1>, high = array<i64: 0>, value = 1.000000e-05 : f64}>
func.func @f(%a: tensor<2xf32>) {
  %0 = tape.pad %a low = [1] high = [0] value = 1.0e20 : tensor<2xf32> -> tensor<3xf32>
  %1 = tape.pad %a low = [1] high = [0] value = 0.00001 : tensor<2xf32> -> tensor<3xf32>
  func.return
}
