"""bits.py, the comparison every bitwise test uses: what it accepts, what it refuses, and what
its failure says."""

from __future__ import annotations

import numpy as np
import pytest
from bits import assert_same_bits, assert_within, ulp_distance

NAN, INF = np.nan, np.inf


def _negative_nan(dtype) -> np.ndarray:
    """A NaN with the sign bit set and another payload."""
    bits = np.array([0xFFC00001], np.uint32) if dtype == np.float32 else \
        np.array([0xFFF8000000000001], np.uint64)
    return bits.view(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_equal_bits_pass_and_any_nan_is_the_same_nan(dtype):
    x = np.array([1.5, -0.0, 0.0, INF, -INF, np.finfo(dtype).smallest_subnormal], dtype)
    assert_same_bits(x, x.copy())
    assert_same_bits(_negative_nan(dtype), np.array([NAN], dtype))
    assert_same_bits(np.array(NAN, dtype), np.array(-NAN, dtype))  # rank 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("actual", "expected"), [
    (-0.0, 0.0), (0.0, -0.0), (INF, -INF), (NAN, 1.0), (1.0, NAN), (INF, NAN),
    (1.0, 1.0000001), (np.finfo(np.float32).max, INF)])
def test_different_floats_fail(actual, expected, dtype):
    with pytest.raises(AssertionError, match="1 of 1 elements differ"):
        assert_same_bits(np.array([actual], dtype), np.array([expected], dtype))
    with pytest.raises(AssertionError):
        assert_same_bits(np.array([actual, 1.0], dtype), np.array([expected, 2.0], dtype))


def test_shapes_and_dtypes_must_match():
    with pytest.raises(AssertionError, match="dtype float64 != expected float32"):
        assert_same_bits(np.zeros(2), np.zeros(2, np.float32))
    with pytest.raises(AssertionError, match=r"shape \(2,\) != expected \(1, 2\)"):
        assert_same_bits(np.zeros(2), np.zeros((1, 2)))
    with pytest.raises(AssertionError, match="values"):
        assert_same_bits(np.array([True, False]), np.array([True, True]))


def test_the_message_shows_the_first_mismatches_in_hex_and_decimal():
    actual = np.zeros((3, 4), np.float32)
    expected = actual.copy()
    expected[1, 2], expected[2, 0] = -0.0, 1.0
    with pytest.raises(AssertionError) as failure:
        assert_same_bits(actual, expected, context="stage x")
    text = str(failure.value)
    assert text.startswith("stage x: 2 of 12 elements differ")
    assert "at (1, 2): actual 0x00000000 (0.0), expected 0x80000000 (-0.0)" in text
    assert "at (2, 0): actual 0x00000000 (0.0), expected 0x3f800000 (1.0)" in text
    many = np.arange(20, dtype=np.float64)
    with pytest.raises(AssertionError) as failure:
        assert_same_bits(many, many + 1)
    assert "20 of 20 elements differ" in str(failure.value)
    assert str(failure.value).count("  at ") == 8  # the first few only


def test_ulp_distance_is_counted_on_the_ordered_line_of_floats():
    f = np.float32
    tiny = np.finfo(f).smallest_subnormal
    one = np.array([1.0], f)
    assert ulp_distance(one, np.nextafter(one, f(2))).tolist() == [1]
    assert ulp_distance(np.array([-0.0], f), np.array([0.0], f)).tolist() == [1]
    assert ulp_distance(np.array([-tiny], f), np.array([tiny], f)).tolist() == [3]
    big = np.array([np.finfo(np.float64).max])
    assert int(ulp_distance(-big, big)[0]) == 2 * 0x7FEFFFFFFFFFFFFF + 1  # no overflow


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ulp_tolerance(dtype):
    x = np.array([1.0, -3.0, 0.0], dtype)
    near = np.nextafter(np.nextafter(x, INF), INF)  # two floats up
    assert_same_bits(near, x, ulp=2)
    with pytest.raises(AssertionError, match="within 1 ulp"):
        assert_same_bits(near, x, ulp=1)
    # NaN and infinities stay exact whatever the ulps
    with pytest.raises(AssertionError):
        assert_same_bits(np.array([np.finfo(dtype).max], dtype), np.array([INF], dtype), ulp=9)
    with pytest.raises(AssertionError):
        assert_same_bits(np.array([NAN], dtype), np.array([INF], dtype), ulp=9)
    with pytest.raises(AssertionError):
        assert_same_bits(np.array([0.0], dtype), np.array([NAN], dtype), ulp=9)
    assert_same_bits(np.array([NAN, -INF], dtype), np.array([NAN, -INF], dtype), ulp=1)


def test_within_a_bound():
    e = np.array([1.0, NAN, INF, 0.0, -0.0], np.float32)
    assert_within(np.array([1.0 + 1e-6, NAN, INF, -0.0, 0.0], np.float32), e, 1e-5)
    with pytest.raises(AssertionError, match="at \\(0,\\)"):
        assert_within(np.array([1.1, NAN, INF, 0.0, 0.0], np.float32), e, 1e-5)
    with pytest.raises(AssertionError, match="at \\(1,\\)"):
        assert_within(np.array([1.0, 0.0, INF, 0.0, 0.0], np.float32), e, 1e-5)
    with pytest.raises(AssertionError, match="at \\(2,\\)"):
        assert_within(np.array([1.0, NAN, -INF, 0.0, 0.0], np.float32), e, INF)
    with pytest.raises(AssertionError, match="at \\(3,\\)"):  # a per-element bound
        assert_within(np.array([1.0, NAN, INF, 0.5, 0.0], np.float32), e,
                      np.array([1.0, 0, 0, 0.1, 0]))
