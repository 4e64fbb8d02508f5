"""Edge shapes the ops API took wrongly: a constant boolean mask of another shape than the dims
it indexes is refused (it picked other elements), gradients with respect to an empty pytree
are that pytree (not a crash), numpy's axis=None concatenate and int shape of broadcast_to,
softmax, log_softmax and logsumexp over an empty axis as JAX's; and user mistakes that were
numpy's internal errors name the op, the shapes given and the user's line. numpy and JAX are
the references."""

from __future__ import annotations

import re

import numpy as np
import pytest
from bits import assert_same_bits

import tapeml

X = np.arange(6, dtype=np.float32).reshape(2, 3)
HERE = "test_edge_shape_fixes.py"


def _modes(fn):
    """fn eagerly on arrays and traced (the CPU jit), each to be checked alike."""
    return [fn, tapeml.jit(fn)]


def _refused(error: type[BaseException], fn, *args, match: str) -> None:
    """fn(*args) raises `error` eagerly and traced, its message matching `match` from its
    start and naming this file's line (the user's)."""
    for run in _modes(fn):
        with pytest.raises(error, match=f"^(?:{match})") as caught:
            run(*args)
        assert HERE in str(caught.value), str(caught.value)


# (index, the axis numpy names, that axis's size, the mask's size along it)
WRONG_MASKS = [
    (np.array([True, False, True]), 0, 2, 3),
    (np.array([True]), 0, 2, 1),
    (np.array([False, False, False, True]), 0, 2, 4),  # its one True lies within x
    (np.ones((3, 2), bool), 0, 2, 3),
    ((slice(None), np.array([True, True])), 1, 3, 2),
    ((..., np.array([True, True])), 1, 3, 2),
    ((None, np.array([True, False, True])), 0, 2, 3),
]


@pytest.mark.parametrize(("index", "axis", "size", "length"), WRONG_MASKS)
def test_a_mask_of_another_shape_is_refused(index, axis, size, length):
    """numpy's x[m] and JAX's x.at[m] raise an IndexError; tapeml's getitem and at did not,
    taking the mask's positions alone (all of x for a mask too long, a row of it for one too
    short)."""
    with pytest.raises(IndexError, match="boolean index did not match"):
        X[index]
    said = re.escape(f"boolean index did not match indexed array along axis {axis}; size of "
                     f"axis is {size} but size of corresponding boolean axis is {length}")
    _refused(IndexError, lambda x: tapeml.getitem(x, index), X, match=f"getitem: {said}")
    _refused(IndexError, lambda x: tapeml.at(x)[index].set(-1.0), X, match=f"at\\[...\\]: {said}")


def test_masks_of_the_right_shape_still_index_as_numpy():
    for index in [np.array([True, False]), np.array([[True, False, True], [False, True, True]]),
                  (slice(None), np.array([False, True, True])), (..., np.array([True] * 3)),
                  (np.array([False, True]), slice(1, None)), (np.ones((2, 3), bool), None),
                  [True, False]]:
        for run in _modes(lambda x, index=index: tapeml.getitem(x, index)):
            assert_same_bits(np.asarray(run(X)), X[index])
        want = X.copy()
        want[index] = -1.0
        for run in _modes(lambda x, index=index: tapeml.at(x)[index].set(-1.0)):
            assert_same_bits(np.asarray(run(X)), want)


def _loss(params, x):
    return tapeml.sum(x * 2.0)


@pytest.mark.parametrize("params", [{}, (), [], None, {"w": {}}, ({}, ())])
def test_the_gradient_of_an_empty_pytree_is_that_pytree(params):
    """A model with no parameters, an empty optimizer state: JAX's grad gives the empty
    structure back; tapeml's crashed building its result."""
    want = params  # (JAX's grad gives the empty structure back, as it is)
    assert tapeml.grad(_loss)(params, X) == want
    value, grads = tapeml.jit(tapeml.value_and_grad(_loss))(params, X)
    assert grads == want
    assert_same_bits(np.asarray(value), np.float32(30.0))
    (grads, aux) = tapeml.grad(lambda p, x: (_loss(p, x), 7), has_aux=True)(params, X)
    assert (grads, aux) == (want, 7)
    empty, gx = tapeml.grad(_loss, argnums=(0, 1))(params, X)
    assert empty == want
    assert_same_bits(gx, np.full_like(X, 2.0))


def test_concatenate_with_no_axis_flattens_as_numpy():
    v = np.arange(4, dtype=np.float32)
    for run in _modes(lambda x, v: tapeml.concatenate([x, v, x.T], axis=None)):
        assert_same_bits(np.asarray(run(X, v)), np.concatenate([X, v, X.T], axis=None))
    for run in _modes(lambda x: tapeml.concatenate([x[0, 0], x], axis=None)):  # a 0-d one
        assert_same_bits(np.asarray(run(X)), np.concatenate([X[0, 0], X], axis=None))


def test_nothing_to_join_is_refused_as_numpy_does():
    for numpys in (np.concatenate, np.stack):
        with pytest.raises(ValueError, match="need at least one array"):
            numpys([])
    _refused(ValueError, lambda x: tapeml.concatenate([]), X,
             match="concatenate: needs at least one array")
    _refused(ValueError, lambda x: tapeml.stack([]), X, match="stack: needs at least one array")


def test_broadcast_to_takes_an_int_shape():
    for run in _modes(lambda x: tapeml.broadcast_to(x[0, :1], 3)):
        assert_same_bits(np.asarray(run(X)), np.broadcast_to(X[0, :1], 3))
    for run in _modes(lambda x: tapeml.broadcast_to(x[0, 1], np.int64(2))):
        assert_same_bits(np.asarray(run(X)), np.broadcast_to(X[0, 1], np.int64(2)))


