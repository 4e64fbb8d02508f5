// tape.take and tape.scatter in their custom syntax, printed back exactly: the axis, every
// scatter kind, i32 and i64 indices of rank 0, 1 and 2, data of each element type. Operands of
// one type are printed with one type (`: T -> R`), as every tape op prints them.
//
// custom -> custom, and custom -> generic -> custom, must both print the CHECK lines:
// RUN: TAPE_ROUNDTRIP
// RUN: TAPE_GENERIC_ROUNDTRIP
// ... and print the very same text, byte for byte:
// RUN: tapeml-opt %s --split-input-file > %t.custom.mlir
// RUN: tapeml-opt %s --split-input-file --print-op-generic | tapeml-opt --split-input-file > %t.generic.mlir
// RUN: diff %t.custom.mlir %t.generic.mlir
// ... and a printed custom form is a fixed point (printing it again changes nothing):
// RUN: tapeml-opt %t.custom.mlir --split-input-file > %t.custom2.mlir
// RUN: diff %t.custom.mlir %t.custom2.mlir
// The generic form (CHECK-GENERIC): the axis an i64 property, the kind a string, first:
// RUN: TAPE_GENERIC

// CHECK-LABEL: func.func @take(%x: tensor<3x4xf32>, %i: tensor<2x5xi32>, %j: tensor<i64>, %b: tensor<4xi1>, %n: tensor<2x3xi64>) {
// CHECK-NEXT:    %0 = tape.take %x, %i axis = 1 : tensor<3x4xf32>, tensor<2x5xi32> -> tensor<3x2x5xf32>
// CHECK-NEXT:    %1 = tape.take %x, %j axis = 0 : tensor<3x4xf32>, tensor<i64> -> tensor<4xf32>
// CHECK-NEXT:    %2 = tape.take %b, %i axis = 0 : tensor<4xi1>, tensor<2x5xi32> -> tensor<2x5xi1>
// CHECK-NEXT:    %3 = tape.take %n, %n axis = 1 : tensor<2x3xi64> -> tensor<2x2x3xi64>
// CHECK-NEXT:    %4 = tape.take %n, %n axis = 0 : tensor<2x3xi64> -> tensor<2x3x3xi64>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "take"
// CHECK-GENERIC:         %0 = "tape.take"(%x, %i) <{axis = 1 : i64}> : (tensor<3x4xf32>, tensor<2x5xi32>) -> tensor<3x2x5xf32>
// CHECK-GENERIC-NEXT:    %1 = "tape.take"(%x, %j) <{axis = 0 : i64}> : (tensor<3x4xf32>, tensor<i64>) -> tensor<4xf32>

func.func @take(%x: tensor<3x4xf32>, %i: tensor<2x5xi32>, %j: tensor<i64>, %b: tensor<4xi1>, %n: tensor<2x3xi64>) {
  %0 = tape.take %x, %i axis = 1 : tensor<3x4xf32>, tensor<2x5xi32> -> tensor<3x2x5xf32>
  %1 = tape.take %x, %j axis = 0 : tensor<3x4xf32>, tensor<i64> -> tensor<4xf32>
  %2 = tape.take %b, %i axis = 0 : tensor<4xi1>, tensor<2x5xi32> -> tensor<2x5xi1>
  %3 = tape.take %n, %n axis = 1 : tensor<2x3xi64>, tensor<2x3xi64> -> tensor<2x2x3xi64>
  %4 = tape.take %n, %n axis = 0 : tensor<2x3xi64> -> tensor<2x3x3xi64>
  func.return
}

// -----

// CHECK-LABEL: func.func @scatter(%x: tensor<3x4xf64>, %i: tensor<5xi64>, %u: tensor<3x5xf64>, %b: tensor<4xi1>, %c: tensor<5xi1>, %k: tensor<4xi32>, %v: tensor<5xi32>, %s: tensor<i32>, %w: tensor<4xf32>, %z: tensor<f32>) {
// CHECK-NEXT:    %0 = tape.scatter set, %x, %i, %u axis = 1 : tensor<3x4xf64>, tensor<5xi64>, tensor<3x5xf64> -> tensor<3x4xf64>
// CHECK-NEXT:    %1 = tape.scatter add, %x, %i, %u axis = 1 : tensor<3x4xf64>, tensor<5xi64>, tensor<3x5xf64> -> tensor<3x4xf64>
// CHECK-NEXT:    %2 = tape.scatter max, %x, %i, %u axis = 1 : tensor<3x4xf64>, tensor<5xi64>, tensor<3x5xf64> -> tensor<3x4xf64>
// CHECK-NEXT:    %3 = tape.scatter min, %x, %i, %u axis = 1 : tensor<3x4xf64>, tensor<5xi64>, tensor<3x5xf64> -> tensor<3x4xf64>
// CHECK-NEXT:    %4 = tape.scatter set, %b, %i, %c axis = 0 : tensor<4xi1>, tensor<5xi64>, tensor<5xi1> -> tensor<4xi1>
// CHECK-NEXT:    %5 = tape.scatter add, %k, %v, %v axis = 0 : tensor<4xi32>, tensor<5xi32>, tensor<5xi32> -> tensor<4xi32>
// CHECK-NEXT:    %6 = tape.scatter max, %w, %s, %z axis = 0 : tensor<4xf32>, tensor<i32>, tensor<f32> -> tensor<4xf32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "scatter"
// CHECK-GENERIC:         %0 = "tape.scatter"(%x, %i, %u) <{kind = "set", axis = 1 : i64}> : (tensor<3x4xf64>, tensor<5xi64>, tensor<3x5xf64>) -> tensor<3x4xf64>
// CHECK-GENERIC:         %5 = "tape.scatter"(%k, %v, %v) <{kind = "add", axis = 0 : i64}> : (tensor<4xi32>, tensor<5xi32>, tensor<5xi32>) -> tensor<4xi32>

func.func @scatter(%x: tensor<3x4xf64>, %i: tensor<5xi64>, %u: tensor<3x5xf64>, %b: tensor<4xi1>, %c: tensor<5xi1>, %k: tensor<4xi32>, %v: tensor<5xi32>, %s: tensor<i32>, %w: tensor<4xf32>, %z: tensor<f32>) {
  %0 = tape.scatter set, %x, %i, %u axis = 1 : tensor<3x4xf64>, tensor<5xi64>, tensor<3x5xf64> -> tensor<3x4xf64>
  %1 = tape.scatter add, %x, %i, %u axis = 1 : tensor<3x4xf64>, tensor<5xi64>, tensor<3x5xf64> -> tensor<3x4xf64>
  %2 = tape.scatter max, %x, %i, %u axis = 1 : tensor<3x4xf64>, tensor<5xi64>, tensor<3x5xf64> -> tensor<3x4xf64>
  %3 = tape.scatter min, %x, %i, %u axis = 1 : tensor<3x4xf64>, tensor<5xi64>, tensor<3x5xf64> -> tensor<3x4xf64>
  %4 = tape.scatter set, %b, %i, %c axis = 0 : tensor<4xi1>, tensor<5xi64>, tensor<5xi1> -> tensor<4xi1>
  %5 = tape.scatter add, %k, %v, %v axis = 0 : tensor<4xi32> , tensor<5xi32>, tensor<5xi32> -> tensor<4xi32>
  %6 = tape.scatter max, %w, %s, %z axis = 0 : tensor<4xf32>, tensor<i32>, tensor<f32> -> tensor<4xf32>
  func.return
}
