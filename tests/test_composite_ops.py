"""The ops written over the primitives (issue 17): clip, squeeze, full/zeros/ones(_like), var,
std, einsum, and the numeric unary ops' API. numpy is the reference, eager and jitted; gradients
by central differences in f64."""

from __future__ import annotations

import string

import numpy as np
import pytest
from bits import assert_same_bits
from hypothesis import given, settings
from hypothesis import strategies as st

import tapeml


def _both(fn, *args):
    """fn on arrays (eager) and compiled, each checked by the caller."""
    return fn(*args), tapeml.jit(fn)(*args)


def _numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1e300, -3.7])


def test_clip_matches_numpy_on_edge_values():
    for lo, hi in ((-1.0, 1.0), (0.0, None), (None, 2.0)):
        want = np.clip(EDGES, lo, hi)
        for got in _both(lambda x, lo=lo, hi=hi: tapeml.clip(x, lo, hi), EDGES):
            assert_same_bits(got, want)
    ids = np.array([-5, 0, 7, 2**31 - 1], np.int32)
    for got in _both(lambda i: tapeml.clip(i, 0, 5), ids):
        assert_same_bits(got, np.clip(ids, 0, 5).astype(np.int32))
    with pytest.raises(ValueError, match="clip: give a_min, a_max or both"):
        tapeml.clip(EDGES)


def test_rounding_ops_follow_numpy():
    for fn, ref in ((tapeml.floor, np.floor), (tapeml.ceil, np.ceil), (tapeml.round, np.round),
                    (tapeml.abs, np.abs), (tapeml.sign, np.sign)):
        for got in _both(fn, EDGES):
            assert_same_bits(got, ref(EDGES))
    ids = np.array([-3, 0, 4], np.int64)
    for got in _both(tapeml.round, ids):  # integers are kept, as JAX and the array API do
        assert_same_bits(got, ids)
    with pytest.raises(NotImplementedError, match="decimals"):
        tapeml.round(EDGES, 2)


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.sampled_from([1, 2, 3]), min_size=0, max_size=4), data=st.data())
def test_squeeze_matches_numpy(shape, data):
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    ones = [a for a, d in enumerate(shape) if d == 1]
    axis = data.draw(st.none() | st.sampled_from(ones) if ones else st.none())
    for got in _both(lambda x: tapeml.squeeze(x, axis), x):
        assert_same_bits(got, np.squeeze(x, axis))
    if any(d != 1 for d in shape):
        bad = next(a for a, d in enumerate(shape) if d != 1)
        with pytest.raises(ValueError, match="does not have size 1"):
            tapeml.squeeze(x, bad)


def test_constants_like_an_array():
    x = np.ones((2, 3), np.float64)
    zeros, ones, full, ints = tapeml.jit(lambda x: (
        tapeml.zeros_like(x), tapeml.ones_like(x), tapeml.full_like(x, 0.1),
        tapeml.ones_like(x, np.int32)))(x)
    assert_same_bits(zeros, np.zeros((2, 3)))
    assert_same_bits(ones, np.ones((2, 3)))
    assert_same_bits(full, np.full((2, 3), 0.1))
    assert_same_bits(ints, np.ones((2, 3), np.int32))
    text = str(tapeml.trace(lambda x: tapeml.full_like(x, 0.1), x))
    assert "tape.constant dense<1.000000e-01> : tensor<f64>" in text  # one scalar, broadcast
    assert_same_bits(tapeml.full((2,), 3), np.full((2,), 3, np.int64))
    assert_same_bits(tapeml.zeros(3), np.zeros(3, np.float32))


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), ddof=st.sampled_from([0, 1]),
       data=st.data())
def test_var_and_std_match_numpy(shape, ddof, data):
    x = np.random.default_rng(len(shape)).normal(size=shape)
    axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1))
    if ddof >= (x.size if axis is None else shape[axis]):
        return
    for fn, ref in ((tapeml.var, np.var), (tapeml.std, np.std)):
        for got in _both(lambda x, fn=fn: fn(x, axis=axis, ddof=ddof), x):
            np.testing.assert_allclose(got, ref(x, axis=axis, ddof=ddof), rtol=1e-12)
    if (x.size if axis is None else shape[axis]) == 1:
        return  # a zero variance: std has no derivative there (NaN, as in JAX)
    g = tapeml.grad(lambda x: tapeml.sum(tapeml.std(x, axis=axis, ddof=ddof)))(x)
    np.testing.assert_allclose(g, _numeric_grad(
        lambda x: np.sum(np.std(x, axis=axis, ddof=ddof)), x), rtol=1e-5, atol=1e-7)


@st.composite
def _einsum_case(draw):
    """Two operands over a handful of letters: batch, contracted, kept and summed indices."""
    letters = draw(st.permutations(list(string.ascii_lowercase[:6])))
    a = "".join(letters[:draw(st.integers(0, 4))])
    b = "".join(draw(st.permutations(list(letters[2:7])))[:draw(st.integers(0, 4))])
    counts = {c: (a + b).count(c) for c in set(a + b)}
    explicit = draw(st.booleans())
    out = "".join(draw(st.permutations([c for c in counts if draw(st.booleans())]))) \
        if explicit else None
    sizes = {c: draw(st.integers(1, 3)) for c in counts}
    return a, b, out, sizes


