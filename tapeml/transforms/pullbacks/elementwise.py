"""The pullbacks of the elementwise tape ops: the arithmetic ops (maximum and minimum share the
cotangent in half on ties), abs, erf, fmod, select and cast. cmp, constant, sign, floor, ceil and
round have none (NON_DIFFERENTIABLE)."""

from __future__ import annotations

import numpy as np

from tapeml.dialects import tape
from tapeml.tracing import ops
from tapeml.tracing.trace import bind
from tapeml.transforms.pullbacks.registry import pullback


@pullback(tape.AddOp)
def _add(ct, a, b, *, result):
    return ct, ct


@pullback(tape.SubOp)
def _sub(ct, a, b, *, result):
    return ct, ops.negative(ct)


@pullback(tape.MulOp)
def _mul(ct, a, b, *, result):
    return ops.multiply(ct, b), ops.multiply(ct, a)


@pullback(tape.DivOp)
def _div(ct, a, b, *, result):
    ct_a = ops.divide(ct, b)
    return ct_a, ops.negative(ops.multiply(ct_a, result))


def _tie_share(a, b):
    """1 where a wins, 0 where b wins, 1/2 on ties."""
    half = np.asarray(0.5, a.dtype)
    return ops.where(ops.greater(a, b), np.asarray(1.0, a.dtype),
                     ops.where(ops.equal(a, b), half, np.asarray(0.0, a.dtype)))


@pullback(tape.MaximumOp)
def _maximum(ct, a, b, *, result):
    # each side's share on its own: a NaN (no side wins or ties) sends none to either, as a
    # max reduction's NaN (and JAX's)
    return ops.multiply(ct, _tie_share(a, b)), ops.multiply(ct, _tie_share(b, a))


@pullback(tape.MinimumOp)
def _minimum(ct, a, b, *, result):
    return ops.multiply(ct, _tie_share(b, a)), ops.multiply(ct, _tie_share(a, b))


@pullback(tape.PowOp)
def _pow(ct, a, b, *, result):
    # d/da a**b = b a**(b-1), 0 where b = 0 (a**0 is 1 for every a: b a**(b-1) was 0 * inf =
    # NaN at a = 0, so x**k of a Python int k had a NaN gradient at 0 where JAX's integer_pow
    # has k x**(k-1))
    slope = ops.multiply(b, ops.power(a, ops.subtract(b, 1.0)))
    zero = np.asarray(0.0, a.dtype)
    ct_a = ops.multiply(ct, ops.where(ops.equal(b, 0.0), zero, slope))
    # d/db a**b = log(a) a**b: 0 where a = 0 (0**b is constant for b > 0), NaN where a < 0
    # (no real derivative), as JAX's
    log_a = ops.where(ops.equal(a, 0.0), zero, ops.log(a))
    return ct_a, ops.multiply(ct, ops.multiply(result, log_a))


@pullback(tape.NegOp)
def _neg(ct, a, *, result):
    return (ops.negative(ct),)


@pullback(tape.ExpOp)
def _exp(ct, a, *, result):
    return (ops.multiply(ct, result),)


@pullback(tape.LogOp)
def _log(ct, a, *, result):
    return (ops.divide(ct, a),)


@pullback(tape.TanhOp)
def _tanh(ct, a, *, result):
    return (ops.multiply(ct, ops.subtract(1.0, ops.multiply(result, result))),)


@pullback(tape.SinOp)
def _sin(ct, a, *, result):
    return (ops.multiply(ct, ops.cos(a)),)


@pullback(tape.CosOp)
def _cos(ct, a, *, result):
    return (ops.negative(ops.multiply(ct, ops.sin(a))),)


@pullback(tape.SigmoidOp)
def _sigmoid(ct, a, *, result):
    return (ops.multiply(ct, ops.multiply(result, ops.subtract(1.0, result))),)


@pullback(tape.ReluOp)
def _relu(ct, a, *, result):
    # 0 at 0; read off the result (result > 0 exactly where a > 0, NaN and -0 included): the
    # backward pass keeps the layer's output, not its input, so a product's bias and relu
    # fold into the product as its epilogue (W3's second layer: one pass over C fewer)
    return (ops.where(ops.greater(result, 0.0), ct, np.asarray(0.0, ct.dtype)),)


@pullback(tape.SqrtOp)
def _sqrt(ct, a, *, result):
    return (ops.divide(ct, ops.multiply(result, 2.0)),)


def _floats(a) -> bool:
    return np.dtype(a.dtype).kind == "f"


@pullback(tape.AbsOp)
def _abs(ct, a, *, result):
    # ct * sign(a): 0 at 0 (PyTorch's choice; JAX's is 1 at +-0); integers carry none
    return (ops.multiply(ct, bind(tape.SignOp, a)) if _floats(a) else None,)


_TWO_OVER_SQRT_PI = float(2 / np.sqrt(np.pi))  # a Python float: weak, so f32 stays f32


@pullback(tape.ErfOp)
def _erf(ct, a, *, result):
    # d/dx erf(x) = 2/sqrt(pi) exp(-x^2)
    slope = ops.multiply(ops.exp(ops.negative(ops.multiply(a, a))), _TWO_OVER_SQRT_PI)
    return (ops.multiply(ct, slope),)


@pullback(tape.FmodOp)
def _fmod(ct, a, b, *, result):
    # fmod(a, b) = a - n*b, n = trunc(a / b) of the exact quotient: d/da = 1, d/db = -n (where
    # n is constant). n is read off the exact result, round((a - fmod(a, b)) / b), not the
    # rounded trunc(a / b): a / b may round up to an integer (1.988514052614398 /
    # 0.39770281052287965 is 5.0 where fmod's n is 4); a - fmod(a, b) = n*b is one rounding
    # from exact and /b another, so round() gives n exactly for |n| < 2^(p-2). b = +-inf gives
    # n = 0 for finite a; b = 0 or a = +-inf give NaN (fmod is NaN there).
    n = bind(tape.RoundOp, ops.divide(ops.subtract(a, result), b))
    return ct, ops.negative(ops.multiply(ct, n))


@pullback(tape.SelectOp)
def _select(ct, cond, on_true, on_false, *, result):
    zero = np.asarray(0.0, ct.dtype)
    return None, ops.where(cond, ct, zero), ops.where(cond, zero, ct)


@pullback(tape.CastOp)
def _cast(ct, a, *, result, dtype):
    return (ops.astype(ct, a.dtype),)
