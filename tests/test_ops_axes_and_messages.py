"""The ops API's axes and its messages: an axis out of range is refused as numpy refuses it
(AxisError; jax.nn.one_hot's ValueError), eagerly and traced alike, and a user's mistake is an
error naming the op called, the shapes or axis given and the user's line, not a bare Python
error from inside tapeml nor another op's name. Also: full of a traced value, eager creation
ops give writable arrays, clip keeps x's sign of zero within the bounds (its gradient as it
was), and a boolean's unary `+` is refused as `-` is. numpy is the reference."""

from __future__ import annotations

import re

import numpy as np
import pytest
from bits import assert_same_bits

import tapeml

X = np.arange(6, dtype=np.float32).reshape(2, 3)
IDX = np.array([[1, 0, 2], [2, 2, 0]], np.int64)
HERE = "test_ops_axes_and_messages.py"


def _modes(fn):
    """fn eagerly on arrays and traced (the CPU jit), each to be checked alike."""
    return [fn, tapeml.jit(fn)]


def _refused(error: type[BaseException], fn, *args, match: str) -> None:
    """fn(*args) raises `error` eagerly and traced, its message matching `match` from its
    start (the line quoted after it holds `match` too) and naming this file's line (the
    user's)."""
    for run in _modes(fn):
        with pytest.raises(error, match=f"^(?:{match})") as caught:
            run(*args)
        assert HERE in str(caught.value), str(caught.value)


# (tapeml, numpy) pairs whose axis numpy refuses with an AxisError
AXIS_OUT_OF_RANGE = [
    (lambda x: tapeml.expand_dims(x, 3), lambda x: np.expand_dims(x, 3),
     r"expand_dims: axis 3 is out of bounds for an array of 3 dims \(.*shape \(2, 3\)"),
    (lambda x: tapeml.expand_dims(x, 7), lambda x: np.expand_dims(x, 7), "expand_dims: axis 7"),
    (lambda x: tapeml.expand_dims(x, -4), lambda x: np.expand_dims(x, -4),
     "expand_dims: axis -4"),
    (lambda x: tapeml.expand_dims(x, (0, 4)), lambda x: np.expand_dims(x, (0, 4)),
     "expand_dims: axis 4 is out of bounds for an array of 4 dims"),
    (lambda x: tapeml.stack([x, x], axis=-4), lambda x: np.stack([x, x], axis=-4),
     r"stack: axis -4 is out of bounds for an array of 3 dims \(.*\(2, 3\), \(2, 3\)\)"),
    (lambda x: tapeml.stack([x, x], axis=3), lambda x: np.stack([x, x], axis=3),
     "stack: axis 3"),
    (lambda x: tapeml.take_along_axis(x, IDX, axis=-3),
     lambda x: np.take_along_axis(x, IDX, axis=-3),
     r"take_along_axis: axis -3 is out of bounds .*shape \(2, 3\)"),
    (lambda x: tapeml.take_along_axis(x, IDX, axis=2),
     lambda x: np.take_along_axis(x, IDX, axis=2), "take_along_axis: axis 2"),
    (lambda x: tapeml.concatenate([x, x], axis=-3), lambda x: np.concatenate([x, x], axis=-3),
     r"concatenate: axis -3 is out of bounds for an array of 2 dims \(shapes \(2, 3\), "),
    (lambda x: tapeml.take(x, np.array([0]), axis=-3), lambda x: np.take(x, [0], axis=-3),
     r"take: axis -3 is out of bounds .*shape \(2, 3\)"),
    (lambda x: tapeml.mean(x, axis=2), lambda x: np.mean(x, axis=2),
     re.escape("mean: axis 2 is out of range for tensor<2x3xf32>")),
    (lambda x: tapeml.var(x, axis=2), lambda x: np.var(x, axis=2), "var: axis 2 is out of"),
    (lambda x: tapeml.std(x, axis=(0, 2)), lambda x: np.std(x, axis=(0, 2)),
     "std: axis 2 is out of"),
    (lambda x: tapeml.min(x, axis=5), lambda x: np.min(x, axis=5), "min: axis 5 is out of"),
    (lambda x: tapeml.any(x, axis=2), lambda x: np.any(x, axis=2),
     re.escape("any: axis 2 is out of range for tensor<2x3xi1>")),
    (lambda x: tapeml.all(x, axis=-3), lambda x: np.all(x, axis=-3), "all: axis -3"),
    (lambda x: tapeml.argmin(x, axis=2), lambda x: np.argmin(x, axis=2), "argmin: axis 2"),
    (lambda x: tapeml.cumsum(x, axis=-3), lambda x: np.cumsum(x, axis=-3), "cumsum: axis -3"),
]