@settings(max_examples=30, deadline=None)
@given(case=_einsum_case())
def test_einsum_matches_numpy(case):
    a_names, b_names, out, sizes = case
    rng = np.random.default_rng(0)
    a = rng.normal(size=[sizes[c] for c in a_names])
    b = rng.normal(size=[sizes[c] for c in b_names])
    subscripts = f"{a_names},{b_names}" + ("" if out is None else f"->{out}")
    want = np.einsum(subscripts, a, b)
    for got in _both(lambda a, b: tapeml.einsum(subscripts, a, b), a, b):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_einsum_attention_spellings_and_gradients():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(2, 3, 4, 5)), rng.normal(size=(2, 3, 6, 5))
    for subscripts in ("bhqd,bhkd->bhqk", "...qd,...kd->...qk", "bhqd,bhkd->bkhq"):
        np.testing.assert_allclose(tapeml.einsum(subscripts, q, k),
                                   np.einsum(subscripts, q, k), rtol=1e-12)
    w = rng.normal(size=(2, 3, 4, 6))
    g = tapeml.grad(lambda q: tapeml.sum(tapeml.einsum("bhqd,bhkd->bhqk", q, k) * w))(q)
    np.testing.assert_allclose(g, np.einsum("bhqk,bhkd->bhqd", w, k), rtol=1e-12)
    x = rng.normal(size=(3, 4))
    np.testing.assert_allclose(tapeml.einsum("ij->j", x), x.sum(0))
    np.testing.assert_allclose(tapeml.einsum("ij->ji", x), x.T)


def test_einsum_errors_name_the_problem():
    x = np.ones((3, 3))
    with pytest.raises(ValueError, match="a repeated index, a diagonal, is not supported"):
        tapeml.einsum("ii->i", x)
    with pytest.raises(tapeml.ShapeError, match="index 'j' is 3 in one operand and 4"):
        tapeml.einsum("ij,jk", x, np.ones((4, 2)))
    with pytest.raises(ValueError, match="names 2 operands, got 1"):
        tapeml.einsum("ij,jk", x)
    with pytest.raises(ValueError, match="must name input indices"):
        tapeml.einsum("ij->iz", x)


ARG_EDGES = np.array([[3.0, np.nan, 1.0, np.nan], [2.0, 5.0, 5.0, -np.inf],
                      [-0.0, 0.0, -1.0, -1.0]])


def test_argmax_argmin_match_numpy_with_ties_and_nans():
    for fn, ref in ((tapeml.argmax, np.argmax), (tapeml.argmin, np.argmin)):
        for axis in (None, 0, 1, -1):
            for keepdims in (False, True):
                want = ref(ARG_EDGES, axis=axis, keepdims=keepdims)
                for got in _both(lambda x, fn=fn, axis=axis, k=keepdims: fn(x, axis, k),
                                 ARG_EDGES):
                    assert_same_bits(got, want)
    ids = np.array([[2**31 - 1, -2**31, 2**31 - 1]], np.int32)
    assert_same_bits(tapeml.jit(lambda i: tapeml.argmax(i, 1))(ids), np.argmax(ids, 1))


def test_cumsum_matches_numpy_in_order():
    x = np.random.default_rng(4).normal(size=(3, 37)) * np.logspace(-8, 8, 37)
    for axis in (None, 0, 1):
        for got in _both(lambda x, axis=axis: tapeml.cumsum(x, axis), x):
            assert_same_bits(got, np.cumsum(x, axis))
    assert_same_bits(tapeml.cumsum(x, 1, reverse=True), np.cumsum(x[:, ::-1], 1)[:, ::-1])
    flags = np.array([True, False, True])
    assert_same_bits(tapeml.jit(tapeml.cumsum)(flags), np.cumsum(flags))
    g = tapeml.grad(lambda x: tapeml.sum(tapeml.cumsum(x, 1) * x))(x)
    np.testing.assert_allclose(g, np.cumsum((x)[:, ::-1], 1)[:, ::-1] + np.cumsum(x, 1),
                               rtol=1e-12, atol=1e-300)


def test_arange_one_hot_and_triangles_match_numpy():
    for args in ((5,), (2, 9, 3), (-3, 3), (1.0, 2.0, 0.25), (5, 0, -2)):
        want = np.arange(*args)
        want = want.astype(np.float32) if want.dtype.kind == "f" else want
        for got in (tapeml.arange(*args), tapeml.jit(lambda z, a=args: tapeml.arange(*a) + z)(
                np.zeros((), want.dtype))):
            assert_same_bits(got, want)
    labels = np.array([[0, 3], [-1, 2]])
    want = (labels[..., None] == np.arange(3)).astype(np.float32)
    for got in _both(lambda ids: tapeml.one_hot(ids, 3), labels):
        assert_same_bits(got, want)
    assert_same_bits(tapeml.one_hot(labels, 3, axis=0, dtype=np.int32),
                     np.moveaxis(want, -1, 0).astype(np.int32))
    x = np.random.default_rng(5).normal(size=(2, 3, 4))
    for k in (-1, 0, 2):
        for fn, ref in ((tapeml.tril, np.tril), (tapeml.triu, np.triu)):
            for got in _both(lambda x, fn=fn, k=k: fn(x, k), x):
                assert_same_bits(got, ref(x, k))
    assert "tape.iota" in str(tapeml.trace(lambda x: tapeml.tril(x), x))


