// One chunk per verifier rule of every tape op: each call site of check / same_type /
// same_element / float_tensor / any_tensor / bool_tensor / check_ints (tapeml/dialects/tape/
// types.py) and _rank4 (convolutions.py), the result-type check of TapeOp.verify_ (base.py) and
// ConstantOp.verify_. Each diagnostic is located at the failing op.
//
// With --verify-diagnostics, tapeml-opt prints each chunk's diagnostic on stdout and exits 0.
// RUN: tapeml-opt %s --split-input-file --verify-diagnostics | filecheck %s

// _Binary: lhs must be f32/f64
func.func @case0(%a: tensor<2xi1>, %b: tensor<2xf32>) {
  // CHECK:      tape-verify.mlir:[[# @LINE + 3]]:3: error: tape.add: lhs must be a statically shaped tensor of i32, i64, f32 or f64, got tensor<2xi1>
  // CHECK-NEXT:   %0 = tape.add %a, %b : tensor<2xi1>, tensor<2xf32> -> tensor<2xf32>
  // CHECK-NEXT:   ^^
  %0 = tape.add %a, %b : tensor<2xi1>, tensor<2xf32> -> tensor<2xf32>
  func.return
}

// -----

// _Binary: rhs must be statically shaped
func.func @case1(%a: tensor<2xf32>, %b: tensor<?xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.sub: rhs must be a statically shaped tensor of i32, i64, f32 or f64, got tensor<?xf32>
  %0 = tape.sub %a, %b : tensor<2xf32>, tensor<?xf32> -> tensor<2xf32>
  func.return
}

// -----

// _Binary: operands of one shape
func.func @case2(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.mul: operands must have the same type (broadcast explicitly); got tensor<2x3xf32>, tensor<3x2xf32>
  %0 = tape.mul %a, %b : tensor<2x3xf32>, tensor<3x2xf32> -> tensor<2x3xf32>
  func.return
}

// -----

// _Binary: operands of one element type
func.func @case3(%a: tensor<2xf32>, %b: tensor<2xf64>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.div: operands must have the same type (broadcast explicitly); got tensor<2xf32>, tensor<2xf64>
  %0 = tape.div %a, %b : tensor<2xf32>, tensor<2xf64> -> tensor<2xf32>
  func.return
}

// -----

// TapeOp.verify_: result type (shape)
func.func @case4(%a: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.maximum: result type tensor<3xf32> does not match tensor<2xf32>, the type its operands and parameters give
  %0 = tape.maximum %a, %a : tensor<2xf32> -> tensor<3xf32>
  func.return
}

// -----

// TapeOp.verify_: result type (element type)
func.func @case5(%a: tensor<2xf64>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.pow: result type tensor<2xf32> does not match tensor<2xf64>, the type its operands and parameters give
  %0 = tape.pow %a, %a : tensor<2xf64> -> tensor<2xf32>
  func.return
}

// -----

// _Unary: operand must be f32/f64
func.func @case6(%a: tensor<2xi1>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.exp: operand must be a statically shaped tensor of f32 or f64, got tensor<2xi1>
  %0 = tape.exp %a : tensor<2xi1>
  func.return
}

// -----

// _Unary: operand must be statically shaped
func.func @case7(%a: tensor<?x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.log: operand must be a statically shaped tensor of f32 or f64, got tensor<?x3xf32>
  %0 = tape.log %a : tensor<?x3xf32>
  func.return
}

// -----

// _Unary: operand must be f32/f64 (f16)
func.func @case8(%a: tensor<2xf16>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.sqrt: operand must be a statically shaped tensor of f32 or f64, got tensor<2xf16>
  %0 = tape.sqrt %a : tensor<2xf16>
  func.return
}

// -----

// TapeOp.verify_: unary result type
func.func @case9(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.relu: result type tensor<3x2xf32> does not match tensor<2x3xf32>, the type its operands and parameters give
  %0 = tape.relu %a : tensor<2x3xf32> -> tensor<3x2xf32>
  func.return
}

// -----

// _Binary (minimum): rhs must be f32/f64
func.func @case10(%a: tensor<2xf32>, %b: tensor<2xi1>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.minimum: rhs must be a statically shaped tensor of i32, i64, f32 or f64, got tensor<2xi1>
  %0 = tape.minimum %a, %b : tensor<2xf32>, tensor<2xi1> -> tensor<2xf32>
  func.return
}

// -----

// _Unary (neg): operand must be f32/f64
func.func @case11(%a: tensor<2xi32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.exp: operand must be a statically shaped tensor of f32 or f64, got tensor<2xi32>
  %0 = tape.exp %a : tensor<2xi32>
  func.return
}

// -----

// _Unary (tanh): operand must be statically shaped
func.func @case12(%a: tensor<?xf64>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.tanh: operand must be a statically shaped tensor of f32 or f64, got tensor<?xf64>
  %0 = tape.tanh %a : tensor<?xf64>
  func.return
}

// -----

// TapeOp.verify_ (sigmoid): result type
func.func @case13(%a: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.sigmoid: result type tensor<2xf64> does not match tensor<2xf32>, the type its operands and parameters give
  %0 = tape.sigmoid %a : tensor<2xf32> -> tensor<2xf64>
  func.return
}

// -----

// CmpOp: predicate (only reachable in generic form)
func.func @case14(%a: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.cmp: predicate must be one of lt, le, gt, ge, eq, ne, got 'lq'
  %0 = "tape.cmp"(%a, %a) <{predicate = "lq"}> : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xi1>
  func.return
}

// -----

// CmpOp: lhs must be f32/f64
func.func @case15(%a: tensor<2xi1>, %b: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.cmp: operands must have the same type (broadcast explicitly); got tensor<2xi1>, tensor<2xf32>
  %0 = tape.cmp lt, %a, %b : tensor<2xi1>, tensor<2xf32> -> tensor<2xi1>
  func.return
}

// -----