@pytest.mark.parametrize(("ours", "numpys", "message"), AXIS_OUT_OF_RANGE)
def test_an_axis_out_of_range_is_refused_as_numpy_does(ours, numpys, message):
    with pytest.raises(np.exceptions.AxisError):
        numpys(X)
    _refused(ValueError, ours, X, match=message)


def test_axes_that_name_a_composite_name_it():
    """The reductions that softmax, log_softmax, logsumexp and x.mean take say which op the
    user called; so does a min over an empty axis (numpy: a ValueError, no identity)."""
    with pytest.raises(np.exceptions.AxisError):
        np.mean(X, axis=-3)
    for fn, name in [(lambda x: tapeml.softmax(x, axis=2), "softmax"),
                     (lambda x: tapeml.log_softmax(x, axis=2), "log_softmax"),
                     (lambda x: tapeml.logsumexp(x, axis=-3), "logsumexp")]:
        _refused(ValueError, fn, X, match=f"^{name}: axis -?[23] is out of range for "
                 r"tensor<2x3xf32>")
    with pytest.raises(tapeml.ShapeError, match=r"^mean: axis -3 is out of range") as caught:
        tapeml.jit(lambda x: x.mean(axis=-3))(X)  # the tracer's method
    assert HERE in str(caught.value)
    with pytest.raises(ValueError):
        np.min(X[:0], axis=0)
    _refused(ValueError, lambda x: tapeml.min(x[:0], axis=0), X,
             match=re.escape("min: cannot take the min over an empty axis of tensor<0x3xf32>"))
    _refused(ValueError, lambda x: tapeml.sum(x, axis=(1, -1)), X,
             match=re.escape("sum: axes (1, -1) repeat an axis"))


def test_one_hot_refuses_an_axis_out_of_range():
    """jax.nn.one_hot's axis is one of the result's (labels.ndim + 1) dims, else a ValueError;
    within range it is numpy's eye rows moved to that axis."""
    ids = np.array([[0, 3, 1], [2, -1, 4]], np.int32)
    rows = np.eye(4, dtype=np.float32)[np.clip(ids, 0, 3)] * ((ids >= 0) & (ids < 4))[..., None]
    for axis in (-3, -2, -1, 0, 1, 2):
        for run in _modes(lambda i, axis=axis: tapeml.one_hot(i, 4, axis=axis)):
            assert_same_bits(run(ids), np.moveaxis(rows, -1, axis))
    for axis in (3, 5, -4):
        _refused(ValueError, lambda i, axis=axis: tapeml.one_hot(i, 4, axis=axis), ids,
                 match=rf"one_hot: axis {axis} is out of bounds for an array of 3 dims "
                 r"\(.*labels of shape \(2, 3\)")


def test_valid_axes_still_match_numpy():
    """Tuples for expand_dims (numpy's), negative axes counted from the result's end."""
    cases = [(lambda x: tapeml.expand_dims(x, (0, 1)), lambda x: np.expand_dims(x, (0, 1))),
             (lambda x: tapeml.expand_dims(x, (0, -1)), lambda x: np.expand_dims(x, (0, -1))),
             (lambda x: tapeml.expand_dims(x, [3, 1]), lambda x: np.expand_dims(x, [3, 1])),
             (lambda x: tapeml.expand_dims(x, -3), lambda x: np.expand_dims(x, -3)),
             (lambda x: tapeml.stack([x, 2 * x], axis=-3), lambda x: np.stack([x, 2 * x], -3)),
             (lambda x: tapeml.stack([x, 2 * x], axis=2), lambda x: np.stack([x, 2 * x], 2)),
             (lambda x: tapeml.take_along_axis(x, IDX % 2, axis=-2),
              lambda x: np.take_along_axis(x, IDX % 2, axis=-2)),
             (lambda x: tapeml.take(x, np.array([2, 0]), axis=-1),
              lambda x: np.take(x, [2, 0], axis=-1)),
             (lambda x: tapeml.concatenate([x, x], axis=-2),
              lambda x: np.concatenate([x, x], axis=-2)),
             (lambda x: tapeml.mean(x, axis=(-1, 0)), lambda x: np.mean(x, axis=(-1, 0)))]
    for ours, numpys in cases:
        for run in _modes(ours):
            assert_same_bits(np.asarray(run(X)), numpys(X))
    with pytest.raises(ValueError, match="repeated axis"):
        np.expand_dims(X, (0, 0))
    _refused(ValueError, lambda x: tapeml.expand_dims(x, (0, 0)), X,
             match=r"expand_dims: repeated axis in \(0, 0\)")


