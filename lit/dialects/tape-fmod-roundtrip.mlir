// tape.fmod (C's fmod, numpy's np.fmod; floats only) in its custom syntax, printed back exactly.
//
// RUN: TAPE_ROUNDTRIP
// RUN: TAPE_GENERIC_ROUNDTRIP
// RUN: tapeml-opt %s --split-input-file > %t.custom.mlir
// RUN: tapeml-opt %s --split-input-file --print-op-generic | tapeml-opt --split-input-file > %t.generic.mlir
// RUN: diff %t.custom.mlir %t.generic.mlir

// CHECK-LABEL: func.func @fmod
// CHECK-NEXT:    %0 = tape.fmod %x, %y : tensor<2x3xf32>
// CHECK-NEXT:    %1 = tape.fmod %d, %d : tensor<5xf64>
// CHECK-NEXT:    %2 = tape.fmod %s, %s {tapeml.note = "kept"} : tensor<f64>
func.func @fmod(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>, %d: tensor<5xf64>, %s: tensor<f64>) {
  %0 = tape.fmod %x, %y : tensor<2x3xf32>
  %1 = tape.fmod %d, %d : tensor<5xf64>
  %2 = tape.fmod %s, %s {tapeml.note = "kept"} : tensor<f64>
  func.return
}