// CmpOp: rhs must be f32/f64
func.func @case16(%a: tensor<2xf32>, %b: tensor<2xi32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.cmp: operands must have the same type (broadcast explicitly); got tensor<2xf32>, tensor<2xi32>
  %0 = tape.cmp le, %a, %b : tensor<2xf32>, tensor<2xi32> -> tensor<2xi1>
  func.return
}

// -----

// CmpOp: operands of one type
func.func @case17(%a: tensor<2xf32>, %b: tensor<2xf64>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.cmp: operands must have the same type (broadcast explicitly); got tensor<2xf32>, tensor<2xf64>
  %0 = tape.cmp eq, %a, %b : tensor<2xf32>, tensor<2xf64> -> tensor<2xi1>
  func.return
}

// -----

// CmpOp: the result is i1
func.func @case18(%a: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.cmp: result type tensor<2xf32> does not match tensor<2xi1>, the type its operands and parameters give
  %0 = tape.cmp ne, %a, %a : tensor<2xf32>
  func.return
}

// -----

// SelectOp: condition must be i1
func.func @case19(%c: tensor<2xf32>, %a: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.select: condition must be a statically shaped tensor of i1, got tensor<2xf32>
  %0 = tape.select %c, %a, %a : tensor<2xf32>
  func.return
}

// -----

// SelectOp: condition must be statically shaped
func.func @case20(%c: tensor<?xi1>, %a: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.select: condition must be a statically shaped tensor of i1, got tensor<?xi1>
  %0 = tape.select %c, %a, %a : tensor<?xi1>, tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
  func.return
}

// -----

// SelectOp: true value must be f32/f64
func.func @case21(%c: tensor<2xi1>, %a: tensor<2xi1>, %b: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.select: both values must have the same type; got tensor<2xi1>, tensor<2xf32>
  %0 = tape.select %c, %a, %b : tensor<2xi1>, tensor<2xi1>, tensor<2xf32> -> tensor<2xf32>
  func.return
}

// -----

// SelectOp: false value must be f32/f64
func.func @case22(%c: tensor<2xi1>, %a: tensor<2xf32>, %b: tensor<?xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.select: false value must be a statically shaped tensor of i1, i32, i64, f32 or f64, got tensor<?xf32>
  %0 = tape.select %c, %a, %b : tensor<2xi1>, tensor<2xf32>, tensor<?xf32> -> tensor<2xf32>
  func.return
}

// -----

// SelectOp: values of one type
func.func @case23(%c: tensor<2xi1>, %a: tensor<2xf32>, %b: tensor<2xf64>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.select: both values must have the same type; got tensor<2xf32>, tensor<2xf64>
  %0 = tape.select %c, %a, %b : tensor<2xi1>, tensor<2xf32>, tensor<2xf64> -> tensor<2xf32>
  func.return
}

// -----

// SelectOp: condition shape
func.func @case24(%c: tensor<3xi1>, %a: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.select: condition shape tensor<3xi1> must match the values' shape tensor<2xf32>
  %0 = tape.select %c, %a, %a : tensor<3xi1>, tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
  func.return
}

// -----

// TapeOp.verify_: select result type
func.func @case25(%c: tensor<2xi1>, %a: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.select: result type tensor<2xf64> does not match tensor<2xf32>, the type its operands and parameters give
  %0 = tape.select %c, %a, %a : tensor<2xi1>, tensor<2xf32>, tensor<2xf32> -> tensor<2xf64>
  func.return
}

// -----

// ConstantOp.verify_: value must be f32/f64
func.func @case26() {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.constant: value must be a statically shaped tensor of i1, i32, i64, f32 or f64, got tensor<2xi16>
  %0 = tape.constant dense<1> : tensor<2xi16>
  func.return
}

// -----

// ConstantOp.verify_: value type = result type (generic form only)
func.func @case27() {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.constant: value type tensor<2xf32> does not match the result type tensor<3xf32>
  %0 = "tape.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<3xf32>
  func.return
}

// -----

// ConstantOp.verify_: value type = result type (element type)
func.func @case28() {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.constant: value type tensor<2xf32> does not match the result type tensor<2xf64>
  %0 = "tape.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<2xf64>
  func.return
}

// -----

// CastOp: input must be f32/f64
func.func @case29(%a: tensor<2xi8>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.cast: operand must be a statically shaped tensor of i1, i32, i64, f32 or f64, got tensor<2xi8>
  %0 = tape.cast %a : tensor<2xi8> -> tensor<2xf32>
  func.return
}

// -----

// TapeOp.verify_: cast keeps the shape
func.func @case30(%a: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.cast: result type tensor<3xf64> does not match tensor<2xf64>, the type its operands and parameters give
  %0 = tape.cast %a : tensor<2xf32> -> tensor<3xf64>
  func.return
}

// -----

// CastOp: result element type must be f32/f64
func.func @case31(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.cast: result must be a statically shaped tensor of i1, i32, i64, f32 or f64, got tensor<2x3xf16>
  %0 = tape.cast %a : tensor<2x3xf32> -> tensor<2x3xf16>
  func.return
}

// -----

// BroadcastOp: input must be f32/f64
func.func @case32(%a: tensor<3xi16>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.broadcast: operand must be a statically shaped tensor of i1, i32, i64, f32 or f64, got tensor<3xi16>
  %0 = tape.broadcast %a : tensor<3xi16> -> tensor<2x3xf32>
  func.return
}

// -----

// BroadcastOp: trailing dims equal or 1
func.func @case33(%a: tensor<3x2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.broadcast: cannot broadcast tensor<3x2xf32> to shape [3, 4] (trailing dims must be equal or 1)
  %0 = tape.broadcast %a : tensor<3x2xf32> -> tensor<3x4xf32>
  func.return
}

// -----

// BroadcastOp: no rank reduction
func.func @case34(%a: tensor<1x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.broadcast: cannot broadcast tensor<1x3xf32> to shape [3] (trailing dims must be equal or 1)
  %0 = tape.broadcast %a : tensor<1x3xf32> -> tensor<3xf32>
  func.return
}

// -----

