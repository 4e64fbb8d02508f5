// Each parse error is located at the mistake itself: its line, and a caret under the offending
// text (not under the token after it, nor at the end of the input).
// RUN: tapeml-opt %s --split-input-file --parsing-diagnostics | filecheck %s --match-full-lines --strict-whitespace

// A dense literal with more values than its shape holds: at the literal, not on the next line.
func.func @count_mismatch() -> tensor<2xf32> {
  // CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 3]]:22: error: tape.constant: Shape mismatch in dense literal. Expected [2] shape from the type, but got [3] shape.
  // CHECK-NEXT:  %0 = tape.constant dense<[1.0, 2.0, 3.0]> : tensor<2xf32>
  // CHECK-NEXT:                     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  %0 = tape.constant dense<[1.0, 2.0, 3.0]> : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

// ... the same in the generic form.
func.func @count_mismatch_generic() -> tensor<2xf32> {
  // CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 3]]:36: error: Shape mismatch in dense literal. Expected [2] shape from the type, but got [3] shape.
  // CHECK-NEXT:  %0 = "tape.constant"() <{value = dense<[1.0, 2.0, 3.0]> : tensor<2xf32>}> : () -> tensor<2xf32>
  // CHECK-NEXT:                                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  %0 = "tape.constant"() <{value = dense<[1.0, 2.0, 3.0]> : tensor<2xf32>}> : () -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

// A value too large for f32 (xDSL raised an OverflowError): an error that names it, at the
// literal. (MLIR would round it to inf; tapeml's inf is written dense<"0x7F800000">.)
func.func @overflow() -> tensor<2xf32> {
  // CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 3]]:22: error: tape.constant: 4.0e64 does not fit f32 (the largest finite f32 is 3.4028235e+38)
  // CHECK-NEXT:  %0 = tape.constant dense<4.0e64> : tensor<2xf32>
  // CHECK-NEXT:                     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  %0 = tape.constant dense<4.0e64> : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

// ... in a list, in another dialect's op.
func.func @overflow_in_a_list() -> tensor<3xf32> {
  // CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 3]]:23: error: -1.0e39 does not fit f32 (the largest finite f32 is 3.4028235e+38)
  // CHECK-NEXT:  %0 = arith.constant dense<[1.0, -1.0e39, 2.0]> : tensor<3xf32>
  // CHECK-NEXT:                      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  %0 = arith.constant dense<[1.0, -1.0e39, 2.0]> : tensor<3xf32>
  func.return %0 : tensor<3xf32>
}

// -----

// An integer too large for its element type (found by tests/fuzz_cli.py: xDSL raised a
// ValueError).
func.func @integer_overflow() -> tensor<2xi8> {
  // CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 3]]:23: error: Integer value 1000 is out of range for type i8 which supports values in the range [-128, 256)
  // CHECK-NEXT:  %0 = arith.constant dense<[1, 1000]> : tensor<2xi8>
  // CHECK-NEXT:                      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  %0 = arith.constant dense<[1, 1000]> : tensor<2xi8>
  func.return %0 : tensor<2xi8>
}

// -----

// ... and a scalar one, at the attribute (xDSL's error named no place).
func.func @scalar_integer_overflow() -> i8 {
  // CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 3]]:23: error: Integer value 1000 is out of range for type i8 which supports values in the range [-128, 256)
  // CHECK-NEXT:  %0 = arith.constant 1000 : i8
  // CHECK-NEXT:                      ^^^^^^^^^
  %0 = arith.constant 1000 : i8
  func.return %0 : i8
}

// -----

// The largest finite f32 itself fits (3.4028235e+38 rounds to it).
func.func @largest() -> tensor<2xf32> {
  // CHECK:    %0 = tape.constant dense<3.40282347e+38> : tensor<2xf32>
  %0 = tape.constant dense<3.4028235e+38> : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

// An unknown op: the caret under its name, not under the operand after it.
func.func @unknown_op(%a: tensor<2xf32>) -> tensor<2xf32> {
  // CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 3]]:8: error: Operation tape.frobnicate is not registered
  // CHECK-NEXT:  %0 = tape.frobnicate %a : tensor<2xf32>
  // CHECK-NEXT:       ^^^^^^^^^^^^^^^
  %0 = tape.frobnicate %a : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

// An undefined value: at its use, not at the end of the input.
func.func @undefined(%a: tensor<2xf32>) -> tensor<2xf32> {
  // CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 3]]:21: error: use of undefined value %zz
  // CHECK-NEXT:  %0 = tape.add %a, %zz : tensor<2xf32>
  // CHECK-NEXT:                    ^^^
  %0 = tape.add %a, %zz : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

// Something that is neither an op nor the closing brace after a region's ops: a message that
// says so and where the region opens (xDSL's said " in block definition").
// CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 5]]:3: error: expected an operation or '}' to close the region opened at [[# @LINE + 3]]:54, found ']'
// CHECK-NEXT:  ]
// CHECK-NEXT:  ^
func.func @stray(%a: tensor<2xf32>) -> tensor<2xf32> {
  func.return %a : tensor<2xf32>
  ]
}

// -----

// An integer clause beyond i64 (found by tests/fuzz_cli.py: xDSL raised a ValueError).
func.func @beyond_i64(%a: tensor<2x3xf32>) -> tensor<3xf32> {
  // CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 3]]:28: error: axes: 99999999999999999999 does not fit i64
  // CHECK-NEXT:  %0 = tape.sum %a axes = [99999999999999999999] : tensor<2x3xf32> -> tensor<3xf32>
  // CHECK-NEXT:                           ^^^^^^^^^^^^^^^^^^^^
  %0 = tape.sum %a axes = [99999999999999999999] : tensor<2x3xf32> -> tensor<3xf32>
  func.return %0 : tensor<3xf32>
}

// -----

func.func @beyond_i64_int(%a: tensor<2xf32>) -> tensor<4xf32> {
  // CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 1]]:34: error: axis: -9223372036854775809 does not fit i64
  %0 = tape.concat %a, %a axis = -9223372036854775809 : tensor<2xf32> -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// A block label declared twice, after a branch to it (found by tests/fuzz_cli.py: xDSL raised a
// KeyError).
// CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 7]]:1: error: re-declaration of block 'left', first declared at [[# @LINE + 5]]:1
// CHECK-NEXT:^left:
// CHECK-NEXT:^^^^^
func.func @twice(%c: i1, %a: f32) -> f32 {
  cf.cond_br %c, ^left, ^left
^left:
  cf.br ^left
^left:
  func.return %a : f32
}

// -----

// An operand type the op's syntax refuses as it is read: at the op, named (found by
// tests/fuzz_cli.py: xDSL's error named no place).
func.func @refused_while_read(%a: f32) -> f32 {
  // CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 3]]:3: error: arith.negf: Unexpected attribute i64
  // CHECK-NEXT:  %m = arith.negf %a : i64
  // CHECK-NEXT:  ^^^^^^^^^^^^^^^^^^^^^^^^
  %m = arith.negf %a : i64
  func.return %a : f32
}

// -----

// A sigil with no name after it: xDSL's message left its placeholder unformatted.
// CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 3]]:1: error: Expected suffix identifier after '#'
// CHECK-NEXT:#
// CHECK-NEXT:^
#

// -----

// A float literal beyond f64 (MLIR's error; xDSL read it as inf), in a literal and in a clause.
func.func @beyond_f64(%a: tensor<2xf64>) -> tensor<4xf64> {
  // CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 3]]:30: error: floating point value too large
  // CHECK-NEXT:  %0 = tape.constant dense<[-1.0e400, 1.0]> : tensor<2xf64>
  // CHECK-NEXT:                             ^^^^^^^
  %0 = tape.constant dense<[-1.0e400, 1.0]> : tensor<2xf64>
  %1 = tape.pad %0 low = [1] high = [1] value = 0.0 : tensor<2xf64> -> tensor<4xf64>
  func.return %1 : tensor<4xf64>
}

// -----

func.func @beyond_f64_clause(%a: tensor<2xf64>) -> tensor<4xf64> {
  // CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 1]]:50: error: floating point value too large
  %0 = tape.pad %a low = [1] high = [1] value = -2.0e308 : tensor<2xf64> -> tensor<4xf64>
  func.return %0 : tensor<4xf64>
}

// -----

// A region never closed: the same message, at the end of the input.
// CHECK:{{.*}}tapeml-opt-located.mlir:[[# @LINE + 3]]:1: error: expected an operation or '}' to close the region opened at [[# @LINE + 1]]:57, found the end of the input
func.func @unclosed(%a: tensor<2xf32>) -> tensor<2xf32> {
  func.return %a : tensor<2xf32>
