// StableHLO out: -t stablehlo writes the tape function as upstream StableHLO (func.func @main),
// which the upstream parser reads back (IREE's iree-opt, where installed).
// RUN: tapeml-opt %s -t stablehlo | filecheck %s
// RUN: tapeml-opt %s -p tape-differentiate -t stablehlo | filecheck %s --check-prefix=GRAD
// RUN: %if iree-opt %{ tapeml-opt %s -p tape-differentiate -t stablehlo | iree-opt | filecheck %s --check-prefix=PARSED %}
// RUN: not tapeml-opt %s -p tape-to-loops -t stablehlo 2>&1 | filecheck %s --check-prefix=LOWERED

// CHECK:       // @layer(x, w, v) -> (s), from tapeml
// CHECK-NEXT:  module @layer {
// CHECK-NEXT:    func.func @main(%arg0: tensor<2x3x6x6xf32>, %arg1: tensor<4x3x3x3xf32>, %arg2: tensor<36x5xf32>) -> (tensor<f32>) {
// The convolution is one op; its padding is [top, bottom] x [left, right].
// CHECK:         stablehlo.convolution(%arg0, %arg1) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = {{\[}}[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x6x6xf32>
// relu is the IEEE maximum with +0, plus +0 (so -0 becomes +0)
// CHECK:         stablehlo.maximum
// CHECK:         stablehlo.add
// The pool is a reduce_window with a maximum body, from -inf.
// CHECK:         stablehlo.constant dense<"0x000080FF"> : tensor<f32>
// CHECK:         "stablehlo.reduce_window"
// CHECK:           stablehlo.maximum
// CHECK:         window_dimensions = array<i64: 1, 1, 2, 2>, window_strides = array<i64: 1, 1, 2, 2>
// CHECK:         stablehlo.dot_general {{.*}}, contracting_dims = [1] x [0] : (tensor<2x36xf32>, tensor<36x5xf32>) -> tensor<2x5xf32>
// CHECK:         "stablehlo.reduce"
// CHECK:           stablehlo.add
// CHECK:         func.return

// The gradient is more StableHLO: the input's cotangent of the pool spreads over its windows,
// the weight's cotangent is a convolution of the input with the cotangent (batch and feature
// dims swapped).
// GRAD:        // @layer(x, w, v) -> (s, {{.*}})
// GRAD:        stablehlo.convolution
// GRAD:        stablehlo.convolution({{.*}}) dim_numbers = [f, b, 0, 1]x[i, o, 0, 1]->[b, f, 0, 1]
// GRAD:        stablehlo.transpose {{.*}}, dims = [1, 0, 2, 3]

// PARSED:      func.func @main
// PARSED:      stablehlo.convolution
// PARSED:      stablehlo.reduce_window

// LOWERED:     error: -t stablehlo: {{.*}} has no StableHLO form (StableHLO is written from tape ops, before any lowering)

func.func @layer(%x: tensor<2x3x6x6xf32>, %w: tensor<4x3x3x3xf32>, %v: tensor<36x5xf32>) -> tensor<f32> {
  %c = tape.conv2d %x, %w stride = [1, 1] padding = [1, 1, 1, 1] dilation = [1, 1] groups = 1 : tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32> -> tensor<2x4x6x6xf32>
  %r = tape.relu %c : tensor<2x4x6x6xf32>
  %p = tape.maxpool2d %r kernel = [2, 2] stride = [2, 2] padding = [0, 0, 0, 0] : tensor<2x4x6x6xf32> -> tensor<2x4x3x3xf32>
  %f = tape.reshape %p : tensor<2x4x3x3xf32> -> tensor<2x36xf32>
  %y = tape.matmul %f, %v : tensor<2x36xf32>, tensor<36x5xf32> -> tensor<2x5xf32>
  %s = tape.sum %y axes = [0, 1] : tensor<2x5xf32> -> tensor<f32>
  func.return %s : tensor<f32>
}