// TapeOp.verify_: broadcast keeps the element type
func.func @case35(%a: tensor<3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.broadcast: result type tensor<2x3xf64> does not match tensor<2x3xf32>, the type its operands and parameters give
  %0 = tape.broadcast %a : tensor<3xf32> -> tensor<2x3xf64>
  func.return
}

// -----

// ReshapeOp: input must be f32/f64
func.func @case36(%a: tensor<?xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.reshape: operand must be a statically shaped tensor of i1, i32, i64, f32 or f64, got tensor<?xf32>
  %0 = tape.reshape %a : tensor<?xf32> -> tensor<2x3xf32>
  func.return
}

// -----

// ReshapeOp: same number of elements
func.func @case37(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.reshape: cannot reshape tensor<2x3xf32> (6 elements) to shape [7]
  %0 = tape.reshape %a : tensor<2x3xf32> -> tensor<7xf32>
  func.return
}

// -----

// PermuteOp: input must be f32/f64
func.func @case38(%a: tensor<2x3xi32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.permute: result type tensor<3x2xf32> does not match tensor<3x2xi32>, the type its operands and parameters give
  %0 = tape.permute %a perm = [1, 0] : tensor<2x3xi32> -> tensor<3x2xf32>
  func.return
}

// -----

// PermuteOp: perm is a permutation (repeat)
func.func @case39(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.permute: perm [1, 1] is not a permutation of the 2 dims of tensor<2x3xf32>
  %0 = tape.permute %a perm = [1, 1] : tensor<2x3xf32> -> tensor<3x3xf32>
  func.return
}

// -----

// PermuteOp: perm is a permutation (length)
func.func @case40(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.permute: perm [0] is not a permutation of the 2 dims of tensor<2x3xf32>
  %0 = tape.permute %a perm = [0] : tensor<2x3xf32> -> tensor<2xf32>
  func.return
}

// -----

// TapeOp.verify_: permute result shape
func.func @case41(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.permute: result type tensor<2x3xf32> does not match tensor<3x2xf32>, the type its operands and parameters give
  %0 = tape.permute %a perm = [1, 0] : tensor<2x3xf32>
  func.return
}

// -----

// PadOp: an integer's value must be a whole number of its type
func.func @case42(%a: tensor<2xi32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.pad: value 2.5 is not a int32 value, for tensor<2xi32>
  %0 = tape.pad %a low = [1] high = [1] value = 2.5 : tensor<2xi32> -> tensor<4xi32>
  func.return
}

// -----

// PadOp: check_ints low length
func.func @case43(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.pad: low needs 2 values, got [1]
  %0 = tape.pad %a low = [1] high = [1, 1] value = 0.0 : tensor<2x3xf32> -> tensor<4x4xf32>
  func.return
}

// -----

// PadOp: check_ints low minimum
func.func @case44(%a: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.pad: low values must be >= -4611686018427387904, got [-4611686018427387905]
  %0 = tape.pad %a low = [-4611686018427387905] high = [0] value = 0.0 : tensor<2xf32> -> tensor<2xf32>
  func.return
}

// -----

// PadOp: check_ints high length
func.func @case45(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.pad: high needs 2 values, got [1, 1, 1]
  %0 = tape.pad %a low = [1, 1] high = [1, 1, 1] value = 0.0 : tensor<2x3xf32> -> tensor<4x5xf32>
  func.return
}

// -----

// PadOp: check_ints high minimum
func.func @case46(%a: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.pad: high values must be >= -4611686018427387904, got [-9223372036854775808]
  %0 = tape.pad %a low = [0] high = [-9223372036854775808] value = 0.0 : tensor<2xf32> -> tensor<2xf32>
  func.return
}

// -----

// PadOp: negative padding crops at most the dim
func.func @case47(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.pad: negative padding low=[-1, 0] high=[-2, 0] crops more than tensor<2x3xf32> has
  %0 = tape.pad %a low = [-1, 0] high = [-2, 0] value = 0.0 : tensor<2x3xf32> -> tensor<0x3xf32>
  func.return
}

// -----

// TapeOp.verify_: pad result shape
func.func @case48(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.pad: result type tensor<3x3xf32> does not match tensor<3x4xf32>, the type its operands and parameters give
  %0 = tape.pad %a low = [1, 0] high = [0, 1] value = -inf : tensor<2x3xf32> -> tensor<3x3xf32>
  func.return
}

// -----

// SliceOp: input must be f32/f64/i1
func.func @case49(%a: tensor<4xi32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.slice: result type tensor<2xf32> does not match tensor<2xi32>, the type its operands and parameters give
  %0 = tape.slice %a start = [0] stop = [2] step = [1] : tensor<4xi32> -> tensor<2xf32>
  func.return
}

// -----

// SliceOp: check_ints start length
func.func @case50(%a: tensor<4x4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.slice: start needs 2 values, got [0]
  %0 = tape.slice %a start = [0] stop = [2, 2] step = [1, 1] : tensor<4x4xf32> -> tensor<2x2xf32>
  func.return
}

// -----

// SliceOp: check_ints start minimum
func.func @case51(%a: tensor<4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.slice: start values must be >= 0, got [-1]
  %0 = tape.slice %a start = [-1] stop = [2] step = [1] : tensor<4xf32> -> tensor<3xf32>
  func.return
}

// -----

// SliceOp: check_ints stop length
func.func @case52(%a: tensor<4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.slice: stop needs 1 values, got []
  %0 = tape.slice %a start = [0] stop = [] step = [1] : tensor<4xf32> -> tensor<2xf32>
  func.return
}

// -----

// SliceOp: check_ints stop minimum
func.func @case53(%a: tensor<4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.slice: stop values must be >= 0, got [-2]
  %0 = tape.slice %a start = [0] stop = [-2] step = [1] : tensor<4xf32> -> tensor<2xf32>
  func.return
}

// -----

// SliceOp: check_ints step length
func.func @case54(%a: tensor<4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.slice: step needs 1 values, got [1, 1]
  %0 = tape.slice %a start = [0] stop = [2] step = [1, 1] : tensor<4xf32> -> tensor<2xf32>
  func.return
}

// -----

