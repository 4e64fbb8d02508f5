"""`stop_gradient`: the identity to every stage (the interpreter, tape-fuse, the CPU, StableHLO),
a constant to differentiation at every order; and the max that softmax, log_softmax and
logsumexp subtract, now behind it (as JAX's are): their gradients against the formulas written
out, ties in the max included, and no pass over the scores left for the max."""

from __future__ import annotations

import numpy as np
import pytest
from bits import assert_same_bits

import tapeml
from tapeml import ops
from tapeml.dialects import tape

EDGES = {
    np.float32: [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3.4028235e38, 1.5],
    np.float64: [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1.7976931348623157e308, -2.5],
    np.int32: [0, -1, 2**31 - 1, -(2**31), 7],
    np.int64: [0, -1, 2**63 - 1, -(2**63), 7],
    np.bool_: [True, False, True],
}


@pytest.mark.parametrize("dtype", list(EDGES), ids=lambda d: np.dtype(d).name)
def test_it_is_the_identity_bit_for_bit_interpreted_and_compiled(dtype):
    x = np.array(EDGES[dtype], dtype)
    assert ops.stop_gradient(x) is x  # eager: the array itself, as JAX's
    program = tapeml.trace(lambda a: ops.stop_gradient(a), x)
    assert [op.name for op in program.function.body.ops][:1] == ["tape.stop_gradient"]
    assert_same_bits(program(x), x)
    assert_same_bits(tapeml.jit(lambda a: ops.stop_gradient(a))(x), x)


def test_inside_an_elementwise_group_it_is_the_identity():
    """tape-fuse takes it into a group with its neighbours; the group computes the same bits
    as the interpreter, NaN and signed zeros included."""
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.5, -2.25], np.float32)

    def f(a):
        return ops.exp(ops.stop_gradient(a * 2.0) - a) * ops.stop_gradient(-a)

    program = tapeml.trace(f, x)
    fused = tapeml.jit(f)
    assert_same_bits(fused(x), program(x))
    fuse_stage = next(text for stage, text in fused.lower(x).items() if "fuse" in stage)
    assert "tape.stop_gradient" in fuse_stage.split("tape.fused", 1)[1]  # (in a group's body)


def test_no_cotangent_flows_through_it_at_first_and_second_order():
    """f(x) = sum(x^2 sg(x)): f' = 2 x sg(x) = 2 x^2 (not 3 x^2), and the gradient program
    keeps sg, so d/dx of sum(f') is 2 sg(x) = 2 x (not 6 x); g(x) = sum(sg(x)^3) has a zero
    gradient, not an error."""
    x = np.array([0.5, -1.25, 2.0], np.float64)

    def f(a):
        return ops.sum(a * a * ops.stop_gradient(a))

    np.testing.assert_allclose(tapeml.grad(f)(x), 2 * x * x, rtol=1e-15)
    second = tapeml.grad(lambda a: ops.sum(tapeml.grad(f)(a)))(x)
    np.testing.assert_allclose(second, 2 * x, rtol=1e-15)
    assert_same_bits(tapeml.grad(lambda a: ops.sum(ops.stop_gradient(a) ** 3))(x),
                     np.zeros(3))
    assert_same_bits(tapeml.jit(tapeml.grad(f))(x), tapeml.grad(f)(x))


def _rows_with_ties(rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((5, 7))
    x[0, [1, 4]] = x[0].max() + 1.0  # a tie for the max
    x[1, :] = 3.0  # every element the max
    x[2, 3] = 40.0  # one far above the rest
    return x


def test_softmax_and_log_softmax_gradients_are_the_formulas():
    """The vector-Jacobian products written out, in f64, ties in the max included:
    softmax's p * (g - sum(g p)), log_softmax's g - p sum(g), logsumexp's g p."""
    rng = np.random.default_rng(7)
    x = _rows_with_ties(rng)
    g = rng.standard_normal(x.shape)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    cases = {
        "softmax": (lambda a: ops.sum(ops.softmax(a) * g),
                    p * (g - (g * p).sum(-1, keepdims=True))),
        "log_softmax": (lambda a: ops.sum(ops.log_softmax(a) * g),
                        g - p * g.sum(-1, keepdims=True)),
        "logsumexp": (lambda a: ops.sum(ops.logsumexp(a, axis=-1) * g[:, 0]), g[:, :1] * p),
    }
    for name, (f, expected) in cases.items():
        for got in (tapeml.grad(f)(x), tapeml.jit(tapeml.grad(f))(x)):
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14, err_msg=name)


@pytest.mark.parametrize("fn", [lambda a: ops.log_softmax(a), lambda a: ops.softmax(a, axis=0),
                                lambda a: ops.logsumexp(a, axis=1, keepdims=True)],
                         ids=["log_softmax", "softmax_axis0", "logsumexp"])
def test_the_max_they_subtract_is_not_differentiated(fn):
    """Their gradient programs hold no pullback of the max (a comparison against it, the ties
    counted), only the forward's max behind a stop_gradient (softmax along the last axis is
    one op, without a max: tests/test_normalization.py)."""
    x = np.zeros((4, 8), np.float32)
    program = tapeml.trace(tapeml.grad(lambda a: ops.sum(fn(a) * a)), x)
    names = [op.name for op in program.function.body.ops]
    assert names.count("tape.max") == 1 and "tape.cmp" not in names, names
    assert isinstance(next(op for op in program.function.body.ops
                           if op.name == "tape.stop_gradient"), tape.StopGradientOp)


def test_stablehlo_has_no_op_for_it():
    """After differentiation it is the identity: the StableHLO of a log_softmax's gradient has
    its exponential and no stop_gradient (StableHLO has none)."""
    x = np.zeros((2, 3), np.float32)
    text = tapeml.trace(tapeml.grad(lambda a: ops.sum(ops.log_softmax(a) * a)), x).as_stablehlo()
    assert "stablehlo.exponential" in text and "stop_gradient" not in text


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_logsumexp_of_rows_whose_max_is_infinite_or_nan(dtype):
    """The shift is the max clipped to the finite range: a row of -inf sums to -inf (a softmax
    over a fully masked segment), a row holding inf to inf, one holding NaN to NaN (JAX's and
    scipy's results; the shift had made -inf - -inf and inf - inf, NaN), eager, compiled and
    interpreted; finite rows as the sum written out in f64."""
    big = np.finfo(dtype).max
    x = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [np.inf, np.inf], [-np.inf, np.inf],
                  [np.nan, 1.0], [-np.inf, 2.0], [big, big], [1.0, 2.0]], dtype)
    with np.errstate(all="ignore"):
        want = np.log(np.exp(x.astype(np.float64)).sum(axis=1))
    want[6] = np.log(2.0) + float(big)  # (exp overflows in f64 too where dtype is f64)
    want = want.astype(dtype)

    def lse(a):
        return ops.logsumexp(a, axis=1)

    for got in (lse(x), tapeml.jit(lse)(x), tapeml.jit(lse, backend="interp")(x)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=2e-7 if dtype == np.float32 else 1e-15)
