"""The arith/math/scf implementations tapeml adds to xDSL's interpreter, against numpy scalars
of the same width (so lowered programs interpret to the bits the tape interpreter gives)."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, math, memref, scf
from xdsl.dialects.builtin import IndexType, ModuleOp
from xdsl.ir import Block, Region
from xdsl.parser import Parser

import tapeml


def parse(src: str) -> ModuleOp:
    ctx = Context()
    for d in (builtin.Builtin, func.Func, arith.Arith, math.Math, memref.MemRef, scf.Scf):
        ctx.load_dialect(d)
    module = Parser(ctx, src).parse_module()
    module.verify()
    return module


def _pow(a, b):
    """C's pow, rounded once to the operands' type: numpy's own f32 power is not correctly
    rounded (2 ** -1.7 one ulp low here; libm's powf and the interpreter round correctly)."""
    return type(a)(np.power(np.float64(a), np.float64(b)))


BINARY = {
    "arith.divf": np.divide,
    "arith.maxnumf": np.fmax,
    "arith.minnumf": np.fmin,
    "math.powf": _pow,
}
UNARY = {
    "arith.negf": np.negative,
    "math.tanh": np.tanh,
    "math.exp": np.exp,
    "math.log": np.log,
    "math.sqrt": np.sqrt,
    "math.absf": np.abs,
    "math.floor": np.floor,
    "math.log1p": np.log1p,
}
VALUES = [0.3, -1.7, 2.0, 0.0, float("nan"), float("inf")]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_float_ops(name, dtype):
    t = "f32" if dtype == np.float32 else "f64"
    module = parse(f"""func.func @f(%a: {t}, %b: {t}) -> {t} {{
      %r = {name} %a, %b : {t}
      func.return %r : {t}
    }}""")
    for a in VALUES:
        for b in VALUES:
            (got,) = tapeml.interpret(module, "f", a, b)
            with np.errstate(all="ignore"):
                expected = BINARY[name](dtype(a), dtype(b))
            assert type(got) is dtype
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float_ops(name, dtype):
    t = "f32" if dtype == np.float32 else "f64"
    module = parse(f"""func.func @f(%a: {t}) -> {t} {{
      %r = {name} %a : {t}
      func.return %r : {t}
    }}""")
    for a in VALUES:
        (got,) = tapeml.interpret(module, "f", a)
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(got, UNARY[name](dtype(a)))


def test_maxnumf_prefers_the_number_over_nan():
    module = parse("""func.func @f(%a: f32, %b: f32) -> (f32, f32) {
      %x = arith.maxnumf %a, %b : f32
      %y = arith.minnumf %b, %a : f32
      func.return %x, %y : f32, f32
    }""")
    assert tapeml.interpret(module, "f", float("nan"), 2.0) == (2.0, 2.0)


def test_casts():
    module = parse("""func.func @f(%a: f64, %i: i32) -> (f32, f64, f32, i32, i64, f32) {
      %t = arith.truncf %a : f64 to f32
      %e = arith.extf %t : f32 to f64
      %s = arith.sitofp %i : i32 to f32
      %n = arith.fptosi %a : f64 to i32
      %w = arith.extsi %i : i32 to i64
      %u = arith.uitofp %i : i32 to f32
      func.return %t, %e, %s, %n, %w, %u : f32, f64, f32, i32, i64, f32
    }""")
    t, e, s, n, w, u = tapeml.interpret(module, "f", 0.1, -3)
    assert t == np.float32(0.1) and type(t) is np.float32
    assert e == np.float64(np.float32(0.1))
    assert (s, n, w) == (-3.0, 0, -3)
    assert u == np.float32(2**32 - 3)
    (n,) = tapeml.interpret(parse("""func.func @f(%a: f64) -> i32 {
      %n = arith.fptosi %a : f64 to i32
      func.return %n : i32
    }"""), "f", -2.9)
    assert n == -2  # truncates toward zero


def _parallel_sum_of_squares(n: int, step: int) -> ModuleOp:
    """sum over i in range(0, n, step) and j in range(3) of i*i + j, with an scf.parallel."""
    index = IndexType()
    block = Block()
    b = Builder(InsertPoint.at_end(block))
    c = [b.insert(arith.ConstantOp.from_int_and_width(v, index)).result for v in (0, 1, 3, n, step)]
    zero, one, three, upper, stride = c
    body = Block(arg_types=[index, index])
    i, j = body.args
    inner = Builder(InsertPoint.at_end(body))
    square = inner.insert(arith.MuliOp(i, i)).result
    value = inner.insert(arith.AddiOp(square, j)).result
    combine = Block(arg_types=[index, index])
    total = Builder(InsertPoint.at_end(combine)).insert(arith.AddiOp(*combine.args)).result
    Builder(InsertPoint.at_end(combine)).insert(scf.ReduceReturnOp(total))
    inner.insert(scf.ReduceOp([value], [Region(combine)]))
    loop = b.insert(scf.ParallelOp([zero, zero], [upper, three], [stride, one], Region(body),
                                   [zero]))
    b.insert(func.ReturnOp(loop.res[0]))
    module = ModuleOp([func.FuncOp("f", ((), (index,)), Region(block))])
    module.verify()
    return module


@pytest.mark.parametrize(("n", "step"), [(5, 1), (7, 2), (0, 1)])
def test_scf_parallel_with_a_reduction(n, step):
    (got,) = tapeml.interpret(_parallel_sum_of_squares(n, step), "f")
    assert got == sum(i * i + j for i in range(0, n, step) for j in range(3))


def test_scf_parallel_writes_buffers():
    module = parse("""func.func @f(%a: memref<2x3xf32>, %b: memref<2x3xf32>) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      "scf.parallel"(%c0, %c0, %c2, %c3, %c1, %c1)
          <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
      ^bb0(%i: index, %j: index):
        %x = memref.load %a[%i, %j] : memref<2x3xf32>
        %y = math.tanh %x : f32
        memref.store %y, %b[%i, %j] : memref<2x3xf32>
        scf.reduce
      }) : (index, index, index, index, index, index) -> ()
      func.return
    }""")
    a = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    b = np.zeros_like(a)
    assert tapeml.interpret(module, "f", a, b) == ()
    np.testing.assert_array_equal(b, np.tanh(a))


def test_f32_and_f64_scalar_types_are_kept():
    module = parse("""func.func @f(%a: f32, %b: f64) -> (f32, f64) {
      %x = arith.divf %a, %a : f32
      %y = arith.divf %b, %b : f64
      func.return %x, %y : f32, f64
    }""")
    x, y = tapeml.interpret(module, "f", 3.0, 3.0)
    assert (type(x), type(y)) == (np.float32, np.float64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fma_rounds_once(dtype):
    """math.fma in the interpreters is C's fma: the exact a * b + c rounded once to the type
    (nearest, ties to even), what llvm.fma and the GPU's fma.rn compute; checked against
    rationals over random operands of every scale, and at the edges: a residual a separate
    multiply would round away, a zero's sign, overflow, inf and nan."""
    from fractions import Fraction

    from tapeml.interpreters.scalars import fused_multiply_add as fma

    t = dtype
    rng = np.random.default_rng(3)
    for _ in range(3000):
        a, b, c = (t(v) for v in rng.standard_normal(3) * 10.0 ** rng.integers(-8, 8, 3))
        got = fma(a, b, c)
        assert type(got) is t
        exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
        for neighbour in (np.nextafter(got, t(-np.inf)), np.nextafter(got, t(np.inf))):
            assert abs(Fraction(float(neighbour)) - exact) >= abs(Fraction(float(got)) - exact)
    tenth = t(0.1)
    residual = Fraction(float(tenth)) * 10 - 1  # 0.1 * 10 - 1 is 0 when the product rounds
    assert fma(tenth, t(10), t(-1)) == t(float(residual)) != 0
    assert np.signbit(fma(t(-0.0), t(1), t(-0.0))) and not np.signbit(fma(t(2), t(3), t(-6)))
    big = np.finfo(t).max
    assert fma(big, t(2), t(0)) == np.inf and fma(-big, t(2), t(0)) == -np.inf
    assert np.isnan(fma(t(np.inf), t(0), t(1))) and fma(t(np.inf), t(1), t(1)) == np.inf


def test_transcendental_polynomials_are_fused_multiply_adds():
    """exp's Horner steps are math.fma in the loops, llvm.fma in LLVM IR (vectorized)."""
    x = np.ones(64, np.float32)
    stages = tapeml.jit(lambda x: tapeml.exp(x)).lower(x)
    assert "math.fma" in stages["loops"] and "llvm.fma" in stages["optimized llvm ir"]
