// Every tape op (all of tape.OPS) in its custom syntax, printed back exactly.
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
// The generic form of a few ops (CHECK-GENERIC), itself stable under a reparse:
// RUN: TAPE_GENERIC

// Elementwise ops. `: T` is short for every operand and the result having type T; the long
// forms `: T -> T` and `: T, T -> T` are accepted and printed short.

// CHECK-LABEL: func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>, %d: tensor<4xf64>, %s: tensor<f32>, %i: tensor<3xi32>, %k: tensor<3xi1>, %l: tensor<2xi64>) {
// CHECK-NEXT:    %0 = tape.add %a, %b : tensor<2x3xf32>
// CHECK-NEXT:    %1 = tape.sub %a, %b : tensor<2x3xf32>
// CHECK-NEXT:    %2 = tape.mul %a, %b : tensor<2x3xf32>
// CHECK-NEXT:    %3 = tape.div %a, %b : tensor<2x3xf32>
// CHECK-NEXT:    %4 = tape.maximum %a, %b : tensor<2x3xf32>
// CHECK-NEXT:    %5 = tape.minimum %a, %b : tensor<2x3xf32>
// CHECK-NEXT:    %6 = tape.pow %d, %d : tensor<4xf64>
// CHECK-NEXT:    %7 = tape.neg %a : tensor<2x3xf32>
// CHECK-NEXT:    %8 = tape.exp %a : tensor<2x3xf32>
// CHECK-NEXT:    %9 = tape.log %d : tensor<4xf64>
// CHECK-NEXT:    %10 = tape.tanh %a : tensor<2x3xf32>
// CHECK-NEXT:    %11 = tape.sigmoid %a : tensor<2x3xf32>
// CHECK-NEXT:    %12 = tape.relu %a : tensor<2x3xf32>
// CHECK-NEXT:    %13 = tape.sqrt %a : tensor<2x3xf32>
// CHECK-NEXT:    %14 = tape.add %s, %s : tensor<f32>
// CHECK-NEXT:    %15 = tape.sub %a, %b : tensor<2x3xf32>
// CHECK-NEXT:    %16 = tape.exp %a : tensor<2x3xf32>
// CHECK-NEXT:    %17 = tape.mul %0, %16 {tag = "fused", n = 3 : i64} : tensor<2x3xf32>
// CHECK-NEXT:    %18 = tape.sin %a : tensor<2x3xf32>
// CHECK-NEXT:    %19 = tape.cos %d : tensor<4xf64>
// CHECK-NEXT:    %20 = tape.floordiv %i, %i : tensor<3xi32>
// CHECK-NEXT:    %21 = tape.rem %i, %i : tensor<3xi32>
// CHECK-NEXT:    %22 = tape.and %k, %k : tensor<3xi1>
// CHECK-NEXT:    %23 = tape.or %i, %i : tensor<3xi32>
// CHECK-NEXT:    %24 = tape.xor %i, %i : tensor<3xi32>
// CHECK-NEXT:    %25 = tape.shl %l, %l : tensor<2xi64>
// CHECK-NEXT:    %26 = tape.shr %l, %l : tensor<2xi64>
// CHECK-NEXT:    %27 = tape.not %k : tensor<3xi1>
// CHECK-NEXT:    %28 = tape.add %l, %l : tensor<2xi64>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "elementwise"
// CHECK-GENERIC:         %0 = "tape.add"(%a, %b) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-GENERIC:         %7 = "tape.neg"(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-GENERIC:         %17 = "tape.mul"(%0, %16) {tag = "fused", n = 3 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-GENERIC:         %18 = "tape.sin"(%a) : (tensor<2x3xf32>) -> tensor<2x3xf32>

