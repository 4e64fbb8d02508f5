"""tape.layer_norm, tape.softmax and their backward ops: the interpreter against numpy written
out plainly (in f64), the CPU against the interpreter (every row's sums in f64 partials,
numpy's pairwise: within a few ulps), edge rows (NaN, infinities, a constant row, eps 0, rows
of one), what nn.layer_norm and ops.softmax record and their gradient programs hold, shape
errors, and the batch rule. (Gradients against finite differences to second order:
test_autodiff's layer_norm and softmax cases; on the emulated GPU: test_cuda's; through IREE:
test_stablehlo's GPT step.)"""

from __future__ import annotations

import numpy as np
import pytest
from bits import assert_same_bits

import tapeml
from tapeml import nn, ops
from tapeml.codegen.gemm.target import compiled_for_threads
from tapeml.dialects import tape
from tapeml.interpreters.tape import evaluate
from tapeml.tracing.trace import bind


def _reference(x: np.ndarray, g: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """y and dx written out plainly in f64: the textbook formulas."""
    x, g = x.astype(np.float64), g.astype(np.float64)
    centered = x - x.mean(-1, keepdims=True)
    r = 1 / np.sqrt((centered ** 2).mean(-1, keepdims=True) + eps)
    y = centered * r
    return y, r * (g - g.mean(-1, keepdims=True) - y * (g * y).mean(-1, keepdims=True))


def _forward(x, eps):
    return bind(tape.LayerNormOp, x, eps=eps)


def _backward(x, g, eps):
    return bind(tape.LayerNormBackwardOp, x, g, eps=eps)


SHAPES = [(5,), (3, 1), (4, 7), (2, 3, 16), (2, 3, 40), (64, 128)]
"""A row alone; rows of one; shorter than two lanes' worth; lanes exactly; lanes and a tail;
the GPT step's rows."""


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_interpreter_and_the_cpu_against_numpy_written_out(shape, dtype):
    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    eps = 1e-5
    want_y, want_dx = _reference(x, g, eps)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    for threads in (1, 2):
        with compiled_for_threads(threads):
            y = tapeml.jit(_forward, static_argnums=(1,))(x, eps)
            dx = tapeml.jit(_backward, static_argnums=(2,))(x, g, eps)
        assert y.dtype == dtype and dx.dtype == dtype
        np.testing.assert_allclose(y, evaluate(tape.LayerNormOp, x, eps=eps), rtol=rtol,
                                   atol=rtol)
        np.testing.assert_allclose(dx, evaluate(tape.LayerNormBackwardOp, x, g, eps=eps),
                                   rtol=rtol, atol=rtol)
    np.testing.assert_allclose(evaluate(tape.LayerNormOp, x, eps=eps), want_y, rtol=rtol,
                               atol=rtol)
    np.testing.assert_allclose(evaluate(tape.LayerNormBackwardOp, x, g, eps=eps), want_dx,
                               rtol=rtol * 10, atol=rtol * 10)


def _edge_rows(dtype) -> np.ndarray:
    big = np.finfo(dtype).max
    return np.array([
        [1.0, np.nan, 2.0, 3.0],  # NaN: the whole row
        [np.inf, 1.0, 2.0, 3.0],  # inf - inf in the mean's row
        [-np.inf, -np.inf, 0.0, 0.0],
        [2.5, 2.5, 2.5, 2.5],  # a constant row: var 0, y 0
        [-0.0, 0.0, -0.0, 0.0],
        [big, -big, big, -big],  # the square overflows: r is 0
        [1e-30, -1e-30, 3e-30, 0.0],
    ], dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("eps", [1e-5, 0.0])
def test_edge_rows_compile_to_the_interpreters_nans_and_values(dtype, eps):
    """Every NaN where the interpreter has one, and the values elsewhere (a row whose sums
    are exact, bit for bit); eps 0 on a constant row is 0 * inf = NaN in both."""
    x = _edge_rows(dtype)
    g = np.arange(x.size, dtype=dtype).reshape(x.shape) - 3
    for op, args in [(_forward, (x,)), (_backward, (x, g))]:
        got = tapeml.jit(op, static_argnums=(len(args),))(*args, eps)
        want = op(*args, eps)  # eager: the interpreter's semantics
        assert_same_bits(np.isnan(got), np.isnan(want))
        exact = [3, 4]  # the constant rows: every sum exact
        assert_same_bits(got[exact], want[exact])
        finite = ~np.isnan(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=1e-30)


def test_nn_layer_norm_is_one_op_each_way():
    """The traced norm is a tape.layer_norm, then the scale and the bias; its gradient
    program's backward holds one tape.layer_norm_backward and no reduction of the norm's own
    (the scale's and bias's gradients sum over the rows: two tape.sum)."""
    params = nn.layer_norm_init(8)
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)

    def loss(p, x):
        return ops.sum(ops.tanh(nn.layer_norm(p, x)))

    forward = [op.name for op in tapeml.trace(loss, params, x).function.body.ops]
    assert forward.count("tape.layer_norm") == 1 and "tape.sqrt" not in forward
    names = [op.name for op in tapeml.trace(tapeml.grad(loss, argnums=(0, 1)), params,
                                             x).function.body.ops]
    assert names.count("tape.layer_norm_backward") == 1 and "tape.sqrt" not in names
    assert names.count("tape.sum") == 3, names  # the loss's, the scale's and the bias's
    y = nn.layer_norm(params, x)  # eager, on numpy arrays
    np.testing.assert_allclose(y, _reference(x, x, 1e-5)[0], rtol=1e-5, atol=1e-6)
    assert nn.layer_norm(params, np.ones((2, 8), np.int32)).dtype == np.float64  # promoted


def test_shape_errors_name_the_op():
    with pytest.raises(tapeml.ShapeError, match="tape.layer_norm: normalizes over the last"):
        tapeml.trace(lambda x: _forward(x, 1e-5), np.float32(1.0))
    with pytest.raises(tapeml.ShapeError, match="tape.layer_norm: eps must be finite"):
        tapeml.trace(lambda x: _forward(x, -1.0), np.ones(3, np.float32))
    with pytest.raises(tapeml.ShapeError, match="tape.layer_norm_backward: the input and its"):
        tapeml.trace(lambda x, g: _backward(x, g, 1e-5), np.ones((2, 3), np.float32),
                     np.ones((2, 3), np.float64))
    with pytest.raises(tapeml.ShapeError, match="tape.layer_norm"):
        tapeml.trace(lambda x: _forward(x, 1e-5), np.ones(3, np.int32))


def test_rows_are_examples_apart_unless_the_row_is_the_batch():
    from tapeml.transforms.per_example import PER_EXAMPLE, Mixes

    program = tapeml.trace(lambda x: _forward(x, 1e-5), np.ones((4, 6), np.float32))
    op = next(iter(program.function.body.ops))
    assert PER_EXAMPLE[tape.LayerNormOp](op, [True], 4) is True
    program = tapeml.trace(lambda x: _forward(x, 1e-5), np.ones(6, np.float32))
    op = next(iter(program.function.body.ops))
    with pytest.raises(Mixes):
        PER_EXAMPLE[tape.LayerNormOp](op, [True], 6)


# ----------------------------------------------------------------------------------------------
# softmax


def _softmax_reference(x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x, g = x.astype(np.float64), g.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    return p, p * (g - (g * p).sum(-1, keepdims=True))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_softmax_against_numpy_written_out_and_the_interpreter(shape, dtype):
    rng = np.random.default_rng(len(shape) * 10 + shape[-1])
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    want_p, want_dx = _softmax_reference(x, g)
    p_interpreted = evaluate(tape.SoftmaxOp, x)
    dx_interpreted = evaluate(tape.SoftmaxBackwardOp, p_interpreted, g)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(p_interpreted, want_p, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(dx_interpreted, want_dx, rtol=rtol * 10, atol=rtol * 10)
    for threads in (1, 2):
        with compiled_for_threads(threads):
            p = tapeml.jit(lambda a: bind(tape.SoftmaxOp, a))(x)
            dx = tapeml.jit(lambda a, b: bind(tape.SoftmaxBackwardOp, a, b))(p_interpreted, g)
        np.testing.assert_allclose(p, p_interpreted, rtol=rtol, atol=rtol)
        np.testing.assert_allclose(dx, dx_interpreted, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_edge_rows_compile_to_the_interpreters_nans_and_values(dtype):
    """NaN anywhere, +inf anywhere (inf - inf) and a row of -inf only are NaN rows in both;
    -inf elsewhere is a 0; signed zeros (the compiled max may keep either zero: the same p)
    and a row of one element (1.0) bit for bit."""
    x = np.array([
        [1.0, np.nan, 2.0, 3.0],
        [np.inf, 1.0, 2.0, 3.0],
        [-np.inf, -np.inf, -np.inf, -np.inf],
        [-np.inf, 0.0, -np.inf, 1.0],
        [-0.0, 0.0, -0.0, 0.0],
        [1e30 if dtype == np.float32 else 1e300, 0.0, -5.0, 2.0],
        [np.nan, np.nan, np.nan, np.nan],
        [-0.0, -0.0, -1.0, np.nan],
        [-0.0, -3.0, -0.0, -1.0],  # the max a zero of one sign only
    ], dtype)
    got = tapeml.jit(lambda a: ops.softmax(a))(x)
    want = ops.softmax(x)  # eager: the interpreter's semantics
    assert_same_bits(np.isnan(got), np.isnan(want))
    assert np.isnan(want[[0, 1, 2]]).all() and want[3, 0] == 0.0 and want[3, 2] == 0.0
    assert_same_bits(got[[4, 5]], want[[4, 5]])  # sums of zeros and ones: exact
    assert np.isnan(want[[6, 7]]).all()
    finite = ~np.isnan(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6)
    one = np.array([[2.5], [-np.inf], [np.nan]], dtype)
    assert_same_bits(tapeml.jit(lambda a: ops.softmax(a))(one), ops.softmax(one))
    assert_same_bits(ops.softmax(one), np.array([[1.0], [np.nan], [np.nan]], dtype))


def test_softmax_is_one_op_each_way_along_the_last_axis_only():
    """ops.softmax along the last axis is a tape.softmax and its gradient one
    tape.softmax_backward (from p: no max, no exp in the backward); along another axis, the
    ops written out, the same numbers."""
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)

    def names(f):
        return [op.name for op in tapeml.trace(f, x).function.body.ops]

    def loss(a):
        return ops.sum(ops.softmax(a) * a)

    assert names(lambda a: ops.softmax(a, axis=1)) == ["tape.softmax", "func.return"]
    backward = names(tapeml.grad(loss))
    assert backward.count("tape.softmax_backward") == 1 and backward.count("tape.exp") == 0
    assert "tape.softmax" not in names(lambda a: ops.softmax(a, axis=0))
    np.testing.assert_allclose(ops.softmax(x, axis=0), ops.softmax(x.T).T, rtol=1e-6)
    with pytest.raises(tapeml.ShapeError, match="tape.softmax_backward: the probabilities"):
        tapeml.trace(lambda p, g: bind(tape.SoftmaxBackwardOp, p, g), x, x.astype(np.float64))