// SliceOp: check_ints step minimum
func.func @case55(%a: tensor<4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.slice: step values must be >= 1, got [0]
  %0 = tape.slice %a start = [0] stop = [2] step = [0] : tensor<4xf32> -> tensor<2xf32>
  func.return
}

// -----

// SliceOp: start <= stop
func.func @case56(%a: tensor<4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.slice: start [3] and stop [2] must satisfy 0 <= start <= stop <= dim for tensor<4xf32>
  %0 = tape.slice %a start = [3] stop = [2] step = [1] : tensor<4xf32> -> tensor<0xf32>
  func.return
}

// -----

// SliceOp: stop <= dim
func.func @case57(%a: tensor<4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.slice: start [0] and stop [5] must satisfy 0 <= start <= stop <= dim for tensor<4xf32>
  %0 = tape.slice %a start = [0] stop = [5] step = [1] : tensor<4xf32> -> tensor<5xf32>
  func.return
}

// -----

// TapeOp.verify_: slice result shape (ceil division by step)
func.func @case58(%a: tensor<5xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.slice: result type tensor<2xf32> does not match tensor<3xf32>, the type its operands and parameters give
  %0 = tape.slice %a start = [0] stop = [5] step = [2] : tensor<5xf32> -> tensor<2xf32>
  func.return
}

// -----

// UnfoldOp: windows of the input's element type
func.func @case59(%a: tensor<5xi32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.unfold: result type tensor<4x2xf32> does not match tensor<4x2xi32>, the type its operands and parameters give
  %0 = tape.unfold %a kernel = [2] stride = [1] dilation = [1] : tensor<5xi32> -> tensor<4x2xf32>
  func.return
}

// -----

// UnfoldOp: kernel no longer than the rank
func.func @case60(%a: tensor<5xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.unfold: kernel [2, 2] has more dims than tensor<5xf32>
  %0 = tape.unfold %a kernel = [2, 2] stride = [1, 1] dilation = [1, 1] : tensor<5xf32> -> tensor<4x2xf32>
  func.return
}

// -----

// UnfoldOp: kernel not empty
func.func @case61(%a: tensor<5xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.unfold: kernel must have at least one dim
  %0 = tape.unfold %a kernel = [] stride = [] dilation = [] : tensor<5xf32>
  func.return
}

// -----

// _Windows: check_ints kernel minimum
func.func @case62(%a: tensor<5xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.unfold: kernel values must be >= 1, got [0]
  %0 = tape.unfold %a kernel = [0] stride = [1] dilation = [1] : tensor<5xf32> -> tensor<6x0xf32>
  func.return
}

// -----

// _Windows: check_ints stride length
func.func @case63(%a: tensor<5x5xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.unfold: stride needs 2 values, got [1]
  %0 = tape.unfold %a kernel = [2, 2] stride = [1] dilation = [1, 1] : tensor<5x5xf32> -> tensor<4x4x2x2xf32>
  func.return
}

// -----

// _Windows: check_ints stride minimum
func.func @case64(%a: tensor<5xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.unfold: stride values must be >= 1, got [0]
  %0 = tape.unfold %a kernel = [2] stride = [0] dilation = [1] : tensor<5xf32> -> tensor<4x2xf32>
  func.return
}

// -----

// _Windows: check_ints dilation length
func.func @case65(%a: tensor<5xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.unfold: dilation needs 1 values, got []
  %0 = tape.unfold %a kernel = [2] stride = [1] dilation = [] : tensor<5xf32> -> tensor<4x2xf32>
  func.return
}

// -----

// _Windows: check_ints dilation minimum
func.func @case66(%a: tensor<5xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.unfold: dilation values must be >= 1, got [0]
  %0 = tape.unfold %a kernel = [2] stride = [1] dilation = [0] : tensor<5xf32> -> tensor<4x2xf32>
  func.return
}

// -----

// _Windows: the dilated kernel fits
func.func @case67(%a: tensor<5xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.unfold: kernel [3] with dilation [3] does not fit in the spatial dims [5] of tensor<5xf32>
  %0 = tape.unfold %a kernel = [3] stride = [1] dilation = [3] : tensor<5xf32> -> tensor<1x3xf32>
  func.return
}

// -----

// TapeOp.verify_: unfold result shape
func.func @case68(%a: tensor<2x5xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.unfold: result type tensor<2x4x2xf32> does not match tensor<2x2x2xf32>, the type its operands and parameters give
  %0 = tape.unfold %a kernel = [2] stride = [2] dilation = [1] : tensor<2x5xf32> -> tensor<2x4x2xf32>
  func.return
}

// -----

// FoldOp: input must be f32/f64
func.func @case69(%a: tensor<4x2xf16>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.fold: operand must be a statically shaped tensor of f32 or f64, got tensor<4x2xf16>
  %0 = tape.fold %a kernel = [2] stride = [1] dilation = [1] : tensor<4x2xf16> -> tensor<5xf32>
  func.return
}

// -----

// FoldOp: window and kernel dims
func.func @case70(%a: tensor<4x2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.fold: tensor<4x2xf32> needs window and kernel dims for kernel [2, 2]
  %0 = tape.fold %a kernel = [2, 2] stride = [1, 1] dilation = [1, 1] : tensor<4x2xf32> -> tensor<5x3xf32>
  func.return
}

// -----

// FoldOp: spatial dims (read off the result) match the kernel
func.func @case71(%a: tensor<4x2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.fold: spatial [] needs 1 dims
  %0 = tape.fold %a kernel = [2] stride = [1] dilation = [1] : tensor<4x2xf32> -> tensor<f32>
  func.return
}

// -----

// FoldOp: _Windows check on the spatial dims
func.func @case72(%a: tensor<1x4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.fold: kernel [4] with dilation [2] does not fit in the spatial dims [5] of tensor<1x4xf32>
  %0 = tape.fold %a kernel = [4] stride = [1] dilation = [2] : tensor<1x4xf32> -> tensor<5xf32>
  func.return
}

// -----

