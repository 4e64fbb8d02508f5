// tapeml-run interprets a function on MLIR literals or .npy files and prints each result on its
// own line as an MLIR literal.

// The only function called @main is the default when there are several.
// RUN: tapeml-run %s --args 'dense<[[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]]> : tensor<2x3xf32>' 'dense<[2.0, 0.5, -1.0]> : tensor<3xf32>' | filecheck %s --check-prefix=MAIN

// MAIN:      dense<{{\[\[}}2.000000e+00, -1.000000e+00, -3.000000e+00], [8.000000e+00, 2.500000e+00, 6.000000e+00]]> : tensor<2x3xf32>
// MAIN-NEXT: dense<[-2.000000e+00, 1.650000e+01]> : tensor<2xf32>
// MAIN-NEXT: dense<{{\[\[}}false, false, true], [true, true, false]]> : tensor<2x3xi1>
// MAIN-NOT:  {{.}}

func.func @main(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> (tensor<2x3xf32>, tensor<2xf32>, tensor<2x3xi1>) {
  %b = tape.broadcast %y : tensor<3xf32> -> tensor<2x3xf32>
  %m = tape.mul %x, %b : tensor<2x3xf32>
  %s = tape.sum %m axes = [1] : tensor<2x3xf32> -> tensor<2xf32>
  %c = tape.cmp gt, %x, %b : tensor<2x3xf32> -> tensor<2x3xi1>
  func.return %m, %s, %c : tensor<2x3xf32>, tensor<2xf32>, tensor<2x3xi1>
}

// --symbol picks a function; a splat literal fills the argument's shape; -inf padding.
// RUN: tapeml-run %s --symbol relu_pad_max --args 'dense<[-1.5, 2.0, 0.0, 3.25]> : tensor<4xf32>' | filecheck %s --check-prefix=RELU

// RELU:      dense<[0.000000e+00, 2.000000e+00, 0.000000e+00, 3.250000e+00]> : tensor<4xf32>
// RELU-NEXT: dense<"0x000080FF00000000000000400000000000005040"> : tensor<5xf32>
// RELU-NEXT: dense<3.250000e+00> : tensor<f32>
// RELU-NOT:  {{.}}

func.func @relu_pad_max(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<5xf32>, tensor<f32>) {
  %zero = tape.constant dense<0.0> : tensor<4xf32>
  %pos = tape.cmp gt, %x, %zero : tensor<4xf32> -> tensor<4xi1>
  %r = tape.select %pos, %x, %zero : tensor<4xi1>, tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %p = tape.pad %r low = [1] high = [0] value = -inf : tensor<4xf32> -> tensor<5xf32>
  %m = tape.max %p axes = [0] : tensor<5xf32> -> tensor<f32>
  func.return %r, %p, %m : tensor<4xf32>, tensor<5xf32>, tensor<f32>
}

// A splat literal is expanded to the argument's shape; f64 matmul.
// RUN: tapeml-run %s --symbol matmul --args 'dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf64>' 'dense<0.5> : tensor<2x3xf64>' | filecheck %s --check-prefix=MATMUL

// MATMUL:      dense<{{\[\[}}1.500000e+00, 1.500000e+00, 1.500000e+00], [3.500000e+00, 3.500000e+00, 3.500000e+00]]> : tensor<2x3xf64>
// MATMUL-NOT:  {{.}}

func.func @matmul(%a: tensor<2x2xf64>, %b: tensor<2x3xf64>) -> tensor<2x3xf64> {
  %c = tape.matmul %a, %b : tensor<2x2xf64>, tensor<2x3xf64> -> tensor<2x3xf64>
  func.return %c : tensor<2x3xf64>
}

// An .npy file as the argument (written here with the Python that runs lit).
// RUN: %python -c "import numpy as np; np.save(r'%t.npy', np.arange(16.0).reshape(1, 1, 4, 4))"
// RUN: tapeml-run %s --symbol pool --args %t.npy | filecheck %s --check-prefix=POOL

// POOL:      dense<{{\[\[\[\[}}5.000000e+00, 7.000000e+00], [1.300000e+01, 1.500000e+01]]]]> : tensor<1x1x2x2xf64>
// POOL-NEXT: dense<{{\[\[\[\[}}2.500000e+00, 4.500000e+00], [1.050000e+01, 1.250000e+01]]]]> : tensor<1x1x2x2xf64>
// POOL-NOT:  {{.}}

func.func @pool(%x: tensor<1x1x4x4xf64>) -> (tensor<1x1x2x2xf64>, tensor<1x1x2x2xf64>) {
  %m = tape.maxpool2d %x kernel = [2, 2] stride = [2, 2] padding = [0, 0, 0, 0] : tensor<1x1x4x4xf64> -> tensor<1x1x2x2xf64>
  %a = tape.avgpool2d %x kernel = [2, 2] stride = [2, 2] padding = [0, 0, 0, 0] : tensor<1x1x4x4xf64> -> tensor<1x1x2x2xf64>
  func.return %m, %a : tensor<1x1x2x2xf64>, tensor<1x1x2x2xf64>
}
