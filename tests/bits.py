"""Comparing float arrays bit for bit, or within a stated distance, for every test that means it.

`np.testing.assert_array_equal` treats -0.0 and +0.0 as equal, so it cannot see a signed-zero
bug. `assert_same_bits` can: with `ulp=0` it asks for equal bits, except that any NaN equals any
NaN (numpy defines no NaN payloads, nor the sign of a NaN it makes); with `ulp > 0` it measures
the distance on the line of floats in order (-0.0 and +0.0 one ulp apart), NaN and infinities
still exact. `assert_within` is for results whose summation order differs: NaN and infinities
exact, finite values within an absolute bound per element.

A failure names the first few mismatching indices with both values in hex and decimal.
"""

from __future__ import annotations

from typing import Any

import numpy as np

SHOWN = 8
"""How many mismatching elements a failure message lists."""

_UINT = {np.dtype(np.float16): np.uint16, np.dtype(np.float32): np.uint32,
         np.dtype(np.float64): np.uint64}


def _hex(value: Any, dtype: np.dtype) -> str:
    if dtype.kind != "f":
        return repr(value.item())
    raw = np.asarray(value, dtype).reshape(1).view(_UINT[dtype])[0]
    return f"0x{int(raw):0{2 * dtype.itemsize}x} ({value.item()!r})"


def _check_layout(actual: Any, expected: Any, context: str) -> tuple[np.ndarray, np.ndarray]:
    actual, expected = np.asarray(actual), np.asarray(expected)
    where = f"{context}: " if context else ""
    assert actual.dtype == expected.dtype, \
        f"{where}dtype {actual.dtype} != expected {expected.dtype}"
    assert actual.shape == expected.shape, \
        f"{where}shape {actual.shape} != expected {expected.shape}"
    return actual, expected


def _report(bad: np.ndarray, actual: np.ndarray, expected: np.ndarray, what: str,
            context: str, extra: np.ndarray | None = None) -> None:
    """Fail, listing the first mismatches (bad: a boolean mask shaped like the arrays)."""
    indices = np.argwhere(bad)
    lines = [f"{context + ': ' if context else ''}{len(indices)} of {bad.size} elements "
             f"differ ({what}); the first {min(SHOWN, len(indices))}:"]
    for idx in indices[:SHOWN]:
        at = tuple(int(i) for i in idx)
        line = (f"  at {at}: actual {_hex(actual[at], actual.dtype)}, "
                f"expected {_hex(expected[at], expected.dtype)}")
        if extra is not None:
            line += f", distance {extra[at]}"
        lines.append(line)
    raise AssertionError("\n".join(lines))


def _sign_and_magnitude(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sign bit and the other bits of each float, as uint64."""
    raw = np.ascontiguousarray(x).view(_UINT[x.dtype]).astype(np.uint64).reshape(x.shape)
    top = np.uint64(1 << (8 * x.dtype.itemsize - 1))
    return raw >= top, raw & (top - np.uint64(1))


def ulp_distance(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """How many floats apart each pair is, as uint64, on the line of floats in order: adjacent
    floats are 1 apart and -0.0 is one below +0.0, so (-0.0, +0.0) is 1 and (-tiny, +tiny) is 3
    for the smallest subnormal. NaN has a place too; callers deal with NaN first."""
    neg_a, mag_a = _sign_and_magnitude(actual)
    neg_e, mag_e = _sign_and_magnitude(expected)
    same_side = np.maximum(mag_a, mag_e) - np.minimum(mag_a, mag_e)
    return np.where(neg_a == neg_e, same_side, mag_a + mag_e + np.uint64(1))


def assert_same_bits(actual: Any, expected: Any, *, ulp: int = 0, context: str = "") -> None:
    """Equal shapes and dtypes, and every element the same float: bitwise for ulp=0 (any NaN is
    the same NaN; -0.0 is not +0.0; infinities by sign), else at most `ulp` floats apart on the
    ordered line (NaN and infinities still exact). Non-float arrays (bool) must be equal."""
    actual, expected = _check_layout(actual, expected, context)
    if actual.dtype.kind != "f":
        bad = actual != expected
        if bad.any():
            _report(bad, actual, expected, "values", context)
        return
    nan_a, nan_e = np.isnan(actual), np.isnan(expected)
    if ulp == 0:
        same = (ulp_distance(actual, expected) == 0) | (nan_a & nan_e)
        bad = ~same
        if bad.any():
            _report(bad, actual, expected, "bitwise; any NaN equals any NaN", context)
        return
    inf_a, inf_e = np.isinf(actual), np.isinf(expected)
    distance = ulp_distance(actual, expected)
    special = (nan_a != nan_e) | ((inf_a | inf_e) & (actual != expected))
    bad = special | (~(nan_a | nan_e | inf_a | inf_e) & (distance > ulp))
    if bad.any():
        _report(bad, actual, expected, f"within {ulp} ulp; NaN and infinities exact", context,
                distance)


def assert_within(actual: Any, expected: Any, bound: Any, *, context: str = "") -> None:
    """Equal shapes and dtypes; NaN where expected is NaN, the same infinity where it is
    infinite, and elsewhere |actual - expected| <= bound (broadcast; computed in f64). The sign
    of a zero is not compared: a reordered sum does not define it."""
    actual, expected = _check_layout(actual, expected, context)
    nan_a, nan_e = np.isnan(actual), np.isnan(expected)
    inf_a, inf_e = np.isinf(actual), np.isinf(expected)
    finite = ~(nan_a | nan_e | inf_a | inf_e)
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    error = np.where(finite, error, 0.0)
    special = (nan_a != nan_e) | ((inf_a | inf_e) & ~(nan_a | nan_e) & (actual != expected))
    bad = special | (finite & ~(error <= np.broadcast_to(bound, error.shape)))
    if bad.any():
        _report(bad, actual, expected, "NaN and infinities exact, finite within the bound",
                context, error)
