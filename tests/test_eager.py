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