# (tapeml's creation op, numpy's, a shape numpy refuses, its error, tapeml's message)
BAD_SHAPES = [
    (tapeml.zeros, np.zeros, (-1, 2), ValueError,
     r"zeros: negative dimensions are not allowed, got shape \(-1, 2\)"),
    (tapeml.ones, np.ones, -3, ValueError, "ones: negative dimensions are not allowed"),
    (lambda s: tapeml.full(s, 2.0), lambda s: np.full(s, 2.0), (2, -2), ValueError,
     "full: negative dimensions"),
    (tapeml.zeros, np.zeros, (2.5, 3), TypeError,
     r"zeros: a shape is an int or a sequence of ints, got \(2\.5, 3\)"),
    (tapeml.ones, np.ones, (True, 2), TypeError, "ones: a shape is an int or a sequence"),
    (tapeml.zeros, np.zeros, 2.0, TypeError, "zeros: a shape is an int"),
]


@pytest.mark.parametrize(("ours", "numpys", "shape", "error", "message"), BAD_SHAPES)
def test_a_shape_numpy_refuses_is_refused_naming_the_op(ours, numpys, shape, error, message):
    """A negative dim was numpy's internal broadcast error; a float or bool dim became a dim
    silently (int(2.5) is 2, True is 1)."""
    with pytest.raises(error):
        numpys(shape)
    _refused(error, lambda x: x + ours(shape), X, match=message)


def test_pad_widths_that_do_not_fit_name_pad_and_the_shapes():
    widths = ((0, 0), (1, 1), (1, 1))  # 3 pairs for 2 dims
    with pytest.raises(ValueError):
        np.pad(X, widths)
    _refused(ValueError, lambda x: tapeml.pad(x, widths), X, match=re.escape(
        "pad: pad widths ((0, 0), (1, 1), (1, 1)) do not fit x of shape (2, 3)"))
    _refused(ValueError, lambda x: tapeml.pad(x, ((1, 2, 3),)), X, match="pad: pad widths")
    for run in _modes(lambda x: tapeml.pad(x, ((1,), (2,)))):  # what numpy broadcasts still
        assert_same_bits(np.asarray(run(X)), np.pad(X, ((1,), (2,))))


def test_a_slice_step_of_zero_names_the_op_and_the_users_line():
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        X[::0]
    _refused(ValueError, lambda x: tapeml.getitem(x, (slice(None), slice(None, None, 0))), X,
             match=re.escape("getitem: slice step cannot be zero (indexing x of shape (2, 3) "
                             "with slice(None, None, 0))"))
    _refused(ValueError, lambda x: tapeml.at(x)[::0].set(1.0), X,
             match=r"at\[...\]: slice step cannot be zero")


EMPTY = [(np.zeros((3, 0), np.float32), -1), (np.zeros((3, 0), np.float32), 1),
         (np.zeros((0, 3), np.float32), 0), (np.zeros((2, 0, 2), np.float32), (0, 1)),
         (np.zeros((3, 0), np.float32), None)]


@pytest.mark.parametrize(("x", "axis"), EMPTY)
def test_logsumexp_over_an_empty_axis_is_minus_infinity(x, axis):
    """log(sum of no exps) = log(0), as jax.nn.logsumexp and scipy's; it raised a ShapeError
    (no max to shift by). The reference written out in numpy (jax is not a test dependency)."""
    with np.errstate(divide="ignore"):
        want = np.log(np.sum(np.exp(x), axis=axis))
        kept = np.log(np.sum(np.exp(x), axis=axis, keepdims=True))
    for run in _modes(lambda x, axis=axis: tapeml.logsumexp(x, axis=axis)):
        assert_same_bits(np.asarray(run(x)), want)
    for run in _modes(lambda x, axis=axis: tapeml.logsumexp(x, axis=axis, keepdims=True)):
        assert_same_bits(np.asarray(run(x)), kept)


@pytest.mark.parametrize(("x", "axis"), [e for e in EMPTY if isinstance(e[1], int)])
def test_softmax_over_an_empty_axis_is_empty(x, axis):
    """jax.nn.softmax and log_softmax of an empty axis: an empty array of x's shape; the
    gradient of a logsumexp over it: x's (empty) zeros."""
    for ours in (tapeml.softmax, tapeml.log_softmax):
        for run in _modes(lambda x, ours=ours: ours(x, axis=axis)):
            assert_same_bits(np.asarray(run(x)), np.zeros_like(x))
    g = tapeml.grad(lambda x: tapeml.sum(tapeml.logsumexp(x, axis=axis)))(x)
    assert_same_bits(g, np.zeros_like(x))


@pytest.mark.parametrize("equation, a_shape, b_shape", [
    ("bij,bjk->bik", (2, 3, 4), (1, 4, 5)), ("ij,j->i", (3, 1), (5,)),
    ("bhqd,bhkd->bhqk", (2, 1, 3, 4), (1, 4, 5, 4))])
def test_einsum_broadcasts_an_index_of_size_one_as_numpy(equation, a_shape, b_shape):
    """numpy's einsum broadcasts an index of size 1 in one operand (a ShapeError here)."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    want = np.einsum(equation, a, b)
    for got in (tapeml.einsum(equation, a, b),
                tapeml.jit(lambda a, b: tapeml.einsum(equation, a, b))(a, b)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(tapeml.ShapeError, match="einsum: index 'b' is 2 in one operand and 3"):
        tapeml.einsum("bij,bjk->bik", np.ones((2, 3, 4)), np.ones((3, 4, 5)))