// FoldOp: _Windows check_ints stride on fold
func.func @case73(%a: tensor<4x2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.fold: stride values must be >= 1, got [0]
  %0 = tape.fold %a kernel = [2] stride = [0] dilation = [1] : tensor<4x2xf32> -> tensor<5xf32>
  func.return
}

// -----

// FoldOp: input shape fits the fold
func.func @case74(%a: tensor<3x2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.fold: input tensor<3x2xf32> must have shape [4, 2] to fold onto spatial dims [5]
  %0 = tape.fold %a kernel = [2] stride = [1] dilation = [1] : tensor<3x2xf32> -> tensor<5xf32>
  func.return
}

// -----

// TapeOp.verify_: fold result element type
func.func @case75(%a: tensor<4x2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.fold: result type tensor<5xf64> does not match tensor<5xf32>, the type its operands and parameters give
  %0 = tape.fold %a kernel = [2] stride = [1] dilation = [1] : tensor<4x2xf32> -> tensor<5xf64>
  func.return
}

// -----

// ConcatOp: at least one operand
func.func @case76() {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.concat: needs at least one operand
  %0 = tape.concat axis = 0 : tensor<2xf32>
  func.return
}

// -----

// ConcatOp: operands must be f32/f64
func.func @case77(%a: tensor<2xf32>, %b: tensor<2xi32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.concat: operands must share one element type (cast explicitly); got tensor<2xf32>, tensor<2xi32>
  %0 = tape.concat %a, %b axis = 0 : tensor<2xf32>, tensor<2xi32> -> tensor<4xf32>
  func.return
}

// -----

// ConcatOp: same_element
func.func @case78(%a: tensor<2xf32>, %b: tensor<2xf64>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.concat: operands must share one element type (cast explicitly); got tensor<2xf32>, tensor<2xf64>
  %0 = tape.concat %a, %b axis = 0 : tensor<2xf32>, tensor<2xf64> -> tensor<4xf32>
  func.return
}

// -----

// ConcatOp: axis in range
func.func @case79(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.concat: axis 2 is out of range for tensor<2x3xf32>
  %0 = tape.concat %a, %a axis = 2 : tensor<2x3xf32> -> tensor<2x6xf32>
  func.return
}

// -----

// ConcatOp: axis in range (negative axes are normalized by the builder, not the IR)
func.func @case80(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.concat: axis -1 is out of range for tensor<2x3xf32>
  %0 = tape.concat %a, %a axis = -1 : tensor<2x3xf32> -> tensor<2x6xf32>
  func.return
}

// -----

// ConcatOp: other dims agree
func.func @case81(%a: tensor<2x3xf32>, %b: tensor<3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.concat: operands must agree on every dim but axis 1; got tensor<2x3xf32>, tensor<3x3xf32>
  %0 = tape.concat %a, %b axis = 1 : tensor<2x3xf32>, tensor<3x3xf32> -> tensor<2x6xf32>
  func.return
}

// -----

// ConcatOp: same rank
func.func @case82(%a: tensor<2x3xf32>, %b: tensor<2x3x1xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.concat: operands must agree on every dim but axis 0; got tensor<2x3xf32>, tensor<2x3x1xf32>
  %0 = tape.concat %a, %b axis = 0 : tensor<2x3xf32>, tensor<2x3x1xf32> -> tensor<4x3xf32>
  func.return
}

// -----

// TapeOp.verify_: concat result shape
func.func @case83(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.concat: result type tensor<2x6xf32> does not match tensor<4x3xf32>, the type its operands and parameters give
  %0 = tape.concat %a, %a axis = 0 : tensor<2x3xf32> -> tensor<2x6xf32>
  func.return
}

// -----

// any_tensor (layout ops): an i1 input must be statically shaped
func.func @case84(%a: tensor<?xi1>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.broadcast: operand must be a statically shaped tensor of i1, i32, i64, f32 or f64, got tensor<?xi1>
  %0 = tape.broadcast %a : tensor<?xi1> -> tensor<2x3xi1>
  func.return
}

// -----

// any_tensor (layout ops): reshape of i1 keeps the element count
func.func @case85(%a: tensor<2x3xi1>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.reshape: cannot reshape tensor<2x3xi1> (6 elements) to shape [5]
  %0 = tape.reshape %a : tensor<2x3xi1> -> tensor<5xi1>
  func.return
}

// -----

// any_tensor (layout ops): permute of i1 keeps the element type
func.func @case86(%a: tensor<2x3xi1>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.permute: result type tensor<3x2xf32> does not match tensor<3x2xi1>, the type its operands and parameters give
  %0 = tape.permute %a perm = [1, 0] : tensor<2x3xi1> -> tensor<3x2xf32>
  func.return
}

// -----

// any_tensor (layout ops): concat of i1 and f32 (same_element)
func.func @case87(%a: tensor<2xi1>, %b: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.concat: operands must share one element type (cast explicitly); got tensor<2xi1>, tensor<2xf32>
  %0 = tape.concat %a, %b axis = 0 : tensor<2xi1>, tensor<2xf32> -> tensor<4xf32>
  func.return
}

// -----

// PadOp: a boolean's value is 0 or 1
func.func @case88(%a: tensor<2xi1>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.pad: value 2.0 is not a bool value, for tensor<2xi1>
  %0 = tape.pad %a low = [1] high = [1] value = 2.0 : tensor<2xi1> -> tensor<4xi1>
  func.return
}

// -----

// _Reduce: input must be f32/f64
func.func @case89(%a: tensor<2x3xi32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.sum: result type tensor<3xf32> does not match tensor<3xi32>, the type its operands and parameters give
  %0 = tape.sum %a axes = [0] : tensor<2x3xi32> -> tensor<3xf32>
  func.return
}

// -----

// _Reduce: axes in increasing order
func.func @case90(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.sum: axes [1, 0] must be distinct dims of tensor<2x3xf32>, in increasing order
  %0 = tape.sum %a axes = [1, 0] : tensor<2x3xf32> -> tensor<f32>
  func.return
}

// -----

// _Reduce: axes distinct
func.func @case91(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.sum: axes [1, 1] must be distinct dims of tensor<2x3xf32>, in increasing order
  %0 = tape.sum %a axes = [1, 1] : tensor<2x3xf32> -> tensor<2xf32>
  func.return
}

