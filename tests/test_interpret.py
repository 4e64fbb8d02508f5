"""`tapeml.interpret`: argument checking and result ownership."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.parser import Parser

import tapeml
from tapeml.dialects.tape import Tape

SRC = """
func.func @f(%x: tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<2x3xf32>) {
  %p = tape.permute %x perm = [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
  func.return %p, %x : tensor<3x2xf32>, tensor<2x3xf32>
}
func.func @g() -> tensor<2xf64> {
  %c = tape.constant dense<[1.5, 2.5]> : tensor<2xf64>
  func.return %c : tensor<2xf64>
}
"""


@pytest.fixture(scope="module")
def module():
    ctx = Context()
    for d in (builtin.Builtin, func.Func, Tape):
        ctx.load_dialect(d)
    return Parser(ctx, SRC).parse_module()


def test_results_are_fresh_arrays(module):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    p, same = tapeml.interpret(module, "f", x)
    np.testing.assert_array_equal(p, x.T)
    assert p.flags.c_contiguous and p.flags.writeable
    assert not np.shares_memory(p, x) and not np.shares_memory(same, x)


def test_array_likes_take_the_declared_dtype(module):
    (c,) = tapeml.interpret(module, "g")
    assert c.dtype == np.float64 and c.tolist() == [1.5, 2.5]
    p, _ = tapeml.interpret(module, "f", [[0, 1, 2], [3, 4, 5]])
    assert p.dtype == np.float32


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("h", (), r"no function @h in the module \(functions: @f, @g\)"),
        ("f", (), r"@f takes 1 arguments, got 0"),
        ("f", (np.zeros((3, 2), np.float32),),
         r"argument 0 \(%x\) of @f must have shape \(2, 3\)"),
        ("f", (np.zeros((2, 3)),),
         r"argument 0 \(%x\) of @f must have dtype float32 .* got float64"),
        ("f", (None,), r"argument 0 \(%x\) of @f must be an array for tensor<2x3xf32>, got None"),
    ],
)
def test_bad_arguments_are_clear_errors(module, name, args, message):
    with pytest.raises(tapeml.InterpretError, match=message):
        tapeml.interpret(module, name, *args)


def test_an_arith_op_on_tensors_is_refused_by_name():
    from xdsl.dialects import arith

    ctx = Context()
    for d in (builtin.Builtin, func.Func, arith.Arith):
        ctx.load_dialect(d)
    module = Parser(ctx, """
        func.func @m(%x: tensor<2xf32>) -> tensor<2xf32> {
          %0 = arith.mulf %x, %x : tensor<2xf32>
          func.return %0 : tensor<2xf32>
        }""").parse_module()
    with pytest.raises(tapeml.InterpretError, match=r"^arith\.mulf on tensor<2xf32>: the "
                       "interpreter runs arith ops on scalars"):
        tapeml.interpret(module, "m", np.ones(2, np.float32))


def test_hex_elements_of_a_float_literal_are_bit_patterns():
    """`dense<[0x7FC00000, 1.0]> : tensor<2xf32>` holds NaN and 1.0, as in MLIR: a hex element
    of a float literal is the float's bits (xDSL's printer writes them for inf, NaN and some
    finite floats in the generic form; its parser had read them as integer values, NaN as
    2143289344.0); one wider than the type is an error."""
    program = tapeml.Program.parse("""
        func.func @f() -> (tensor<3xf32>, tensor<f64>, tensor<2xf32>) {
          %0 = tape.constant dense<[0x7FC00000, 1.0, 0x49800000]> : tensor<3xf32>
          %1 = tape.constant dense<0xFFF0000000000000> : tensor<f64>
          %2 = tape.constant dense<[3, -2]> : tensor<2xf32>
          func.return %0, %1, %2 : tensor<3xf32>, tensor<f64>, tensor<2xf32>
        }""")
    a, b, c = program()
    assert np.isnan(a[0]) and a[1] == 1.0 and a[2] == 1048576.0 and b == -np.inf
    np.testing.assert_array_equal(c, [3.0, -2.0])
    for literal, message in (("0x1FFFFFFFF", "hex literal 0x1FFFFFFFF does not fit in f32's 32 "
                                             "bits"),
                             ("-0x7F800000", "hex literal -0x7F800000 of f32 is a bit pattern: "
                                             "it takes no sign")):
        with pytest.raises(Exception, match=message):
            tapeml.Program.parse(f"""
                func.func @f() -> tensor<f32> {{
                  %0 = tape.constant dense<{literal}> : tensor<f32>
                  func.return %0 : tensor<f32>
                }}""")
    signed = tapeml.Program.parse("""
        func.func @f() -> tensor<2xi32> {
          %0 = tape.constant dense<[-0x10, 0x10]> : tensor<2xi32>
          func.return %0 : tensor<2xi32>
        }""")()
    np.testing.assert_array_equal(signed, [-16, 16])  # (integers' hex literals as they were)