def test_mistakes_that_were_bare_python_errors_name_the_op():
    with pytest.raises(TypeError):
        np.argmax(X, axis=(0, 1))
    _refused(TypeError, lambda x: tapeml.argmax(x, axis=(0, 1)), X,
             match=r"argmax: axis must be an int or None, got \(0, 1\)")
    _refused(TypeError, lambda x: tapeml.cumsum(x, axis=(0,)), X, match="cumsum: axis must be")
    with pytest.raises(ValueError, match="must have the same shape"):
        np.stack([X, X.T])
    _refused(ValueError, lambda x: tapeml.stack([x, x.T]), X,
             match=re.escape("stack: the arrays must have one shape, got shapes (2, 3), (3, 2)"))
    # a Python int too big for the array it meets is an OverflowError (the README's weak rule,
    # JAX's and numpy's maximum's; numpy's clip saturates such a bound since 2.1)
    ids = np.array([1, -5, 7], np.int32)
    with pytest.raises(OverflowError):
        np.maximum(ids, -2**40)
    _refused(OverflowError, lambda i: tapeml.clip(i, -2**40, 2**40), ids,
             match=r"^clip: the Python integer -1099511627776 does not fit in int32")


def test_full_takes_a_traced_fill_value():
    """jnp.full's traced (0-d) fill value, broadcast; full_like's too."""
    for dtype in (None, np.int32, np.float64):
        got = tapeml.jit(lambda x, dtype=dtype: tapeml.full((2, 3), x[1, 2], dtype))(X)
        assert_same_bits(got, np.full((2, 3), X[1, 2], dtype))
    got = tapeml.jit(lambda x: tapeml.full((2, 3), x[0]))(X)  # a fill that broadcasts
    assert_same_bits(got, np.full((2, 3), X[0]))
    got = tapeml.jit(lambda x: tapeml.full_like(x, x[0, 1] * 2, np.int64))(X)
    assert_same_bits(got, np.full_like(X, X[0, 1] * 2, np.int64))
    g = tapeml.grad(lambda x: tapeml.sum(tapeml.full((4,), x[0, 1]) * X[1, :1]))(X)
    assert_same_bits(g, np.where(np.arange(6).reshape(2, 3) == 1, 4 * X[1, 0], 0))


def test_eager_creation_gives_writable_arrays():
    """numpy's zeros, ones, full and their _like forms: new, writable, contiguous arrays."""
    cases = [(tapeml.zeros((3,)), np.zeros(3, np.float32)),
             (tapeml.ones((2, 2)), np.ones((2, 2), np.float32)),
             (tapeml.full((2, 2), 5), np.full((2, 2), 5)),
             (tapeml.full((2, 3), np.array([1.0, 2.0, 3.0])), np.full((2, 3), [1.0, 2.0, 3.0])),
             (tapeml.zeros_like(X), np.zeros_like(X)), (tapeml.ones_like(X), np.ones_like(X)),
             (tapeml.full_like(X, 2.5), np.full_like(X, 2.5))]
    for got, want in cases:
        assert got.flags.writeable and got.flags.c_contiguous, got.strides
        got[(0,) * got.ndim] = 7
        got += 1
        want[(0,) * want.ndim] = 7
        want += 1
        assert_same_bits(got, want)
    a, b = tapeml.zeros((2,)), tapeml.zeros((2,))
    a[0] = 1.0
    assert b[0] == 0.0  # not one shared buffer