// -----

// _Reduce: axes in range
func.func @case92(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.max: axes [2] must be distinct dims of tensor<2x3xf32>, in increasing order
  %0 = tape.max %a axes = [2] : tensor<2x3xf32> -> tensor<2x3xf32>
  func.return
}

// -----

// _Reduce: axes in range (no negative axes in the IR)
func.func @case93(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.sum: axes [-1] must be distinct dims of tensor<2x3xf32>, in increasing order
  %0 = tape.sum %a axes = [-1] : tensor<2x3xf32> -> tensor<2xf32>
  func.return
}

// -----

// TapeOp.verify_: keepdims keeps the rank
func.func @case94(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.sum: result type tensor<2x1xf32> does not match tensor<2xf32>, the type its operands and parameters give
  %0 = tape.sum %a axes = [1] : tensor<2x3xf32> -> tensor<2x1xf32>
  func.return
}

// -----

// TapeOp.verify_: no keepdims drops the axes
func.func @case95(%a: tensor<2x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.max: result type tensor<f32> does not match tensor<1x1xf32>, the type its operands and parameters give
  %0 = tape.max %a axes = [0, 1] keepdims : tensor<2x3xf32> -> tensor<f32>
  func.return
}

// -----

// MaxOp: no max over an empty axis
func.func @case96(%a: tensor<0x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.max: cannot take the max over an empty axis of tensor<0x3xf32> (it has no identity)
  %0 = tape.max %a axes = [0] : tensor<0x3xf32> -> tensor<3xf32>
  func.return
}

// -----

// MaxOp: the _Reduce rules hold for max too
func.func @case97(%a: tensor<2x3xf64>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.max: axes [1, 0] must be distinct dims of tensor<2x3xf64>, in increasing order
  %0 = tape.max %a axes = [1, 0] : tensor<2x3xf64> -> tensor<f64>
  func.return
}

// -----

// MatmulOp: lhs must be of numbers (integers or floats, not booleans)
func.func @case98(%a: tensor<2x3xi1>, %b: tensor<3x4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.matmul: lhs must be a statically shaped tensor of i32, i64, f32 or f64, got tensor<2x3xi1>
  %0 = tape.matmul %a, %b : tensor<2x3xi1>, tensor<3x4xf32> -> tensor<2x4xf32>
  func.return
}

// -----

// MatmulOp: rhs must be f32/f64
func.func @case99(%a: tensor<2x3xf32>, %b: tensor<3x?xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.matmul: rhs must be a statically shaped tensor of i32, i64, f32 or f64, got tensor<3x?xf32>
  %0 = tape.matmul %a, %b : tensor<2x3xf32>, tensor<3x?xf32> -> tensor<2x4xf32>
  func.return
}

// -----

// MatmulOp: same_element
func.func @case100(%a: tensor<2x3xf32>, %b: tensor<3x4xf64>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.matmul: operands must share one element type (cast explicitly); got tensor<2x3xf32>, tensor<3x4xf64>
  %0 = tape.matmul %a, %b : tensor<2x3xf32>, tensor<3x4xf64> -> tensor<2x4xf32>
  func.return
}

// -----

// MatmulOp: ranks 2 and 2, or 3 and 3
func.func @case101(%a: tensor<2x3xf32>, %b: tensor<1x3x4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.matmul: operands must both be rank 2, or both rank 3 (batched); got tensor<2x3xf32> and tensor<1x3x4xf32>
  %0 = tape.matmul %a, %b : tensor<2x3xf32>, tensor<1x3x4xf32> -> tensor<1x2x4xf32>
  func.return
}

// -----

// MatmulOp: no rank 1
func.func @case102(%a: tensor<3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.matmul: operands must both be rank 2, or both rank 3 (batched); got tensor<3xf32> and tensor<3xf32>
  %0 = tape.matmul %a, %a : tensor<3xf32> -> tensor<f32>
  func.return
}

// -----

// MatmulOp: batch dims equal
func.func @case103(%a: tensor<2x2x3xf32>, %b: tensor<1x3x4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.matmul: batch dims must be equal (broadcast explicitly); got tensor<2x2x3xf32> and tensor<1x3x4xf32>
  %0 = tape.matmul %a, %b : tensor<2x2x3xf32>, tensor<1x3x4xf32> -> tensor<2x2x4xf32>
  func.return
}

// -----

// MatmulOp: contraction dims
func.func @case104(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.matmul: contraction dims differ: tensor<2x3xf32> has 3 columns, tensor<4x5xf32> has 4 rows
  %0 = tape.matmul %a, %b : tensor<2x3xf32>, tensor<4x5xf32> -> tensor<2x5xf32>
  func.return
}

// -----

// TapeOp.verify_: matmul result shape
func.func @case105(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.matmul: result type tensor<4x2xf32> does not match tensor<2x4xf32>, the type its operands and parameters give
  %0 = tape.matmul %a, %b : tensor<2x3xf32>, tensor<3x4xf32> -> tensor<4x2xf32>
  func.return
}

// -----

