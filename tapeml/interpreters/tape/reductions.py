"""The numpy semantics of the reductions: sum, and max as the IEEE maximum (`max_over`, which
the pools use too)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tapeml.dialects import tape
from tapeml.interpreters.tape.registry import semantics


def max_over(x: np.ndarray, axes: tuple[int, ...], keepdims: bool = False) -> np.ndarray:
    """The IEEE maximum of `x` over `axes`: NaN if any is NaN, +0 if the largest are zeros of
    both signs (np.max keeps whichever zero its order meets first)."""
    top = np.asarray(np.maximum.reduce(x, axis=axes, keepdims=keepdims))
    if x.dtype.kind != "f" or np.count_nonzero(top) == top.size:  # no zero among the maxima
        return top
    zero = top == 0
    positive = np.any((x == 0) & ~np.signbit(x), axis=axes, keepdims=keepdims)
    return np.asarray(np.where(zero & positive, np.zeros((), x.dtype), top))


@semantics(tape.SumOp)
def sum_(x: np.ndarray, *, axes: Sequence[int], keepdims: bool) -> np.ndarray:
    # in x's own type: numpy sums integers as int64 (wrapping, so the order does not matter)
    return np.asarray(np.add.reduce(x, axis=tuple(axes), keepdims=keepdims, dtype=x.dtype))


@semantics(tape.MaxOp)
def max_(x: np.ndarray, *, axes: Sequence[int], keepdims: bool) -> np.ndarray:
    return max_over(x, tuple(axes), keepdims)
