// The ops of issue 17's "Ops" part (abs, sign, floor, ceil, round, erf; argmax, argmin; cumsum;
// iota) in their custom syntax, printed back exactly.
//
// RUN: TAPE_ROUNDTRIP
// RUN: TAPE_GENERIC_ROUNDTRIP
// RUN: tapeml-opt %s --split-input-file > %t.custom.mlir
// RUN: tapeml-opt %s --split-input-file --print-op-generic | tapeml-opt --split-input-file > %t.generic.mlir
// RUN: diff %t.custom.mlir %t.generic.mlir

// CHECK-LABEL: func.func @unary
// CHECK-NEXT:    %0 = tape.abs %x : tensor<2x3xf32>
// CHECK-NEXT:    %1 = tape.abs %i : tensor<4xi32>
// CHECK-NEXT:    %2 = tape.sign %x : tensor<2x3xf32>
// CHECK-NEXT:    %3 = tape.sign %i : tensor<4xi32>
// CHECK-NEXT:    %4 = tape.floor %x : tensor<2x3xf32>
// CHECK-NEXT:    %5 = tape.ceil %d : tensor<5xf64>
// CHECK-NEXT:    %6 = tape.round %d : tensor<5xf64>
// CHECK-NEXT:    %7 = tape.round %i : tensor<4xi32>
// CHECK-NEXT:    %8 = tape.erf %x : tensor<2x3xf32>
// CHECK-NEXT:    %9 = tape.erf %d : tensor<5xf64>
func.func @unary(%x: tensor<2x3xf32>, %d: tensor<5xf64>, %i: tensor<4xi32>) {
  %0 = tape.abs %x : tensor<2x3xf32>
  %1 = tape.abs %i : tensor<4xi32>
  %2 = tape.sign %x : tensor<2x3xf32>
  %3 = tape.sign %i : tensor<4xi32>
  %4 = tape.floor %x : tensor<2x3xf32>
  %5 = tape.ceil %d : tensor<5xf64>
  %6 = tape.round %d : tensor<5xf64>
  %7 = tape.round %i : tensor<4xi32>
  %8 = tape.erf %x : tensor<2x3xf32>
  %9 = tape.erf %d : tensor<5xf64>
  func.return
}

// -----

// CHECK-LABEL: func.func @along_an_axis
// CHECK-NEXT:    %0 = tape.argmax %x axis = 1 : tensor<2x3xf32> -> tensor<2xi64>
// CHECK-NEXT:    %1 = tape.argmin %x axis = 0 keepdims : tensor<2x3xf32> -> tensor<1x3xi64>
// CHECK-NEXT:    %2 = tape.argmax %b axis = 0 : tensor<4xi1> -> tensor<i64>
// CHECK-NEXT:    %3 = tape.cumsum %x axis = 1 : tensor<2x3xf32>
// CHECK-NEXT:    %4 = tape.cumsum %i axis = 0 reverse : tensor<4xi32>
// CHECK-NEXT:    %5 = tape.iota axis = 1 : tensor<2x3xi64>
// CHECK-NEXT:    %6 = tape.iota axis = 0 {tapeml.note = "kept"} : tensor<5xf64>
func.func @along_an_axis(%x: tensor<2x3xf32>, %i: tensor<4xi32>, %b: tensor<4xi1>) {
  %0 = tape.argmax %x axis = 1 : tensor<2x3xf32> -> tensor<2xi64>
  %1 = tape.argmin %x axis = 0 keepdims : tensor<2x3xf32> -> tensor<1x3xi64>
  %2 = tape.argmax %b axis = 0 : tensor<4xi1> -> tensor<i64>
  %3 = tape.cumsum %x axis = 1 : tensor<2x3xf32>
  %4 = tape.cumsum %i axis = 0 reverse : tensor<4xi32>
  %5 = tape.iota axis = 1 : tensor<2x3xi64>
  %6 = tape.iota axis = 0 {tapeml.note = "kept"} : tensor<5xf64>
  func.return
}