func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>, %d: tensor<4xf64>, %s: tensor<f32>, %i: tensor<3xi32>, %k: tensor<3xi1>, %l: tensor<2xi64>) {
  %0 = tape.add %a, %b : tensor<2x3xf32>
  %1 = tape.sub %a, %b : tensor<2x3xf32>
  %2 = tape.mul %a, %b : tensor<2x3xf32>
  %3 = tape.div %a, %b : tensor<2x3xf32>
  %4 = tape.maximum %a, %b : tensor<2x3xf32>
  %5 = tape.minimum %a, %b : tensor<2x3xf32>
  %6 = tape.pow %d, %d : tensor<4xf64>
  %7 = tape.neg %a : tensor<2x3xf32>
  %8 = tape.exp %a : tensor<2x3xf32>
  %9 = tape.log %d : tensor<4xf64>
  %10 = tape.tanh %a : tensor<2x3xf32>
  %11 = tape.sigmoid %a : tensor<2x3xf32>
  %12 = tape.relu %a : tensor<2x3xf32>
  %13 = tape.sqrt %a : tensor<2x3xf32>
  %14 = tape.add %s, %s : tensor<f32>
  %15 = tape.sub %a, %b : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  %16 = tape.exp %a : tensor<2x3xf32> -> tensor<2x3xf32>
  %17 = tape.mul %0, %16 {tag = "fused", n = 3 : i64} : tensor<2x3xf32>
  %18 = tape.sin %a : tensor<2x3xf32>
  %19 = tape.cos %d : tensor<4xf64>
  %20 = tape.floordiv %i, %i : tensor<3xi32>
  %21 = tape.rem %i, %i : tensor<3xi32>
  %22 = tape.and %k, %k : tensor<3xi1>
  %23 = tape.or %i, %i : tensor<3xi32>
  %24 = tape.xor %i, %i : tensor<3xi32>
  %25 = tape.shl %l, %l : tensor<2xi64>
  %26 = tape.shr %l, %l : tensor<2xi64>
  %27 = tape.not %k : tensor<3xi1>
  %28 = tape.add %l, %l : tensor<2xi64>
  func.return
}

// -----

// Comparisons (every predicate), select, constants and casts.

// CHECK-LABEL: func.func @compare_select_constant_cast(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>, %g: tensor<2xf64>) {
// CHECK-NEXT:    %0 = tape.cmp lt, %a, %b : tensor<2x3xf32> -> tensor<2x3xi1>
// CHECK-NEXT:    %1 = tape.cmp le, %a, %b : tensor<2x3xf32> -> tensor<2x3xi1>
// CHECK-NEXT:    %2 = tape.cmp gt, %a, %b : tensor<2x3xf32> -> tensor<2x3xi1>
// CHECK-NEXT:    %3 = tape.cmp ge, %a, %b : tensor<2x3xf32> -> tensor<2x3xi1>
// CHECK-NEXT:    %4 = tape.cmp eq, %a, %b : tensor<2x3xf32> -> tensor<2x3xi1>
// CHECK-NEXT:    %5 = tape.cmp ne, %a, %b : tensor<2x3xf32> -> tensor<2x3xi1>
// CHECK-NEXT:    %6 = tape.select %0, %a, %b : tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    %7 = tape.constant dense<5.000000e-01> : tensor<2x3xf32>
// CHECK-NEXT:    %8 = tape.constant dense<1.000000e+00> : tensor<2xf32>
// CHECK-NEXT:    %9 = tape.constant dense<{{\[\[}}1.000000e+00, 2.000000e+00, 3.000000e+00], [4.000000e+00, 5.000000e+00, 6.000000e+00]]> : tensor<2x3xf32>
// CHECK-NEXT:    %10 = tape.constant dense<-2.500000e+00> : tensor<f32>
// CHECK-NEXT:    %11 = tape.constant dense<[1.500000e+00, -2.000000e+00, 0.000000e+00, 1.000000e+10]> : tensor<4xf64>
// CHECK-NEXT:    %12 = tape.constant dense<0.123456789> : tensor<f64>
// CHECK-NEXT:    %13 = tape.constant dense<> : tensor<0x3xf32>
// CHECK-NEXT:    %14 = tape.constant dense<7.000000e+00> : tensor<2xf32> {tag = "k"}
// CHECK-NEXT:    %15 = tape.cast %a : tensor<2x3xf32> -> tensor<2x3xf64>
// CHECK-NEXT:    %16 = tape.cast %g : tensor<2xf64> -> tensor<2xf32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "compare_select_constant_cast"
// CHECK-GENERIC:         %0 = "tape.cmp"(%a, %b) <{predicate = "lt"}> : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
// CHECK-GENERIC:         %5 = "tape.cmp"(%a, %b) <{predicate = "ne"}> : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xi1>
// CHECK-GENERIC-NEXT:    %6 = "tape.select"(%0, %a, %b) : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-GENERIC-NEXT:    %7 = "tape.constant"() <{value = dense<5.000000e-01> : tensor<2x3xf32>}> : () -> tensor<2x3xf32>
// CHECK-GENERIC:         %10 = "tape.constant"() <{value = dense<-2.500000e+00> : tensor<f32>}> : () -> tensor<f32>
// CHECK-GENERIC:         %14 = "tape.constant"() <{value = dense<7.000000e+00> : tensor<2xf32>}> {tag = "k"} : () -> tensor<2xf32>
// CHECK-GENERIC-NEXT:    %15 = "tape.cast"(%a) : (tensor<2x3xf32>) -> tensor<2x3xf64>
// CHECK-GENERIC-NEXT:    %16 = "tape.cast"(%g) : (tensor<2xf64>) -> tensor<2xf32>

