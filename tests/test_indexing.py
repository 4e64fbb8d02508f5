"""numpy indexing through tapeml (issue 17): x[index] with ints, slices of any step, `...`,
None, integer arrays and constant boolean masks; take, take_along_axis; JAX's x.at[...] updates.
The references are numpy's own indexing and plain loops (for the updates, and for the clamped
and dropped out-of-range entries, which numpy refuses)."""

from __future__ import annotations

import numpy as np
import pytest
from bits import assert_same_bits
from hypothesis import given, settings
from hypothesis import strategies as st

import tapeml


@st.composite
def _index(draw, shape, arrays_in_range=True):
    """A numpy index for an array of `shape`: one part per dim, a few of them None, maybe an
    ellipsis in place of trailing full slices."""
    parts = []
    for n in shape:
        kind = draw(st.sampled_from(["int", "slice", "array", "full"]))
        if kind == "int":
            parts.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            bound = st.none() | st.integers(-n - 2, n + 2)
            step = draw(st.none() | st.sampled_from([1, 2, 3, -1, -2]))
            parts.append(slice(draw(bound), draw(bound), step))
        elif kind == "array":
            lo, hi = (-n, n - 1) if arrays_in_range else (-2 * n - 1, 2 * n + 1)
            rank = draw(st.integers(0, 2))
            dims = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
            values = draw(st.lists(st.integers(lo, hi), min_size=int(np.prod(dims)),
                                   max_size=int(np.prod(dims))))
            parts.append(np.array(values, np.int64).reshape(dims))
        else:
            parts.append(slice(None))
        if draw(st.integers(0, 5)) == 0:
            parts.append(None)
    if parts and isinstance(parts[-1], slice) and parts[-1] == slice(None) and \
            draw(st.booleans()):
        parts[-1] = Ellipsis
    return tuple(parts)


def _broadcastable(index) -> bool:
    arrays = [np.shape(i) for i in index if isinstance(i, np.ndarray)]
    try:
        np.broadcast_shapes(*arrays)
        return True
    except ValueError:
        return False


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data())
def test_getitem_matches_numpy(shape, data):
    x = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) - 3.5
    index = data.draw(_index(shape))
    if not _broadcastable(index):
        with pytest.raises(IndexError, match="cannot be broadcast together"):
            tapeml.jit(lambda x: x[index])(x)
        return
    want = x[index]
    for got in (tapeml.trace(lambda x: x[index], x)(x), tapeml.jit(lambda x: x[index])(x)):
        assert got.shape == want.shape
        assert_same_bits(got, want)


def _clamped(index, shape):
    """The index with its arrays' entries wrapped from the end and clamped into range."""
    out, dim = [], 0
    for k, i in enumerate(index):
        if i is None:
            out.append(i)
            continue
        if i is Ellipsis:  # (by position: index.index(i) would compare arrays with ==)
            out.append(i)
            dim = len(shape) - sum(1 for j in index[k + 1:] if j is not None)
            continue
        if isinstance(i, np.ndarray):
            n = shape[dim]
            i = np.clip(np.where(i < 0, i + n, i), 0, n - 1)
        out.append(i)
        dim += 1
    return tuple(out)


@settings(max_examples=20, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data())
def test_index_arrays_out_of_range_are_clamped_as_jax_does(shape, data):
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    index = data.draw(_index(shape, arrays_in_range=False))
    if not _broadcastable(index):
        return
    want = x[_clamped(index, shape)]
    assert_same_bits(tapeml.jit(lambda x: x[index])(x), want)


def test_an_index_tracer_gathers_and_its_gradient_scatters_adds():
    table = np.random.default_rng(0).normal(size=(6, 3))
    ids = np.array([[0, 5], [5, -1], [2, 9]])  # 9 is clamped to 5
    rows = tapeml.jit(lambda t, i: t[i])(table, ids)
    assert_same_bits(rows, table[np.clip(np.where(ids < 0, ids + 6, ids), 0, 5)])
    grad = tapeml.jit(tapeml.grad(lambda t, i: tapeml.sum(t[i] * t[i])))(table, ids)
    expected = np.zeros_like(table)
    np.add.at(expected, np.clip(np.where(ids < 0, ids + 6, ids), 0, 5), 2 * rows)
    np.testing.assert_allclose(grad, expected, rtol=1e-14)