FLOAT_EDGES = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 7.0, -7.0, 0.1, 1e-310, -1e-310, 3e38,
                        1e300, np.inf, -np.inf, np.nan, 5.0, -0.75])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_floor_divide_remainder_and_fmod_match_numpy_bit_for_bit(dtype):
    """numpy's npy_divmod, op for op: every pair of edge values (zero divisors, infinities,
    NaN, signed zeros, subnormals, huge ratios)."""
    with np.errstate(all="ignore"):
        values = FLOAT_EDGES.astype(dtype)
        a, b = (v.reshape(-1) for v in np.meshgrid(values, values))
        want = (np.floor_divide(a, b), np.remainder(a, b), np.fmod(a, b))

    def f(a, b):  # the operators on tracers; the functions eagerly on arrays
        return a // b, a % b, tapeml.fmod(a, b)

    eager = tapeml.floor_divide(a, b), tapeml.remainder(a, b), tapeml.fmod(a, b)
    for mode, got in (("eager", eager), ("cpu", tapeml.jit(f)(a, b))):
        for name, g, w in zip(("//", "%", "fmod"), got, want, strict=True):
            assert_same_bits(g, w, context=f"{mode} {name}")


def _layout_cases(x):
    return (tapeml.swapaxes(x, 0, -1), x.swapaxes(1, 2), tapeml.moveaxis(x, 0, -1),
            tapeml.moveaxis(x, [0, 1], [-1, 0]), tapeml.flip(x), tapeml.flip(x, (0, -1)),
            *tapeml.split(x, 2, axis=-1), *tapeml.split(x, [1, 5], axis=2),
            *tapeml.split(x, [2, 1], axis=1), tapeml.isnan(x), tapeml.isinf(x),
            tapeml.isfinite(x), tapeml.any(x > 1), tapeml.all(x > -5, axis=1),
            x.any(axis=(0, 2), keepdims=True), tapeml.all(x[:, :0], axis=1),
            tapeml.any(x[:, :0], axis=1, keepdims=True), x.all())


def _layout_reference(x):
    return (np.swapaxes(x, 0, -1), x.swapaxes(1, 2), np.moveaxis(x, 0, -1),
            np.moveaxis(x, [0, 1], [-1, 0]), np.flip(x), np.flip(x, (0, -1)),
            *np.split(x, 2, axis=-1), *np.split(x, [1, 5], axis=2), *np.split(x, [2, 1], axis=1),
            np.isnan(x), np.isinf(x), np.isfinite(x), np.any(x > 1), np.all(x > -5, axis=1),
            x.any(axis=(0, 2), keepdims=True), np.all(x[:, :0], axis=1),
            np.any(x[:, :0], axis=1, keepdims=True), x.all())


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_numpys_axis_functions_and_float_tests(dtype):
    """swapaxes, moveaxis, flip, split (sections and indices, unsorted ones too), isnan,
    isinf, isfinite, any and all (over no elements: False and True) as numpy's, eager and
    jitted, on floats with NaN and infinities, integers and booleans."""
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    x[0, 0, :3] = [np.nan, np.inf, -np.inf]
    x = x.astype(dtype) if dtype != np.int32 else np.arange(24, dtype=dtype).reshape(2, 3, 4) - 9
    with np.errstate(invalid="ignore"):
        expected = _layout_reference(x)
    for run in (_layout_cases, tapeml.jit(_layout_cases)):
        for got, want in zip(run(x), expected, strict=True):
            assert_same_bits(np.asarray(got), np.asarray(want))


def test_numpys_axis_functions_say_what_is_wrong():
    x = np.ones((2, 6), np.float32)
    with pytest.raises(ValueError, match=r"split: 4 parts do not divide axis 1 of 6 equally"):
        tapeml.split(x, 4, axis=1)
    with pytest.raises(ValueError, match="swapaxes: axis 2 is out of bounds for an array of 2"):
        tapeml.swapaxes(x, 0, 2)
    with pytest.raises(ValueError, match="moveaxis: repeated axis"):
        tapeml.moveaxis(x, [0, -2], [0, 1])
    with pytest.raises(TypeError, match=r"flip: an axis is an int, got 0.5"):
        tapeml.flip(x, 0.5)
    w = np.arange(12, dtype=np.float64).reshape(2, 6)
    g = tapeml.grad(lambda x: tapeml.sum(tapeml.flip(x, 1) * w) +
                    tapeml.sum(tapeml.split(x, 3, 1)[2]))(w)
    assert_same_bits(g, np.flip(w, 1) + np.pad(np.ones((2, 2)), ((0, 0), (4, 0))))
