"""The elementwise tape ops in StableHLO. Most are one op; where StableHLO leaves a case
undefined or rules otherwise, the rule writes tape's meaning out: integer division by zero and
INT_MIN // -1, shifts by the width or more, the saturating float-to-integer cast, relu and sign
of -0."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.stablehlo.registry import V, Writer, emits

ONE_OP = {
    tape.AddOp: "add", tape.SubOp: "subtract", tape.MulOp: "multiply", tape.DivOp: "divide",
    tape.MaximumOp: "maximum", tape.MinimumOp: "minimum", tape.PowOp: "power",
    tape.FmodOp: "remainder",  # StableHLO's remainder of floats is C's fmod
    tape.AndOp: "and", tape.OrOp: "or", tape.XorOp: "xor",
    tape.NegOp: "negate", tape.ExpOp: "exponential", tape.LogOp: "log", tape.TanhOp: "tanh",
    tape.SinOp: "sine", tape.CosOp: "cosine", tape.SigmoidOp: "logistic", tape.SqrtOp: "sqrt",
    tape.AbsOp: "abs", tape.NotOp: "not",
}
"""The ops that are one StableHLO op of the same name on every element type they take."""

FLOAT_ONLY = {tape.FloorOp: "floor", tape.CeilOp: "ceil", tape.RoundOp: "round_nearest_even"}
"""Ops that are one StableHLO op on floats and the identity on integers."""


def _one_op(name: str) -> Any:
    def rule(w: Writer, out: V, *xs: V) -> V:
        return w.unary(name, xs[0]) if len(xs) == 1 else w.binary(name, *xs)

    return rule


for _op, _name in ONE_OP.items():
    emits(_op)(_one_op(_name))


def _float_only(name: str) -> Any:
    def rule(w: Writer, out: V, x: V) -> V:
        return w.unary(name, x) if x.is_float else x

    return rule


for _op, _name in FLOAT_ONLY.items():
    emits(_op)(_float_only(_name))


@emits(tape.StopGradientOp)
def stop_gradient(w: Writer, out: V, x: V) -> V:
    return x  # (differentiation is done: StableHLO has no such op, nor needs one)


@emits(tape.ReluOp)
def relu(w: Writer, out: V, x: V) -> V:
    zero = w.like(0, x)
    top = w.binary("maximum", x, zero)
    return w.binary("add", top, zero) if x.is_float else top  # -0 -> +0


@emits(tape.SignOp)
def sign(w: Writer, out: V, x: V) -> V:
    s = w.unary("sign", x)
    return w.binary("add", s, w.like(0, x)) if x.is_float else s  # sign(-0) is +0, as numpy's


@emits(tape.ErfOp)
def erf(w: Writer, out: V, x: V) -> V:
    return w.chlo("erf", x)  # StableHLO's companion dialect: erf is not one of its ops


def _divisor(w: Writer, y: V) -> tuple[V, V, V]:
    """y == 0, y == -1, and y with both replaced by 1 (sdiv's undefined cases)."""
    zero, minus = w.compare("eq", y, w.like(0, y)), w.compare("eq", y, w.like(-1, y))
    safe = w.select(w.binary("or", zero, minus), w.like(1, y), y)
    return zero, minus, safe


def _floor_adjust(w: Writer, r: V, y: V) -> V:
    """Where the truncated remainder r is non-zero and its sign is not y's (i1)."""
    nonzero = w.compare("ne", r, w.like(0, r))
    signs = w.compare("ne", w.compare("lt", r, w.like(0, r)), w.compare("lt", y, w.like(0, y)))
    return w.binary("and", nonzero, signs)


@emits(tape.FloorDivOp)
def floordiv(w: Writer, out: V, x: V, y: V) -> V:
    zero, minus, safe = _divisor(w, y)
    q = w.binary("divide", x, safe)
    r = w.binary("remainder", x, safe)
    q = w.select(_floor_adjust(w, r, safe), w.binary("subtract", q, w.like(1, q)), q)
    q = w.select(minus, w.unary("negate", x), q)  # INT_MIN // -1 wraps to INT_MIN
    return w.select(zero, w.like(0, x), q)


@emits(tape.RemOp)
def rem(w: Writer, out: V, x: V, y: V) -> V:
    zero, minus, safe = _divisor(w, y)
    r = w.binary("remainder", x, safe)
    r = w.select(_floor_adjust(w, r, safe), w.binary("add", r, safe), r)
    return w.select(w.binary("or", zero, minus), w.like(0, x), r)


def _in_width(w: Writer, y: V) -> V:
    """0 <= y < the bit width (i1)."""
    bits = 8 * y.dtype.itemsize
    return w.binary("and", w.compare("ge", y, w.like(0, y)), w.compare("lt", y, w.like(bits, y)))


@emits(tape.ShlOp)
def shl(w: Writer, out: V, x: V, y: V) -> V:
    return w.select(_in_width(w, y), w.binary("shift_left", x, y), w.like(0, x))


@emits(tape.ShrOp)
def shr(w: Writer, out: V, x: V, y: V) -> V:
    fill = w.select(w.compare("lt", x, w.like(0, x)), w.like(-1, x), w.like(0, x))
    return w.select(_in_width(w, y), w.binary("shift_right_arithmetic", x, y), fill)


@emits(tape.CmpOp)
def cmp(w: Writer, out: V, a: V, b: V, *, predicate: str) -> V:
    return w.compare(predicate, a, b)  # FLOAT compares are IEEE's: NE is true of NaN


@emits(tape.SelectOp)
def select(w: Writer, out: V, cond: V, on_true: V, on_false: V) -> V:
    return w.select(cond, on_true, on_false)


@emits(tape.ConstantOp)
def constant(w: Writer, out: V, *, value: np.ndarray) -> V:
    value = np.asarray(value)
    if value.shape != out.shape:  # a rank-0 constant of a fused body, over the group's shape
        return w.broadcast(w.constant(value), out.shape)
    return w.constant(value)


@emits(tape.CastOp)
def cast(w: Writer, out: V, x: V, *, dtype: Any) -> V:
    target = np.dtype(dtype)
    if target == x.dtype:
        return x
    if target == np.bool_:
        return w.compare("ne", x, w.like(0, x))  # NaN is true
    if not (x.is_float and target.kind == "i"):
        return w.convert(x, target)  # rounds to nearest even, wraps, or extends
    # float -> integer: truncation toward zero, saturating, NaN to 0 (convert leaves those
    # undefined, so it only ever sees values in range)
    info = np.iinfo(target)
    high = x.dtype.type(info.max)  # rounds up past the range where the float is narrower
    below = np.nextafter(high, x.dtype.type(0)) if high > info.max else high
    nan = w.compare("ne", x, x)
    clean = w.select(nan, w.like(0, x), x)
    inside = w.clamp(w.scalar(info.min, x.dtype), clean, w.scalar(below, x.dtype))
    result = w.convert(inside, target)
    over = w.compare("ge", clean, w.like(high, x))
    return w.select(over, w.splat(info.max, x.shape, target), result)