// _rank4: input must be f32/f64
func.func @case106(%x: tensor<1x1x4x4xi32>, %w: tensor<1x1x3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: input must be a statically shaped tensor of f32 or f64, got tensor<1x1x4x4xi32>
  %0 = tape.conv2d %x, %w stride = [1, 1] padding = [0, 0, 0, 0] dilation = [1, 1] groups = 1 : tensor<1x1x4x4xi32>, tensor<1x1x3x3xf32> -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// _rank4: input rank 4
func.func @case107(%x: tensor<1x4x4xf32>, %w: tensor<1x1x3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: input must be rank 4 (N, C, H, W), got tensor<1x4x4xf32>
  %0 = tape.conv2d %x, %w stride = [1, 1] padding = [0, 0, 0, 0] dilation = [1, 1] groups = 1 : tensor<1x4x4xf32>, tensor<1x1x3x3xf32> -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// _rank4: weight must be f32/f64
func.func @case108(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x?xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: weight must be a statically shaped tensor of f32 or f64, got tensor<1x1x3x?xf32>
  %0 = tape.conv2d %x, %w stride = [1, 1] padding = [0, 0, 0, 0] dilation = [1, 1] groups = 1 : tensor<1x1x4x4xf32>, tensor<1x1x3x?xf32> -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// _rank4: weight rank 4
func.func @case109(%x: tensor<1x1x4x4xf32>, %w: tensor<1x3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: weight must be rank 4 (O, C/groups, KH, KW), got tensor<1x3x3xf32>
  %0 = tape.conv2d %x, %w stride = [1, 1] padding = [0, 0, 0, 0] dilation = [1, 1] groups = 1 : tensor<1x1x4x4xf32>, tensor<1x3x3xf32> -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// Conv2dOp: same_element
func.func @case110(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf64>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: operands must share one element type (cast explicitly); got tensor<1x1x4x4xf32>, tensor<1x1x3x3xf64>
  %0 = tape.conv2d %x, %w stride = [1, 1] padding = [0, 0, 0, 0] dilation = [1, 1] groups = 1 : tensor<1x1x4x4xf32>, tensor<1x1x3x3xf64> -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// Conv2dOp: groups divides the input channels
func.func @case111(%x: tensor<1x3x4x4xf32>, %w: tensor<4x1x3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: groups=2 must divide the input channels of tensor<1x3x4x4xf32> and the output channels of tensor<4x1x3x3xf32>
  %0 = tape.conv2d %x, %w stride = [1, 1] padding = [0, 0, 0, 0] dilation = [1, 1] groups = 2 : tensor<1x3x4x4xf32>, tensor<4x1x3x3xf32> -> tensor<1x4x2x2xf32>
  func.return
}

// -----

// Conv2dOp: groups divides the output channels
func.func @case112(%x: tensor<1x4x4x4xf32>, %w: tensor<3x2x3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: groups=2 must divide the input channels of tensor<1x4x4x4xf32> and the output channels of tensor<3x2x3x3xf32>
  %0 = tape.conv2d %x, %w stride = [1, 1] padding = [0, 0, 0, 0] dilation = [1, 1] groups = 2 : tensor<1x4x4x4xf32>, tensor<3x2x3x3xf32> -> tensor<1x3x2x2xf32>
  func.return
}

// -----

// Conv2dOp: groups >= 1
func.func @case113(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: groups=0 must divide the input channels of tensor<1x1x4x4xf32> and the output channels of tensor<1x1x3x3xf32>
  %0 = tape.conv2d %x, %w stride = [1, 1] padding = [0, 0, 0, 0] dilation = [1, 1] groups = 0 : tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32> -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// Conv2dOp: weight has C/groups input channels
func.func @case114(%x: tensor<1x4x4x4xf32>, %w: tensor<2x4x3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: weight tensor<2x4x3x3xf32> must have C/groups = 2 input channels for tensor<1x4x4x4xf32>
  %0 = tape.conv2d %x, %w stride = [1, 1] padding = [0, 0, 0, 0] dilation = [1, 1] groups = 2 : tensor<1x4x4x4xf32>, tensor<2x4x3x3xf32> -> tensor<1x2x2x2xf32>
  func.return
}

// -----

// _padded_windows: check_ints stride length
func.func @case115(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: stride needs 2 values, got [1]
  %0 = tape.conv2d %x, %w stride = [1] padding = [0, 0, 0, 0] dilation = [1, 1] groups = 1 : tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32> -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// _padded_windows: check_ints stride minimum
func.func @case116(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: stride values must be >= 1, got [1, 0]
  %0 = tape.conv2d %x, %w stride = [1, 0] padding = [0, 0, 0, 0] dilation = [1, 1] groups = 1 : tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32> -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// _padded_windows: check_ints padding length
func.func @case117(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: padding needs 4 values, got [0, 0]
  %0 = tape.conv2d %x, %w stride = [1, 1] padding = [0, 0] dilation = [1, 1] groups = 1 : tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32> -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// _padded_windows: check_ints padding minimum
func.func @case118(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: padding values must be >= 0, got [0, -1, 0, 0]
  %0 = tape.conv2d %x, %w stride = [1, 1] padding = [0, -1, 0, 0] dilation = [1, 1] groups = 1 : tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32> -> tensor<1x1x2x1xf32>
  func.return
}

// -----

// _padded_windows: check_ints dilation length
func.func @case119(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: dilation needs 2 values, got [1, 1, 1]
  %0 = tape.conv2d %x, %w stride = [1, 1] padding = [0, 0, 0, 0] dilation = [1, 1, 1] groups = 1 : tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32> -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// _padded_windows: check_ints dilation minimum
func.func @case120(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: dilation values must be >= 1, got [0, 1]
  %0 = tape.conv2d %x, %w stride = [1, 1] padding = [0, 0, 0, 0] dilation = [0, 1] groups = 1 : tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32> -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// _padded_windows: the window fits
func.func @case121(%x: tensor<1x1x4x4xf32>, %w: tensor<1x1x3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: window [3, 3] (dilation [2, 1]) does not fit in the padded spatial dims [4, 4] of tensor<1x1x4x4xf32>
  %0 = tape.conv2d %x, %w stride = [1, 1] padding = [0, 0, 0, 0] dilation = [2, 1] groups = 1 : tensor<1x1x4x4xf32>, tensor<1x1x3x3xf32> -> tensor<1x1x0x2xf32>
  func.return
}

// -----

// TapeOp.verify_: conv2d result shape
func.func @case122(%x: tensor<1x1x4x4xf32>, %w: tensor<2x1x3x3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.conv2d: result type tensor<1x2x2x2xf32> does not match tensor<1x2x4x4xf32>, the type its operands and parameters give
  %0 = tape.conv2d %x, %w stride = [1, 1] padding = [1, 1, 1, 1] dilation = [1, 1] groups = 1 : tensor<1x1x4x4xf32>, tensor<2x1x3x3xf32> -> tensor<1x2x2x2xf32>
  func.return
}

// -----

// _Pool2d/_rank4: input must be f32/f64
func.func @case123(%x: tensor<1x1x4x4xi1>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.maxpool2d: input must be a statically shaped tensor of f32 or f64, got tensor<1x1x4x4xi1>
  %0 = tape.maxpool2d %x kernel = [2, 2] stride = [2, 2] padding = [0, 0, 0, 0] : tensor<1x1x4x4xi1> -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// _Pool2d/_rank4: input rank 4
func.func @case124(%x: tensor<4x4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.maxpool2d: input must be rank 4 (N, C, H, W), got tensor<4x4xf32>
  %0 = tape.maxpool2d %x kernel = [2, 2] stride = [2, 2] padding = [0, 0, 0, 0] : tensor<4x4xf32> -> tensor<2x2xf32>
  func.return
}

// -----

// _Pool2d: check_ints kernel length
func.func @case125(%x: tensor<1x1x4x4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.maxpool2d: kernel needs 2 values, got [2]
  %0 = tape.maxpool2d %x kernel = [2] stride = [2, 2] padding = [0, 0, 0, 0] : tensor<1x1x4x4xf32> -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// _Pool2d: check_ints kernel minimum
func.func @case126(%x: tensor<1x1x4x4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.avgpool2d: kernel values must be >= 1, got [2, 0]
  %0 = tape.avgpool2d %x kernel = [2, 0] stride = [2, 2] padding = [0, 0, 0, 0] : tensor<1x1x4x4xf32> -> tensor<1x1x2x3xf32>
  func.return
}

// -----

// _Pool2d/_padded_windows: stride
func.func @case127(%x: tensor<1x1x4x4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.avgpool2d: stride values must be >= 1, got [0, 2]
  %0 = tape.avgpool2d %x kernel = [2, 2] stride = [0, 2] padding = [0, 0, 0, 0] : tensor<1x1x4x4xf32> -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// _Pool2d/_padded_windows: padding
func.func @case128(%x: tensor<1x1x4x4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.avgpool2d: padding needs 4 values, got [0, 0, 0]
  %0 = tape.avgpool2d %x kernel = [2, 2] stride = [2, 2] padding = [0, 0, 0] : tensor<1x1x4x4xf32> -> tensor<1x1x2x2xf32>
  func.return
}

// -----

// _Pool2d/_padded_windows: the window fits
func.func @case129(%x: tensor<1x1x4x4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.maxpool2d: window [5, 2] (dilation [1, 1]) does not fit in the padded spatial dims [4, 4] of tensor<1x1x4x4xf32>
  %0 = tape.maxpool2d %x kernel = [5, 2] stride = [1, 1] padding = [0, 0, 0, 0] : tensor<1x1x4x4xf32> -> tensor<1x1x0x3xf32>
  func.return
}

// -----

// TapeOp.verify_: pool result shape
func.func @case130(%x: tensor<1x1x4x4xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.avgpool2d: result type tensor<1x1x3x3xf32> does not match tensor<1x1x2x2xf32>, the type its operands and parameters give
  %0 = tape.avgpool2d %x kernel = [2, 2] stride = [2, 2] padding = [0, 0, 0, 0] : tensor<1x1x4x4xf32> -> tensor<1x1x3x3xf32>
  func.return
}

// -----

// FusedOp: the body reads one rank-0 element per input
func.func @fused_body_args(%a: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.fused: body argument tensor<f64> must be the rank-0 f32 of input tensor<2xf32>
  %0 = tape.fused %a : tensor<2xf32> -> tensor<2xf32> {
  ^bb0(%x: tensor<f64>):
    %n = tape.neg %x : tensor<f64>
    tape.yield %n : tensor<f64>
  }
  func.return
}

// -----

// FusedOp: elementwise ops only in the body
func.func @fused_body_ops(%a: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.fused: the body holds rank-0 elementwise ops only, not tape.sum
  %0 = tape.fused %a : tensor<2xf32> -> tensor<2xf32> {
  ^bb0(%x: tensor<f32>):
    %s = tape.sum %x axes = [] : tensor<f32>
    tape.yield %s : tensor<f32>
  }
  func.return
}

// -----

// FusedOp: the body sees its own arguments and values only
func.func @fused_body_capture(%a: tensor<2xf32>, %s: tensor<f32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.fused: the body uses %s, defined outside it; pass it in as an input (a rank-0 tensor broadcasts)
  %0 = tape.fused %a : tensor<2xf32> -> tensor<2xf32> {
  ^bb0(%x: tensor<f32>):
    %m = tape.mul %x, %s : tensor<f32>
    tape.yield %m : tensor<f32>
  }
  func.return
}

// -----

// FusedOp: the inputs must broadcast together
func.func @fused_broadcast(%a: tensor<2xf32>, %b: tensor<3xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.fused: inputs tensor<2xf32>, tensor<3xf32> do not broadcast together
  %0 = tape.fused %a, %b : tensor<2xf32>, tensor<3xf32> -> tensor<2xf32> {
  ^bb0(%x: tensor<f32>, %y: tensor<f32>):
    %s = tape.add %x, %y : tensor<f32>
    tape.yield %s : tensor<f32>
  }
  func.return
}

// -----

func.func @integer_ops_take_integers(%a: tensor<2xf32>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.floordiv: lhs must be a statically shaped tensor of i32 or i64, got tensor<2xf32>
  %0 = tape.floordiv %a, %a : tensor<2xf32>
  func.return
}

// -----

func.func @bitwise_ops_take_integers_and_i1(%a: tensor<2xf64>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.not: operand must be a statically shaped tensor of i1, i32 or i64, got tensor<2xf64>
  %0 = tape.not %a : tensor<2xf64>
  func.return
}

// -----

func.func @shifts_take_no_i1(%a: tensor<2xi1>) {
  // CHECK: tape-verify.mlir:[[# @LINE + 1]]:3: error: tape.shl: lhs must be a statically shaped tensor of i32 or i64, got tensor<2xi1>
  %0 = tape.shl %a, %a : tensor<2xi1>
  func.return
}
