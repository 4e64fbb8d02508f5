"""The numpy semantics of the elementwise tape ops: the arithmetic ops (maximum and minimum as
IEEE 754-2019's), cmp, select, constant and cast."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.dialects.base import TapeOp
from tapeml.interpreters import libm
from tapeml.interpreters.tape.registry import raises_no_flag, semantics


def _elementwise(op: type[TapeOp], fn: Callable[..., Any]) -> None:
    semantics(op)(fn)  # as it is: evaluate makes a rank-0 result (a numpy scalar) an array


# maximum and minimum are IEEE 754-2019's: NaN if either side is NaN, and -0 < +0. numpy's own
# tie rule is the platform's (on x86, np.maximum(+0.0, -0.0) is -0.0), LLVM's llvm.maximum and
# StableHLO's maximum are IEEE's; every stage computes this one. Both raise no IEEE flag (they
# compare, and take the bits of a zero), so `ieee` calls them without numpy's error state.
def _no_zero(x: np.ndarray) -> bool:
    """No element is +0 or -0 (count_nonzero: no temporary, a fifth of `(x == 0).any()` on
    small arrays, what an eager maximum costs beyond numpy's)."""
    return np.count_nonzero(x) == x.size


def _zeros_fixed(a: np.ndarray, b: np.ndarray, found: np.ndarray, bits: np.ufunc) -> np.ndarray:
    """`found` where a or b is not a zero; where both are, the zero whose bits are `bits` of
    theirs (and: -0 only if both are, the maximum; or: -0 if either is, the minimum)."""
    if found.dtype.kind != "f" or _no_zero(found):
        return np.asarray(found)  # rank 0: numpy's ufuncs give a scalar
    unsigned = np.dtype(f"u{found.dtype.itemsize}")
    zero = bits(np.asarray(a).view(unsigned), np.asarray(b).view(unsigned)).view(found.dtype)
    return np.where((a == 0) & (b == 0), zero, found)


# the first test is the whole cost of most calls (an eager maximum: numpy's, one count_nonzero)
@raises_no_flag
def maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    top = np.maximum(a, b)
    if np.count_nonzero(top) == top.size and type(top) is np.ndarray:
        return top
    return _zeros_fixed(a, b, top, np.bitwise_and)


@raises_no_flag
def minimum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bottom = np.minimum(a, b)
    if np.count_nonzero(bottom) == bottom.size and type(bottom) is np.ndarray:
        return bottom
    return _zeros_fixed(a, b, bottom, np.bitwise_or)


def relu(x: np.ndarray) -> np.ndarray:
    """maximum(x, +0): adding +0 turns the -0 np.maximum may keep (of -0 or of a negative x
    beside +0) into +0, and changes nothing else (NaN stays NaN)."""
    if x.dtype.kind != "f":
        return np.maximum(x, 0)
    zero = np.zeros((), x.dtype)
    return np.maximum(x, zero) + zero


def _integers_kept(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """fn on floats; an integer array as it is (numpy 2.1 on keeps integers' dtype, 2.0 gave
    float64)."""
    return lambda x: x.copy() if x.dtype.kind in "iu" else fn(x)


def power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """C's pow and powf (libm's, tapeml/interpreters/libm.py: numpy's own f64 loop is SVML's
    on AVX-512 CPUs, and its f32 loop is not correctly rounded on every CPU: AVX512_SPR rounds
    3**0.5 up), what the compiled code calls."""
    return libm.power(x, y)


def erf(x: np.ndarray) -> np.ndarray:
    """Python's math.erf of each element (computed in f64), rounded to x's type."""
    flat = [math.erf(v) for v in x.astype(np.float64).reshape(-1).tolist()]
    return np.array(flat, np.float64).astype(x.dtype).reshape(x.shape)


for _op, _fn in {
    tape.AddOp: np.add,
    tape.SubOp: np.subtract,
    tape.MulOp: np.multiply,
    tape.DivOp: np.divide,
    tape.MaximumOp: maximum,
    tape.MinimumOp: minimum,
    tape.PowOp: lambda x, y: power(x, y),
    tape.NegOp: np.negative,
    tape.ExpOp: np.exp,
    tape.LogOp: np.log,
    tape.TanhOp: np.tanh,
    tape.SinOp: np.sin,
    tape.CosOp: np.cos,
    tape.SqrtOp: np.sqrt,
    tape.SigmoidOp: lambda x: 1 / (1 + np.exp(-x)),
    tape.ReluOp: relu,
    tape.AbsOp: np.absolute,  # abs(INT_MIN) wraps to INT_MIN
    tape.SignOp: np.sign,  # sign(-0.0) is +0.0, sign(NaN) that NaN
    tape.FloorOp: _integers_kept(np.floor),
    tape.CeilOp: _integers_kept(np.ceil),
    tape.RoundOp: _integers_kept(np.rint),  # halves to even, as np.round(x)
    tape.ErfOp: erf,
    tape.FmodOp: np.fmod,  # C's fmod: exact, the dividend's sign; x fmod 0 is NaN
    tape.FloorDivOp: np.floor_divide,  # x // 0 is 0, as numpy gives (the warning is ignored)
    tape.RemOp: np.remainder,
    tape.AndOp: np.bitwise_and,
    tape.OrOp: np.bitwise_or,
    tape.XorOp: np.bitwise_xor,
    tape.NotOp: np.invert,
    tape.StopGradientOp: lambda x: x,  # the identity: only differentiation tells it apart
    tape.ShlOp: np.left_shift,  # numpy's: a shift of the width or more, or negative, gives 0
    tape.ShrOp: np.right_shift,
}.items():
    _elementwise(_op, _fn)

COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
            "eq": np.equal, "ne": np.not_equal}


@semantics(tape.CmpOp)
def cmp(lhs: np.ndarray, rhs: np.ndarray, *, predicate: str) -> np.ndarray:
    return np.asarray(COMPARE[predicate](lhs, rhs))


@semantics(tape.SelectOp)
def select(cond: np.ndarray, on_true: np.ndarray, on_false: np.ndarray) -> np.ndarray:
    return np.where(cond, on_true, on_false)


@semantics(tape.ConstantOp)
def constant(*, value: np.ndarray) -> np.ndarray:
    return np.array(value)


@semantics(tape.CastOp)
def cast(x: np.ndarray, *, dtype: Any) -> np.ndarray:
    """numpy's astype, with one rule made the same on every platform: a float becomes an
    integer by truncation toward zero, saturating at the integer's range, NaN giving 0 (as
    LLVM's fptosi.sat, the GPU's cvt.rzi and XLA do; numpy on x86 gives the smallest integer
    for NaN and for every value out of range)."""
    target = np.dtype(dtype)
    if x.dtype.kind == "f" and target.kind == "i":
        info = np.iinfo(target)
        low, high = float(info.min), float(info.max)  # high rounds up past the range
        clipped = np.where(np.isnan(x), 0, x)
        with np.errstate(invalid="ignore"):
            return np.where(clipped >= high, info.max, np.where(
                clipped <= low, info.min, np.trunc(clipped).astype(target))).astype(target)
    return x.astype(target)