CLIP_EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -3.7])
CLIP_BOUNDS = [-np.inf, -1.0, -0.0, 0.0, 0.5, 1.0, np.inf, np.nan]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_clip_keeps_x_within_the_bounds(dtype):
    """numpy's clip (scalar bounds) keeps x where it lies within them, its sign of zero too,
    where maximum and minimum would give the bound on a tie; NaN stays NaN, a NaN bound gives
    NaN, a_min > a_max gives a_max: eagerly, on the interpreter and on the CPU."""
    x = CLIP_EDGES.astype(dtype)
    runs = [tapeml.clip, tapeml.jit(tapeml.clip), tapeml.jit(tapeml.clip, backend="interp")]
    weak = tapeml.jit(tapeml.clip)  # Python float bounds: weak arguments
    for lo in CLIP_BOUNDS:
        for hi in CLIP_BOUNDS:
            with np.errstate(invalid="ignore"):
                want = np.clip(x, dtype(lo), dtype(hi))
            for run in runs:
                assert_same_bits(run(x, dtype(lo), dtype(hi)), want, context=f"{lo}, {hi}")
            assert_same_bits(weak(x, lo, hi), want, context=f"Python floats {lo}, {hi}")
            assert_same_bits(tapeml.clip(x, lo, hi), want, context=f"Python floats {lo}, {hi}")
    for lo, hi in [(0.0, 1.0), (-1.0, -0.0), (0.0, -0.0), (-1.0, 1.0), (np.nan, 1.0)]:
        want = np.clip(x, dtype(lo), dtype(hi))  # bounds that are constants of the program
        got = tapeml.jit(lambda x, lo=lo, hi=hi: tapeml.clip(x, lo, hi))(x)
        assert_same_bits(got, want, context=f"constants {lo}, {hi}")


def test_clip_gradient_is_that_of_minimum_of_maximum():
    """clip's gradient, with respect to x and to traced bounds, is minimum(maximum(x, lo),
    hi)'s bit for bit (ties share it in half), at the bounds and between them."""
    x = CLIP_EDGES
    w = np.arange(1.0, x.size + 1)

    def loss(clip):
        return lambda x, lo, hi: tapeml.sum(clip(x, lo, hi) * w)

    def reference(x, lo, hi):
        return tapeml.minimum(tapeml.maximum(x, lo), hi)

    ours = tapeml.jit(tapeml.grad(loss(tapeml.clip), argnums=(0, 1, 2)))
    want = tapeml.jit(tapeml.grad(loss(reference), argnums=(0, 1, 2)))
    for lo, hi in [(-1.0, 1.0), (0.0, 1.0), (-0.0, 1.0), (-1.0, 0.0), (-1.0, -0.0), (0.0, 0.0),
                   (0.0, -0.0), (1.0, -1.0), (0.5, 0.5), (-np.inf, np.inf)]:
        lo, hi = np.float64(lo), np.float64(hi)
        for g, r in zip(ours(x, lo, hi), want(x, lo, hi), strict=True):
            assert_same_bits(g, r, context=f"{lo}, {hi}")
    g = tapeml.grad(lambda x: tapeml.sum(tapeml.clip(x, 0.0, 1.0) * w))(x)
    assert_same_bits(g, w * np.array([0, 0, 0, 0.5, 0.5, 1, 0, 0.5, 0, 0, 0]))


def test_a_booleans_unary_plus_is_refused_as_its_minus():
    b = np.array([True, False])
    with pytest.raises(TypeError):
        np.positive(b)
    for op, name in ((lambda b: -b, "negative"), (lambda b: +b, "positive")):
        with pytest.raises(TypeError, match=f"^{name}: not defined on bool operands") as caught:
            tapeml.jit(op)(b)
        assert HERE in str(caught.value)
    with pytest.raises(TypeError, match="^positive: not defined on bool operands"):
        tapeml.positive(b)
    i = np.array([-3, 0, 4], np.int32)
    for run in _modes(lambda v: +v):
        assert_same_bits(run(i), i)
    assert_same_bits(tapeml.positive(X), np.positive(X))
    # bool ** 2 is numpy's np.square(b) shortcut (int8); a boolean meeting a Python int is
    # int* (the README's lattice), leaving as int64: as b + 1, b * 2 and b ** 3 in numpy
    for got in (tapeml.power(b, 2), tapeml.jit(lambda b: b ** 2)(b)):
        assert_same_bits(got, (b ** 3).astype(np.int64))


def test_an_op_handed_to_a_transform_is_named_in_its_errors():
    """called_op named the outermost tapeml frame: `trace: axis must be...` for
    trace(tapeml.softmax, x, 3), `eval_shape:` likewise, `max:` under jit."""
    x = np.ones((2, 3), np.float32)
    with pytest.raises(tapeml.ShapeError, match="softmax: axis 3 is out of range"):
        tapeml.jit(tapeml.softmax, static_argnums=1)(x, 3)
    with pytest.raises(TypeError, match="^logsumexp: axis must be"):
        tapeml.eval_shape(tapeml.logsumexp, x, 5)
    with pytest.raises(TypeError, match="^Spec: a shape is an int"):
        tapeml.Spec((2.5,))
