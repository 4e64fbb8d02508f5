"""The reductions in StableHLO: `stablehlo.reduce` with an add or maximum body (maximum is
IEEE's: NaN wins, +0 above -0), then a reshape for keepdims."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tapeml.dialects import tape
from tapeml.stablehlo.registry import V, Writer, emits


def lowest(dtype: np.dtype) -> float | int | bool:
    """The identity of maximum: -inf, the smallest integer, or False (a boolean's maximum is
    its or)."""
    if dtype.kind == "b":
        return False
    return -np.inf if dtype.kind == "f" else int(np.iinfo(dtype).min)


def highest(dtype: np.dtype) -> float | int | bool:
    """The identity of minimum: +inf, the largest integer, or True."""
    if dtype.kind == "b":
        return True
    return np.inf if dtype.kind == "f" else int(np.iinfo(dtype).max)


def reduce_with(w: Writer, out: V, x: V, axes: Sequence[int], body: str, init: float) -> V:
    (result,) = w.reduce([x], [w.scalar(init, x.dtype)], axes,
                         lambda b, args: [b.binary(body, *args)])
    return w.reshape(result, out.shape)  # keepdims


@emits(tape.SumOp)
def sum_(w: Writer, out: V, x: V, *, axes: Sequence[int], keepdims: bool) -> V:
    return reduce_with(w, out, x, axes, "add", 0)


@emits(tape.MaxOp)
def max_(w: Writer, out: V, x: V, *, axes: Sequence[int], keepdims: bool) -> V:
    return reduce_with(w, out, x, axes, "maximum", lowest(x.dtype))