def test_take_and_take_along_axis_match_numpy():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 5, 2))
    idx = np.array([[4, 0], [-1, 2]])
    for axis in (None, 0, 1, -1):
        flat = x.reshape(-1) if axis is None else x
        n = flat.shape[axis or 0]
        want = np.take(flat, np.clip(np.where(idx < 0, idx + n, idx), 0, n - 1), axis=axis or 0)
        assert_same_bits(tapeml.jit(lambda x, axis=axis: tapeml.take(x, idx, axis=axis))(x),
                         want)
    labels = np.array([[1], [4], [0]])
    for shape_x, axis in (((3, 5), 1), ((3, 5, 2), 1)):
        y = rng.normal(size=shape_x)
        i = labels if y.ndim == 2 else labels[..., None]
        assert_same_bits(tapeml.jit(lambda y, i, axis=axis: tapeml.take_along_axis(
            y, i, axis))(y, i), np.take_along_axis(y, i, axis))
    # indices broadcast against x off the axis, x of size 1 broadcast against them
    y = rng.normal(size=(1, 5))
    i = np.array([[0, 4], [3, 3], [1, 2]])
    assert_same_bits(tapeml.take_along_axis(y, i, 1), np.take_along_axis(y, i, 1))


def _landing(shape, index):
    """Where in x each element of x[index] is, -1 where an index array's entry is out of range:
    numpy indexing a copy of x's positions padded with -1 along the dims arrays index."""
    margin = 2 * max(shape) + 2
    arrays = [isinstance(i, np.ndarray) for i in index if i is not None]
    arrays += [False] * (len(shape) - len(arrays))
    padded = np.pad(np.arange(int(np.prod(shape))).reshape(shape),
                    [(margin, margin) if a else (0, 0) for a in arrays], constant_values=-1)
    moved, dim = [], 0
    for i in index:
        if isinstance(i, np.ndarray):
            i = np.where(i < 0, i + shape[dim], i) + margin
        moved.append(i)
        dim += i is not None
    return padded[tuple(moved)]


def _update_reference(x, index, kind, values):
    """A plain loop over the updates in order: out-of-range ones dropped, set's last one
    winning, max and min numpy's (NaN-propagating) maximum and minimum."""
    out = x.copy().reshape(-1)
    landing = _landing(x.shape, index)
    for p, v in zip(np.ravel(landing), np.ravel(np.broadcast_to(values, landing.shape)),
                    strict=True):
        if p >= 0:
            out[p] = {"set": v, "add": out[p] + v, "max": np.maximum(out[p], v),
                      "min": np.minimum(out[p], v)}[kind]
    return out.reshape(x.shape)


@pytest.mark.parametrize("kind", ["set", "add", "max", "min"])
@pytest.mark.parametrize("index", [
    (slice(None), np.array([0, 2, -1, 5, 0, -9])),  # one array: one scatter along axis 1
    (np.array([[1, 1], [0, 3]]),),
    (1,),
    (slice(0, 2), 3),
    (np.array([0, 0, 2]), slice(None, None, -1)),
    (slice(None), np.array([1, 1, 7]), None),
])
def test_at_updates_match_a_plain_loop(kind, index):
    x = np.arange(12, dtype=np.float64).reshape(3, 4) - 5
    probe = x[tuple(np.clip(i, -3, 2) if isinstance(i, np.ndarray) else i for i in index)]
    values = np.random.default_rng(2).normal(size=np.shape(probe)) * 10
    want = _update_reference(x, index, kind, values)
    got = tapeml.jit(lambda x, v: getattr(x.at[index], kind)(v))(x, values)
    assert_same_bits(got, want)
    assert_same_bits(getattr(tapeml.at(x)[index], kind)(values), want)


def test_at_set_gradient_zeros_the_written_places():
    x = np.random.default_rng(3).normal(size=(3, 4))
    g = tapeml.grad(lambda x: tapeml.sum(x.at[1].set(0.0) * x))(x)
    want = 2 * x
    want[1] = 0.0
    np.testing.assert_allclose(g, want)


def test_indexing_errors_say_what_is_wrong():
    x = np.ones((3, 4))
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        tapeml.jit(lambda x: x[3])(x)
    with pytest.raises(IndexError, match="boolean mask tracer"):
        tapeml.jit(lambda x: x[x > 0])(x)
    with pytest.raises(IndexError, match="an index array must hold integers, got float64"):
        tapeml.jit(lambda x: x[np.array([0.5])])(x)
    with pytest.raises(IndexError, match="too many indices"):
        tapeml.jit(lambda x: x[0, 0, 0])(x)
    with pytest.raises(ValueError, match="take_along_axis: indices must be an integer array"):
        tapeml.take_along_axis(x, np.array([0]), 1)