func.func @compare_select_constant_cast(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>, %g: tensor<2xf64>) {
  %0 = tape.cmp lt, %a, %b : tensor<2x3xf32> -> tensor<2x3xi1>
  %1 = tape.cmp le, %a, %b : tensor<2x3xf32> -> tensor<2x3xi1>
  %2 = tape.cmp gt, %a, %b : tensor<2x3xf32> -> tensor<2x3xi1>
  %3 = tape.cmp ge, %a, %b : tensor<2x3xf32> -> tensor<2x3xi1>
  %4 = tape.cmp eq, %a, %b : tensor<2x3xf32> -> tensor<2x3xi1>
  %5 = tape.cmp ne, %a, %b : tensor<2x3xf32> -> tensor<2x3xi1>
  %6 = tape.select %0, %a, %b : tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  %7 = tape.constant dense<0.5> : tensor<2x3xf32>
  %8 = tape.constant dense<[1.0, 1.0]> : tensor<2xf32>
  %9 = tape.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  %10 = tape.constant dense<-2.5> : tensor<f32>
  %11 = tape.constant dense<[1.5, -2.0, 0.0, 1.0e10]> : tensor<4xf64>
  %12 = tape.constant dense<0.123456789> : tensor<f64>
  %13 = tape.constant dense<> : tensor<0x3xf32>
  %14 = tape.constant dense<7.0> : tensor<2xf32> {tag = "k"}
  %15 = tape.cast %a : tensor<2x3xf32> -> tensor<2x3xf64>
  %16 = tape.cast %g : tensor<2xf64> -> tensor<2xf32>
  func.return
}

// -----

// Layout ops: broadcast, reshape, permute, pad, slice, concat.

