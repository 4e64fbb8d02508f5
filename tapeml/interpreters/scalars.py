"""xDSL interpreter implementations for the arith and math ops that xDSL 0.75 lacks and our
lowerings emit (and llvm.frem, tape.fmod's loops), so every lowered stage still runs on the
interpreter.

Scalars are xDSL's runtime values (`FloatAttr` / `IntegerAttr`). Float math is done on numpy
scalars of the op's own width, so an f32 op rounds exactly as the numpy f32 kernels the tape
interpreter uses: a lowered program interprets to the same bits as the tape it came from.
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from xdsl.dialects import arith, llvm, math
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, IntegerType
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls
from xdsl.interpreters.builtin import scalar_attr
from xdsl.ir import Attribute, Operation

from tapeml.interpreters import libm

_NP_FLOAT = {"f16": np.float16, "f32": np.float32, "f64": np.float64}


def _np(value: FloatAttr) -> np.floating:
    return _NP_FLOAT[str(value.type)](value.value.data)


def _float(value: np.floating | float, t: Attribute) -> FloatAttr:
    return FloatAttr(float(_NP_FLOAT[str(t)](value)), t)


def fused_multiply_add(a: np.floating, b: np.floating, c: np.floating) -> np.floating:
    """a * b + c rounded once to the operands' type (C's fma; Python 3.11 has no math.fma):
    exact in rationals, then the nearest float of the type, ties to even; inf and nan as the
    unfused expression gives them (an overflow of the exact value to inf as well)."""
    t = type(a)
    if not all(map(np.isfinite, (a, b, c))):
        with np.errstate(all="ignore"):
            return t(a * b + c)
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    if exact == 0:  # the sign of a zero: as a * b + c rounds it (-0 only if both are -0)
        with np.errstate(all="ignore"):
            return t(a * b + c)
    try:
        with np.errstate(all="ignore"):
            near = t(float(exact))  # within one place of the nearest (f32 rounds twice)
    except OverflowError:  # past every f64: the infinity of its sign
        return t(np.inf if exact > 0 else -np.inf)
    top = np.finfo(t).max
    overflow = Fraction(float(top)) + (Fraction(float(top)) - Fraction(float(
        np.nextafter(top, t(0))))) / 2  # from here on, round to nearest gives infinity
    if abs(exact) >= overflow:
        return t(np.inf if exact > 0 else -np.inf)
    candidates = [v for v in (np.nextafter(near, t(-np.inf)), near,
                              np.nextafter(near, t(np.inf))) if np.isfinite(v)]
    return min(candidates, key=lambda v: (
        abs(Fraction(float(v)) - exact),
        int(np.asarray(v).view(f"uint{8 * np.dtype(t).itemsize}")) & 1))


def _float_op(fn: Callable[..., np.floating]) -> Callable:
    def run(self: InterpreterFunctions, interpreter: Interpreter, op: Operation, args: tuple):
        with np.errstate(all="ignore"):
            return (_float(fn(*(_np(a) for a in args)), op.results[0].type),)

    return run


def _signed(value: IntegerAttr) -> int:
    width = value.type.width.data if isinstance(value.type, IntegerType) else 64
    v = value.value.data
    return v - (1 << width) if v >= 1 << (width - 1) else v


def _unsigned(value: IntegerAttr) -> int:
    width = value.type.width.data if isinstance(value.type, IntegerType) else 64
    return value.value.data % (1 << width)


def _int_op(fn: Callable[..., int]) -> Callable:
    def run(self: InterpreterFunctions, interpreter: Interpreter, op: Operation, args: tuple):
        value = fn(*args)
        return (scalar_attr(value, op.results[0].type, interpreter.index_bitwidth),)

    return run


def _fp_to_int(signed: bool) -> Callable:
    def run(self: InterpreterFunctions, interpreter: Interpreter, op: Operation, args: tuple):
        x = args[0].value.data
        if not np.isfinite(x):
            raise ValueError(f"{op.name}: cannot convert {x} to an integer")
        value = int(np.trunc(x))
        return (scalar_attr(value, op.results[0].type, interpreter.index_bitwidth),)

    return run


_FLOAT_OPS: dict[type[Operation], Callable[..., np.floating]] = {
    arith.DivfOp: lambda a, b: a / b,
    arith.NegfOp: lambda a: -a,
    arith.MaxnumfOp: np.fmax,  # the non-NaN operand wins
    arith.MinnumfOp: np.fmin,
    arith.ExtFOp: lambda a: a,  # widened by _float at the result's width
    arith.TruncFOp: lambda a: a,  # rounded by _float at the result's width
    math.ExpOp: np.exp,
    math.LogOp: np.log,
    math.SqrtOp: np.sqrt,
    math.TanhOp: np.tanh,
    math.AbsFOp: np.abs,
    # libm's pow, as the tape op's semantics (an f32 result is rounded by _float)
    math.PowFOp: lambda a, b: libm.power(np.asarray(a), np.asarray(b))[()],  # (powf of f32)
    math.Exp2Op: np.exp2,
    math.ExpM1Op: np.expm1,
    math.Log2Op: np.log2,
    math.Log10Op: np.log10,
    math.Log1pOp: np.log1p,
    math.RsqrtOp: lambda a: 1 / np.sqrt(a),
    math.FloorOp: np.floor,
    math.CeilOp: np.ceil,
    math.TruncOp: np.trunc,
    math.RoundEvenOp: np.rint,
    math.SinOp: np.sin,
    math.CosOp: np.cos,
    math.FmaOp: lambda a, b, c: fused_multiply_add(a, b, c),
    math.ErfOp: lambda a: pymath.erf(float(a)),  # rounded by _float: tape.erf's semantics
    llvm.FRemOp: np.fmod,  # tape.fmod's loops (xDSL 0.75 has no arith.remf): exact
}

_INT_OPS: dict[type[Operation], Callable[..., int]] = {
    arith.MaxSIOp: lambda a, b: max(_signed(a), _signed(b)),
    arith.MinSIOp: lambda a, b: min(_signed(a), _signed(b)),
    arith.MaxUIOp: lambda a, b: max(_unsigned(a), _unsigned(b)),
    arith.MinUIOp: lambda a, b: min(_unsigned(a), _unsigned(b)),
    arith.DivUIOp: lambda a, b: _unsigned(a) // _unsigned(b),
    arith.RemUIOp: lambda a, b: _unsigned(a) % _unsigned(b),
    arith.ShRUIOp: lambda a, b: _unsigned(a) >> _unsigned(b),
    arith.ExtSIOp: _signed,
    arith.ExtUIOp: _unsigned,
    arith.TruncIOp: _signed,
}


def _int_to_fp(signed: bool) -> Callable:
    def run(self: InterpreterFunctions, interpreter: Interpreter, op: Operation, args: tuple):
        value = _signed(args[0]) if signed else _unsigned(args[0])
        return (_float(value, op.results[0].type),)

    return run


def _bitcast(self: InterpreterFunctions, interpreter: Interpreter, op: Operation, args: tuple):
    """Reinterpret the bits: a float as the integer of its width, or back."""
    (value,), t = args, op.results[0].type
    if isinstance(value, FloatAttr):
        bits = np.array(value.value.data, dtype=_NP_FLOAT[str(value.type)]).view(
            f"int{value.type.bitwidth}")
        return (IntegerAttr(int(bits), t, truncate_bits=True),)
    width = value.type.width.data
    raw = np.array(_signed(value), dtype=f"int{width}").view(_NP_FLOAT[str(t)])
    return (FloatAttr(float(raw), t),)


_table = {f"run_float_{op.__name__}": impl(op)(_float_op(fn)) for op, fn in _FLOAT_OPS.items()}
_table |= {f"run_int_{op.__name__}": impl(op)(_int_op(fn)) for op, fn in _INT_OPS.items()}
_table |= {
    "run_sitofp": impl(arith.SIToFPOp)(_int_to_fp(signed=True)),
    "run_uitofp": impl(arith.UIToFPOp)(_int_to_fp(signed=False)),
    "run_fptosi": impl(arith.FPToSIOp)(_fp_to_int(signed=True)),
    "run_fptoui": impl(arith.FPToUIOp)(_fp_to_int(signed=False)),
    "run_bitcast": impl(arith.BitcastOp)(_bitcast),
}

ScalarFunctions = register_impls(type("ScalarFunctions", (InterpreterFunctions,), _table))
ScalarFunctions.__doc__ = "arith/math ops missing from xDSL 0.75's interpreter (see module doc)."
