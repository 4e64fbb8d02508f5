"""Eager elementwise ops (tapeml.add(x, y) on numpy arrays, outside a trace): the fast cases
(arrays of one dtype and shape, a float array and a Python float) compute what the traced
program computes on the interpreter, bit for bit, on edge values; every other case still
promotes; none warns, and the caller's numpy error state is left as it was."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from bits import assert_same_bits

import tapeml

EDGES = [0.0, -0.0, 1.0, -1.5, 0.1, 3.4e38, -3.4e38, 1e-45, 1e-40, np.inf, -np.inf, np.nan]
SCALARS = [0.1, -0.0, 2.0, 1e39, -1e39, 1e-46, 1.0000001192092896, np.inf, -np.inf, np.nan]
BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "fmod"]
UNARY = ["negative", "exp", "log", "tanh", "sqrt", "sigmoid", "relu", "abs", "sin"]


def _array(dtype):
    values = np.array(EDGES, dtype)
    return values, values[::-1].copy()


def _traced(fn, *args):
    """What the traced program computes on the interpreter (promotion through bind)."""
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    scalars = [a for a in args if not isinstance(a, np.ndarray)]

    def program(*traced):
        it, rest = iter(traced), iter(scalars)
        return fn(*(next(it) if isinstance(a, np.ndarray) else next(rest) for a in args))

    return tapeml.trace(program, *arrays)(*arrays)


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binary_fast_cases_match_the_traced_program(name, dtype):
    fn = getattr(tapeml, name)
    x, y = _array(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # IEEE: no numpy warnings, whatever the values
        got = fn(x, y)
        assert got.dtype == dtype
        assert_same_bits(got, _traced(fn, x, y))
        for s in SCALARS:  # a weak scalar takes the array's dtype, on either side
            for args in ((x, s), (s, x)):
                got = fn(*args)
                assert type(got) is np.ndarray and got.dtype == dtype
                assert_same_bits(got, _traced(fn, *args))


@pytest.mark.parametrize("name", UNARY)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_fast_case_matches_the_traced_program(name, dtype):
    fn = getattr(tapeml, name)
    x, _ = _array(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = fn(x)
        assert got.dtype == dtype
        assert_same_bits(got, _traced(fn, x))


def test_the_other_cases_still_promote():
    """What the fast cases leave to promotion: other dtypes or shapes, integers meeting a
    float, bools meeting add (logical or), a numpy scalar (strong)."""
    f32 = np.array([1.5, -2.0], np.float32)
    assert tapeml.add(f32, np.array([1.0, 2.0])).dtype == np.float64
    assert tapeml.add(f32, np.float32(1.0)[None]).shape == (2,)
    assert tapeml.add(np.array([1, 2], np.int32), 0.5).dtype == np.float32
    assert tapeml.add(np.array([True, False]), np.array([True, True])).tolist() == [True, True]
    assert tapeml.multiply(f32, np.float64(2.0)).dtype == np.float64
    assert tapeml.multiply(f32, 2).dtype == np.float32
    with pytest.raises(TypeError, match="subtract"):
        tapeml.subtract(np.array([True]), np.array([False]))


def test_the_callers_error_state_is_left_as_it_was():
    x = np.array([3.4e38, 0.0], np.float32)
    before = np.geterr()
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        tapeml.multiply(x, x)  # overflows, IEEE: inf, no error
        tapeml.divide(x, x)  # 0/0
        assert np.geterr() == {**before, "over": "raise", "invalid": "raise",
                               "divide": "raise"}
        with pytest.raises(FloatingPointError):
            np.multiply(x, x)  # numpy's own call still under the caller's state
    assert np.geterr() == before


def _grid(dtype):
    """EDGES in a (3, 4) grid, with a (3, 1) column and a (4,) row to broadcast against it."""
    values = np.array(EDGES, dtype).reshape(3, 4)
    return values, values[:, ::-1][:, :1].copy(), values[::-1][0].copy()


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "fmod"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ufuncs_broadcast_at_once_as_the_traced_program(name, dtype):
    fn = getattr(tapeml, name)
    grid, column, row = _grid(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for args in ((grid, column), (row, grid), (column, row)):
            assert_same_bits(fn(*args), _traced(fn, *args))
    with pytest.raises(tapeml.ShapeError, match=rf"{name}: operands with shapes \(3, 4\), \(3,\)"):
        fn(grid, row[:3])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_the_other_eager_shortcuts_compute_what_the_traced_program_does(dtype):
    """Comparisons, where, basic indexing, reshape, transpose, astype, sum, max, min, matmul
    and power by a float skip promotion on arrays that need none; each gives the traced
    program's bits (NaN, -0.0 and the extremes among the values)."""
    grid = (np.array(EDGES, dtype).reshape(3, 4) if np.dtype(dtype).kind == "f" else
            np.array([0, -1, 7, np.iinfo(dtype).min, np.iinfo(dtype).max, 3] * 2,
                     dtype).reshape(3, 4))
    other = grid[::-1].copy()
    cases = [
        (tapeml.greater, grid, other), (tapeml.equal, grid, other),
        (lambda c, a, b: tapeml.where(c, a, b), grid > other, grid, other),
        (lambda a: a[1], grid), (lambda a: a[-1, 1:3], grid), (lambda a: a[::-2, None], grid),
        (lambda a: tapeml.reshape(a, (4, -1)), grid), (tapeml.transpose, grid),
        (lambda a: tapeml.astype(a, np.float64), grid),
        (lambda a: tapeml.astype(a, np.int32), grid),
        (tapeml.sum, grid), (lambda a: tapeml.sum(a, axis=-1, keepdims=True), grid),
        (tapeml.max, grid), (lambda a: tapeml.max(a, axis=0), grid),
        (lambda a: tapeml.min(a, axis=1), grid),
    ]
    if np.dtype(dtype).kind == "f":
        cases += [(tapeml.matmul, grid, other.T.copy()), (lambda a: tapeml.power(a, 0.5), grid),
                  (lambda a: tapeml.power(a, 1e39), grid), (tapeml.relu, grid),
                  (lambda a: tapeml.maximum(a, -0.0), grid)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fn, *args in cases:
            got = fn(*args)
            assert type(got) is np.ndarray
            assert_same_bits(got, _traced(fn, *args))


def test_eager_shortcuts_leave_mistakes_to_the_checks():
    grid = np.zeros((3, 4), np.float32)
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        tapeml.getitem(grid, 3)
    with pytest.raises(tapeml.ShapeError, match="reshape"):
        tapeml.reshape(grid, (5, -1))
    with pytest.raises(tapeml.ShapeError, match="axis 2 is out of range"):
        tapeml.sum(grid, axis=2)
    for axis in (1.0, True, "a", [0.5]):  # numpy's rule: no bool or float is an axis
        with pytest.raises(TypeError, match="axis must be an int, a tuple of ints or None"):
            tapeml.sum(grid, axis=axis)
    with pytest.raises(tapeml.ShapeError, match="empty axis"):
        tapeml.max(np.zeros((0, 4), np.float32), axis=0)
    with pytest.raises(tapeml.ShapeError, match="contraction dims differ"):
        tapeml.matmul(grid, grid)
    with pytest.raises(tapeml.ShapeError, match="greater: operands with shapes"):
        tapeml.greater(grid, grid[:, :3])


def test_remembered_checks_tell_apart_what_equality_does_not():
    """An eager op's checks are remembered by its parameters: -0.0 and 0.0 (equal, one hash)
    are two entries, so the padding value keeps its sign; and a failed check is not
    remembered (the second bad call fails as the first)."""
    x = np.ones(2, np.float32)
    assert not np.signbit(tapeml.pad(x, 1, constant_values=0.0)[0])
    assert np.signbit(tapeml.pad(x, 1, constant_values=-0.0)[0])
    for _ in range(2):
        with pytest.raises(tapeml.ShapeError):
            tapeml.pad(x, -3)


def test_astype_refuses_a_dtype_tape_tensors_do_not_hold():
    """numpy's astype(uint8) wraps 300 to 44; tape has no uint8, so it says so rather than
    handing back int32 values unconverted."""
    with pytest.raises(TypeError, match="not uint8 .use int32"):
        tapeml.astype(np.array([300, -1]), np.uint8)
    with pytest.raises(TypeError, match="not float16"):
        tapeml.astype(np.ones(2, np.float32), np.float16)
    assert tapeml.astype(np.array([1.5], np.float32), np.int32).dtype == np.int32


INTS = np.array([0, 16777217, 123456789, 2147483647, -2147483648], np.int32)
WEAK_OPS = {  # an op of an int32 array (or a Python float alone) and a Python float
    "multiply": lambda i: tapeml.multiply(i, 0.1),
    "multiply_huge": lambda i: tapeml.multiply(i, 1e300),
    "remainder": lambda i: tapeml.remainder(i, 2.5),
    "fmod": lambda i: tapeml.fmod(i, 2.5),
    "equal": lambda i: tapeml.equal(i, 16777216.0),
    "less": lambda i: tapeml.less(i, 1e-300),
    "power": lambda i: tapeml.power(-0.0, i),
    "divide": lambda i: tapeml.divide(i, 3.0),
    "where": lambda i: tapeml.where(tapeml.less(i, 5), 0.1, 1e-30),
}


@pytest.mark.parametrize("name", WEAK_OPS)
def test_an_op_meeting_a_python_float_gives_the_jitted_bits_eagerly(name):
    """Eagerly as traced, an int32 array meeting a Python float is computed in f64 (its weak
    type) and leaves as f32: `ids == 16777216.0` was True eagerly (both in f32), False traced;
    `ids * 1e300` NaN for 0 (1e300 rounded to inf first)."""
    fn = WEAK_OPS[name]
    with np.errstate(all="ignore"):
        eager = fn(INTS)
    for backend in ("interp", "cpu"):
        assert_same_bits(eager, tapeml.jit(fn, backend=backend)(INTS))
    assert eager.dtype == (np.bool_ if name in ("equal", "less") else np.float32)


COMPOSITES = {  # ops over a weak (Python float) value: an f32 result, eagerly and traced
    "fmod": lambda s: tapeml.fmod(s, 1.0),
    "matmul": lambda s: tapeml.matmul(tapeml.stack([s, s]), tapeml.stack([s, 1.5])),
    "dot": lambda s: tapeml.dot(tapeml.stack([s, s]), tapeml.stack([s, 1.5])),
    "einsum": lambda s: tapeml.einsum("i,i->", tapeml.stack([s, s]), tapeml.stack([s, 1.5])),
    "softmax": lambda s: tapeml.softmax(tapeml.stack([s, 0.1])),
    "softmax_axis0": lambda s: tapeml.softmax(tapeml.stack([s, 0.1]), axis=0),
    "log_softmax": lambda s: tapeml.log_softmax(tapeml.stack([s, 0.1])),
    "logsumexp": lambda s: tapeml.logsumexp(tapeml.stack([s, 0.1])),
    "mean": lambda s: tapeml.mean(tapeml.stack([s, 0.1])),
    "var": lambda s: tapeml.var(tapeml.stack([s, 0.1])),
    "at_set": lambda s: tapeml.at(tapeml.stack([s, s]))[0].set(0.1),
    "at_add": lambda s: tapeml.at(tapeml.stack([s, s]))[0].add(0.1),
    "at_2d": lambda s: tapeml.at(tapeml.reshape(tapeml.stack([s, s]), (1, 2)))[0, 1].add(0.1),
}


@pytest.mark.parametrize("name", COMPOSITES)
def test_an_op_of_weak_values_leaves_as_float32(name):
    """Ops that dropped the weak mark (a float32 program met their result and became float64
    under jit): a weak value's result leaves as f32 eagerly and traced, with the same bits,
    and an f32 array meeting it stays f32."""
    fn = COMPOSITES[name]
    eager = fn(2.5)
    assert eager.dtype == np.float32
    assert_same_bits(eager, tapeml.jit(fn)(2.5))
    x = np.ones(2, np.float32)
    assert tapeml.jit(lambda x, s: x * fn(s))(x, 2.5).dtype == np.float32