// CHECK-LABEL: func.func @layout(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>, %c: tensor<3x1xf32>, %s: tensor<f32>, %e: tensor<2x1xf32>, %t: tensor<2x3x4xf32>, %f: tensor<5x6xf64>) {
// CHECK-NEXT:    %0 = tape.broadcast %c : tensor<3x1xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT:    %1 = tape.broadcast %s : tensor<f32> -> tensor<2xf32>
// CHECK-NEXT:    %2 = tape.broadcast %a : tensor<2x3xf32>
// CHECK-NEXT:    %3 = tape.reshape %a : tensor<2x3xf32> -> tensor<3x2x1xf32>
// CHECK-NEXT:    %4 = tape.reshape %s : tensor<f32> -> tensor<1x1xf32>
// CHECK-NEXT:    %5 = tape.reshape %4 : tensor<1x1xf32> -> tensor<f32>
// CHECK-NEXT:    %6 = tape.permute %t perm = [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
// CHECK-NEXT:    %7 = tape.permute %s perm = [] : tensor<f32>
// CHECK-NEXT:    %8 = tape.pad %a low = [1, -1] high = [0, 2] value = -inf : tensor<2x3xf32> -> tensor<3x4xf32>
// CHECK-NEXT:    %9 = tape.pad %a low = [0, 0] high = [2, 1] value = 0.5 : tensor<2x3xf32> -> tensor<4x4xf32>
// CHECK-NEXT:    %10 = tape.pad %a low = [-1, -3] high = [-1, 0] value = 0.0 : tensor<2x3xf32> -> tensor<0x0xf32>
// CHECK-NEXT:    %11 = tape.pad %a low = [0, 0] high = [0, 0] value = inf : tensor<2x3xf32>
// CHECK-NEXT:    %12 = tape.pad %a low = [0, 1] high = [0, 0] value = nan : tensor<2x3xf32> -> tensor<2x4xf32>
// CHECK-NEXT:    %13 = tape.pad %a low = [0, 1] high = [0, 0] value = -0.0 : tensor<2x3xf32> -> tensor<2x4xf32>
// CHECK-NEXT:    %14 = tape.pad %a low = [0, 1] high = [0, 0] value = 3.0 : tensor<2x3xf32> -> tensor<2x4xf32>
// CHECK-NEXT:    %15 = tape.pad %a low = [0, 1] high = [0, 0] value = 0.1 : tensor<2x3xf32> -> tensor<2x4xf32>
// CHECK-NEXT:    %16 = tape.pad %a low = [0, 1] high = [0, 0] value = -1234.5678 : tensor<2x3xf32> -> tensor<2x4xf32>
// CHECK-NEXT:    %17 = tape.slice %f start = [1, 0] stop = [5, 6] step = [2, 4] : tensor<5x6xf64> -> tensor<2x2xf64>
// CHECK-NEXT:    %18 = tape.slice %f start = [2, 3] stop = [2, 6] step = [1, 1] : tensor<5x6xf64> -> tensor<0x3xf64>
// CHECK-NEXT:    %19 = tape.concat %a, %b, %a axis = 1 : tensor<2x3xf32> -> tensor<2x9xf32>
// CHECK-NEXT:    %20 = tape.concat %e, %a axis = 1 : tensor<2x1xf32>, tensor<2x3xf32> -> tensor<2x4xf32>
// CHECK-NEXT:    %21 = tape.concat %a, %b axis = 0 : tensor<2x3xf32> -> tensor<4x3xf32>
// CHECK-NEXT:    %22 = tape.concat %a axis = 0 : tensor<2x3xf32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "layout"
// CHECK-GENERIC:         %0 = "tape.broadcast"(%c) : (tensor<3x1xf32>) -> tensor<2x3x4xf32>
// CHECK-GENERIC:         %6 = "tape.permute"(%t) <{perm = array<i64: 2, 0, 1>}> : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
// CHECK-GENERIC-NEXT:    %7 = "tape.permute"(%s) <{perm = array<i64>}> : (tensor<f32>) -> tensor<f32>
// CHECK-GENERIC-NEXT:    %8 = "tape.pad"(%a) <{low = array<i64: 1, -1>, high = array<i64: 0, 2>, value = 0xfff0000000000000 : f64}> : (tensor<2x3xf32>) -> tensor<3x4xf32>
// CHECK-GENERIC-NEXT:    %9 = "tape.pad"(%a) <{low = array<i64: 0, 0>, high = array<i64: 2, 1>, value = 5.000000e-01 : f64}> : (tensor<2x3xf32>) -> tensor<4x4xf32>
// CHECK-GENERIC:         %17 = "tape.slice"(%f) <{start = array<i64: 1, 0>, stop = array<i64: 5, 6>, step = array<i64: 2, 4>}> : (tensor<5x6xf64>) -> tensor<2x2xf64>
// CHECK-GENERIC:         %20 = "tape.concat"(%e, %a) <{axis = 1 : i64}> : (tensor<2x1xf32>, tensor<2x3xf32>) -> tensor<2x4xf32>

func.func @layout(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>, %c: tensor<3x1xf32>, %s: tensor<f32>, %e: tensor<2x1xf32>, %t: tensor<2x3x4xf32>, %f: tensor<5x6xf64>) {
  %0 = tape.broadcast %c : tensor<3x1xf32> -> tensor<2x3x4xf32>
  %1 = tape.broadcast %s : tensor<f32> -> tensor<2xf32>
  %2 = tape.broadcast %a : tensor<2x3xf32> -> tensor<2x3xf32>
  %3 = tape.reshape %a : tensor<2x3xf32> -> tensor<3x2x1xf32>
  %4 = tape.reshape %s : tensor<f32> -> tensor<1x1xf32>
  %5 = tape.reshape %4 : tensor<1x1xf32> -> tensor<f32>
  %6 = tape.permute %t perm = [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  %7 = tape.permute %s perm = [] : tensor<f32>
  %8 = tape.pad %a low = [1, -1] high = [0, 2] value = -inf : tensor<2x3xf32> -> tensor<3x4xf32>
  %9 = tape.pad %a low = [0, 0] high = [2, 1] value = 0.5 : tensor<2x3xf32> -> tensor<4x4xf32>
  %10 = tape.pad %a low = [-1, -3] high = [-1, 0] value = 0.0 : tensor<2x3xf32> -> tensor<0x0xf32>
  %11 = tape.pad %a low = [0, 0] high = [0, 0] value = inf : tensor<2x3xf32>
  %12 = tape.pad %a low = [0, 1] high = [0, 0] value = nan : tensor<2x3xf32> -> tensor<2x4xf32>
  %13 = tape.pad %a low = [0, 1] high = [0, 0] value = -0.0 : tensor<2x3xf32> -> tensor<2x4xf32>
  %14 = tape.pad %a low = [0, 1] high = [0, 0] value = 3 : tensor<2x3xf32> -> tensor<2x4xf32>
  %15 = tape.pad %a low = [0, 1] high = [0, 0] value = 0.1 : tensor<2x3xf32> -> tensor<2x4xf32>
  %16 = tape.pad %a low = [0, 1] high = [0, 0] value = -1234.5678 : tensor<2x3xf32> -> tensor<2x4xf32>
  %17 = tape.slice %f start = [1, 0] stop = [5, 6] step = [2, 4] : tensor<5x6xf64> -> tensor<2x2xf64>
  %18 = tape.slice %f start = [2, 3] stop = [2, 6] step = [1, 1] : tensor<5x6xf64> -> tensor<0x3xf64>
  %19 = tape.concat %a, %b, %a axis = 1 : tensor<2x3xf32> -> tensor<2x9xf32>
  %20 = tape.concat %e, %a axis = 1 : tensor<2x1xf32>, tensor<2x3xf32> -> tensor<2x4xf32>
  %21 = tape.concat %a, %b axis = 0 : tensor<2x3xf32> -> tensor<4x3xf32>
  %22 = tape.concat %a axis = 0 : tensor<2x3xf32>
  func.return
}

// -----

// The layout ops that also move i1 tensors (masks): broadcast, reshape, permute, slice, concat.

// CHECK-LABEL: func.func @layout_i1(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) {
// CHECK-NEXT:    %0 = tape.cmp lt, %a, %b : tensor<2x3xf32> -> tensor<2x3xi1>
// CHECK-NEXT:    %1 = tape.broadcast %0 : tensor<2x3xi1> -> tensor<4x2x3xi1>
// CHECK-NEXT:    %2 = tape.reshape %0 : tensor<2x3xi1> -> tensor<6xi1>
// CHECK-NEXT:    %3 = tape.permute %0 perm = [1, 0] : tensor<2x3xi1> -> tensor<3x2xi1>
// CHECK-NEXT:    %4 = tape.slice %0 start = [0, 1] stop = [2, 3] step = [1, 1] : tensor<2x3xi1> -> tensor<2x2xi1>
// CHECK-NEXT:    %5 = tape.concat %0, %0 axis = 0 : tensor<2x3xi1> -> tensor<4x3xi1>
// CHECK-NEXT:    %6 = tape.permute %3 perm = [1, 0] : tensor<3x2xi1> -> tensor<2x3xi1>
// CHECK-NEXT:    %7 = tape.select %6, %a, %b : tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }

func.func @layout_i1(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) {
  %0 = tape.cmp lt, %a, %b : tensor<2x3xf32> -> tensor<2x3xi1>
  %1 = tape.broadcast %0 : tensor<2x3xi1> -> tensor<4x2x3xi1>
  %2 = tape.reshape %0 : tensor<2x3xi1> -> tensor<6xi1>
  %3 = tape.permute %0 perm = [1, 0] : tensor<2x3xi1> -> tensor<3x2xi1>
  %4 = tape.slice %0 start = [0, 1] stop = [2, 3] step = [1, 1] : tensor<2x3xi1> -> tensor<2x2xi1>
  %5 = tape.concat %0, %0 axis = 0 : tensor<2x3xi1> -> tensor<4x3xi1>
  %6 = tape.permute %3 perm = [1, 0] : tensor<3x2xi1> -> tensor<2x3xi1>
  %7 = tape.select %6, %a, %b : tensor<2x3xi1>, tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  func.return
}

// -----

// Sliding windows: unfold and its adjoint fold, convolution and pooling.

// CHECK-LABEL: func.func @windows(%x: tensor<2x5x6xf32>, %w: tensor<2x3x2x2x3xf32>, %v: tensor<7xf64>, %i: tensor<1x4x8x8xf32>, %k: tensor<6x2x3x3xf32>, %p: tensor<1x2x5x5xf32>) {
// CHECK-NEXT:    %0 = tape.unfold %x kernel = [2, 3] stride = [1, 2] dilation = [2, 1] : tensor<2x5x6xf32> -> tensor<2x3x2x2x3xf32>
// CHECK-NEXT:    %1 = tape.fold %w kernel = [2, 3] stride = [1, 2] dilation = [2, 1] : tensor<2x3x2x2x3xf32> -> tensor<2x5x6xf32>
// CHECK-NEXT:    %2 = tape.unfold %v kernel = [3] stride = [2] dilation = [1] : tensor<7xf64> -> tensor<3x3xf64>
// CHECK-NEXT:    %3 = tape.fold %2 kernel = [3] stride = [2] dilation = [1] : tensor<3x3xf64> -> tensor<7xf64>
// CHECK-NEXT:    %4 = tape.conv2d %i, %k stride = [2, 1] padding = [1, 0, 1, 2] dilation = [1, 2] groups = 2 : tensor<1x4x8x8xf32>, tensor<6x2x3x3xf32> -> tensor<1x6x4x6xf32>
// CHECK-NEXT:    %5 = tape.maxpool2d %p kernel = [2, 2] stride = [2, 2] padding = [0, 0, 1, 1] : tensor<1x2x5x5xf32> -> tensor<1x2x3x3xf32>
// CHECK-NEXT:    %6 = tape.avgpool2d %p kernel = [3, 3] stride = [1, 1] padding = [1, 1, 1, 1] : tensor<1x2x5x5xf32>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "windows"
// CHECK-GENERIC:         %0 = "tape.unfold"(%x) <{kernel = array<i64: 2, 3>, stride = array<i64: 1, 2>, dilation = array<i64: 2, 1>}> : (tensor<2x5x6xf32>) -> tensor<2x3x2x2x3xf32>
// CHECK-GENERIC-NEXT:    %1 = "tape.fold"(%w) <{kernel = array<i64: 2, 3>, stride = array<i64: 1, 2>, dilation = array<i64: 2, 1>}> : (tensor<2x3x2x2x3xf32>) -> tensor<2x5x6xf32>
// CHECK-GENERIC:         %4 = "tape.conv2d"(%i, %k) <{stride = array<i64: 2, 1>, padding = array<i64: 1, 0, 1, 2>, dilation = array<i64: 1, 2>, groups = 2 : i64}> : (tensor<1x4x8x8xf32>, tensor<6x2x3x3xf32>) -> tensor<1x6x4x6xf32>
// CHECK-GENERIC-NEXT:    %5 = "tape.maxpool2d"(%p) <{kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, padding = array<i64: 0, 0, 1, 1>}> : (tensor<1x2x5x5xf32>) -> tensor<1x2x3x3xf32>

func.func @windows(%x: tensor<2x5x6xf32>, %w: tensor<2x3x2x2x3xf32>, %v: tensor<7xf64>, %i: tensor<1x4x8x8xf32>, %k: tensor<6x2x3x3xf32>, %p: tensor<1x2x5x5xf32>) {
  %0 = tape.unfold %x kernel = [2, 3] stride = [1, 2] dilation = [2, 1] : tensor<2x5x6xf32> -> tensor<2x3x2x2x3xf32>
  %1 = tape.fold %w kernel = [2, 3] stride = [1, 2] dilation = [2, 1] : tensor<2x3x2x2x3xf32> -> tensor<2x5x6xf32>
  %2 = tape.unfold %v kernel = [3] stride = [2] dilation = [1] : tensor<7xf64> -> tensor<3x3xf64>
  %3 = tape.fold %2 kernel = [3] stride = [2] dilation = [1] : tensor<3x3xf64> -> tensor<7xf64>
  %4 = tape.conv2d %i, %k stride = [2, 1] padding = [1, 0, 1, 2] dilation = [1, 2] groups = 2 : tensor<1x4x8x8xf32>, tensor<6x2x3x3xf32> -> tensor<1x6x4x6xf32>
  %5 = tape.maxpool2d %p kernel = [2, 2] stride = [2, 2] padding = [0, 0, 1, 1] : tensor<1x2x5x5xf32> -> tensor<1x2x3x3xf32>
  %6 = tape.avgpool2d %p kernel = [3, 3] stride = [1, 1] padding = [1, 1, 1, 1] : tensor<1x2x5x5xf32> -> tensor<1x2x5x5xf32>
  func.return
}

// -----

// Reductions (with and without keepdims, over no axes, down to rank 0) and matmul.

// CHECK-LABEL: func.func @reduce_matmul(%a: tensor<2x3xf32>, %n: tensor<3x4xf32>, %bm: tensor<5x2x3xf64>, %bn: tensor<5x3x4xf64>, %s: tensor<f64>) {
// CHECK-NEXT:    %0 = tape.sum %a axes = [] : tensor<2x3xf32>
// CHECK-NEXT:    %1 = tape.sum %a axes = [] keepdims : tensor<2x3xf32>
// CHECK-NEXT:    %2 = tape.sum %a axes = [1] : tensor<2x3xf32> -> tensor<2xf32>
// CHECK-NEXT:    %3 = tape.sum %a axes = [1] keepdims : tensor<2x3xf32> -> tensor<2x1xf32>
// CHECK-NEXT:    %4 = tape.sum %a axes = [0, 1] keepdims : tensor<2x3xf32> -> tensor<1x1xf32>
// CHECK-NEXT:    %5 = tape.sum %a axes = [0, 1] : tensor<2x3xf32> -> tensor<f32>
// CHECK-NEXT:    %6 = tape.sum %s axes = [] : tensor<f64>
// CHECK-NEXT:    %7 = tape.max %a axes = [] : tensor<2x3xf32>
// CHECK-NEXT:    %8 = tape.max %a axes = [0] : tensor<2x3xf32> -> tensor<3xf32>
// CHECK-NEXT:    %9 = tape.max %a axes = [0] keepdims : tensor<2x3xf32> -> tensor<1x3xf32>
// CHECK-NEXT:    %10 = tape.max %a axes = [0, 1] : tensor<2x3xf32> -> tensor<f32>
// CHECK-NEXT:    %11 = tape.matmul %a, %n : tensor<2x3xf32>, tensor<3x4xf32> -> tensor<2x4xf32>
// CHECK-NEXT:    %12 = tape.matmul %bm, %bn : tensor<5x2x3xf64>, tensor<5x3x4xf64> -> tensor<5x2x4xf64>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "reduce_matmul"
// CHECK-GENERIC:         %0 = "tape.sum"(%a) <{axes = array<i64>}> : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-GENERIC-NEXT:    %1 = "tape.sum"(%a) <{axes = array<i64>, keepdims}> : (tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK-GENERIC:         %9 = "tape.max"(%a) <{axes = array<i64: 0>, keepdims}> : (tensor<2x3xf32>) -> tensor<1x3xf32>
// CHECK-GENERIC-NEXT:    %10 = "tape.max"(%a) <{axes = array<i64: 0, 1>}> : (tensor<2x3xf32>) -> tensor<f32>
// CHECK-GENERIC-NEXT:    %11 = "tape.matmul"(%a, %n) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>

func.func @reduce_matmul(%a: tensor<2x3xf32>, %n: tensor<3x4xf32>, %bm: tensor<5x2x3xf64>, %bn: tensor<5x3x4xf64>, %s: tensor<f64>) {
  %0 = tape.sum %a axes = [] : tensor<2x3xf32>
  %1 = tape.sum %a axes = [] keepdims : tensor<2x3xf32>
  %2 = tape.sum %a axes = [1] : tensor<2x3xf32> -> tensor<2xf32>
  %3 = tape.sum %a axes = [1] keepdims : tensor<2x3xf32> -> tensor<2x1xf32>
  %4 = tape.sum %a axes = [0, 1] keepdims : tensor<2x3xf32> -> tensor<1x1xf32>
  %5 = tape.sum %a axes = [0, 1] : tensor<2x3xf32> -> tensor<f32>
  %6 = tape.sum %s axes = [] : tensor<f64>
  %7 = tape.max %a axes = [] : tensor<2x3xf32>
  %8 = tape.max %a axes = [0] : tensor<2x3xf32> -> tensor<3xf32>
  %9 = tape.max %a axes = [0] keepdims : tensor<2x3xf32> -> tensor<1x3xf32>
  %10 = tape.max %a axes = [0, 1] : tensor<2x3xf32> -> tensor<f32>
  %11 = tape.matmul %a, %n : tensor<2x3xf32>, tensor<3x4xf32> -> tensor<2x4xf32>
  %12 = tape.matmul %bm, %bn : tensor<5x2x3xf64>, tensor<5x3x4xf64> -> tensor<5x2x4xf64>
  func.return
}

// -----

// The backward ops of conv2d and the poolings.

// CHECK-LABEL: func.func @backward
// CHECK-NEXT:    %0 = tape.conv2d_backward_input %ct, %w stride = [2, 1] padding = [1, 0, 2, 1] dilation = [1, 2] groups = 2 : tensor<1x4x4x4xf32>, tensor<4x1x3x2xf32> -> tensor<1x2x6x5xf32>
// CHECK-NEXT:    %1 = tape.conv2d_backward_weight %x, %ct stride = [2, 1] padding = [1, 0, 2, 1] dilation = [1, 2] groups = 2 : tensor<1x2x6x5xf32>, tensor<1x4x4x4xf32> -> tensor<4x1x3x2xf32>
// CHECK-NEXT:    %2 = tape.maxpool2d_backward %x, %pct kernel = [2, 2] stride = [2, 2] padding = [0, 0, 0, 1] : tensor<1x2x6x5xf32>, tensor<1x2x3x3xf32> -> tensor<1x2x6x5xf32>
// CHECK-NEXT:    %3 = tape.avgpool2d_backward %pct kernel = [2, 2] stride = [2, 2] padding = [0, 0, 0, 1] : tensor<1x2x3x3xf32> -> tensor<1x2x6x5xf32>
// CHECK-NEXT:    func.return

func.func @backward(%x: tensor<1x2x6x5xf32>, %w: tensor<4x1x3x2xf32>, %ct: tensor<1x4x4x4xf32>, %pct: tensor<1x2x3x3xf32>) {
  %0 = tape.conv2d_backward_input %ct, %w stride = [2, 1] padding = [1, 0, 2, 1] dilation = [1, 2] groups = 2 : tensor<1x4x4x4xf32>, tensor<4x1x3x2xf32> -> tensor<1x2x6x5xf32>
  %1 = tape.conv2d_backward_weight %x, %ct stride = [2, 1] padding = [1, 0, 2, 1] dilation = [1, 2] groups = 2 : tensor<1x2x6x5xf32>, tensor<1x4x4x4xf32> -> tensor<4x1x3x2xf32>
  %2 = tape.maxpool2d_backward %x, %pct kernel = [2, 2] stride = [2, 2] padding = [0, 0, 0, 1] : tensor<1x2x6x5xf32>, tensor<1x2x3x3xf32> -> tensor<1x2x6x5xf32>
  %3 = tape.avgpool2d_backward %pct kernel = [2, 2] stride = [2, 2] padding = [0, 0, 0, 1] : tensor<1x2x3x3xf32> -> tensor<1x2x6x5xf32>
  func.return
}

// -----

// A fused elementwise group: inputs broadcast to the result; the body works on one element.

// CHECK-LABEL: func.func @fused
// CHECK-NEXT:    %0 = tape.fused %a, %row : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32> {
// CHECK-NEXT:    ^bb0(%x: tensor<f32>, %y: tensor<f32>):
// CHECK-NEXT:      %c = tape.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT:      %m = tape.mul %x, %y : tensor<f32>
// CHECK-NEXT:      %p = tape.cmp gt, %m, %c : tensor<f32> -> tensor<i1>
// CHECK-NEXT:      %s = tape.select %p, %m, %c : tensor<i1>, tensor<f32>, tensor<f32> -> tensor<f32>
// CHECK-NEXT:      tape.yield %s : tensor<f32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return

func.func @fused(%a: tensor<2x3xf32>, %row: tensor<3xf32>) {
  %0 = tape.fused %a, %row : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32> {
  ^bb0(%x: tensor<f32>, %y: tensor<f32>):
    %c = tape.constant dense<2.0> : tensor<f32>
    %m = tape.mul %x, %y : tensor<f32>
    %p = tape.cmp gt, %m, %c : tensor<f32> -> tensor<i1>
    %s = tape.select %p, %m, %c : tensor<i1>, tensor<f32>, tensor<f32> -> tensor<f32>
    tape.yield %s : tensor<f32>
  }
  func.return
}
