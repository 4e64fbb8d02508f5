"""argmax, argmin, cumsum and iota in StableHLO: the arg reductions as one variadic
`stablehlo.reduce` over (value, index) pairs whose body keeps numpy's order (NaN first, then
the larger / smaller value, the smaller index on ties), cumsum as XLA writes it (a
`reduce_window` of the whole axis, padded before it, or after it in reverse), iota as iota."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.stablehlo.reductions import highest, lowest
from tapeml.stablehlo.registry import V, Writer, emits


def _arg(w: Writer, out: V, x: V, axis: int, direction: str) -> V:
    index = w.iota(x.shape, np.int64, axis)
    first = lowest(x.dtype) if direction == "gt" else highest(x.dtype)
    last = int(np.iinfo(np.int64).max)  # any element ties with the start and wins by index

    def better(b: Writer, args: list[V]) -> list[V]:  # (value, index) twice: StableHLO's order
        a, ia, c, ic = args
        wins = b.compare(direction, a, c)
        tie = b.compare("eq", a, c)
        if x.is_float:
            a_nan, c_nan = b.compare("ne", a, a), b.compare("ne", c, c)
            wins = b.binary("or", wins, b.binary("and", a_nan, b.unary("not", c_nan)))
            tie = b.binary("or", tie, b.binary("and", a_nan, c_nan))
        wins = b.binary("or", wins, b.binary("and", tie, b.compare("lt", ia, ic)))
        return [b.select(wins, a, c), b.select(wins, ia, ic)]

    _, result = w.reduce([x, index], [w.scalar(first, x.dtype), w.scalar(last, np.int64)],
                         [axis], better)
    return w.reshape(result, out.shape)  # keepdims


@emits(tape.ArgMaxOp)
def argmax(w: Writer, out: V, x: V, *, axis: int, keepdims: bool) -> V:
    return _arg(w, out, x, axis, "gt")


@emits(tape.ArgMinOp)
def argmin(w: Writer, out: V, x: V, *, axis: int, keepdims: bool) -> V:
    return _arg(w, out, x, axis, "lt")


@emits(tape.CumsumOp)
def cumsum(w: Writer, out: V, x: V, *, axis: int, reverse: bool) -> V:
    n = x.shape[axis]
    window = [n if i == axis else 1 for i in range(len(x.shape))]
    padding = [((0, n - 1) if reverse else (n - 1, 0)) if i == axis else (0, 0)
               for i in range(len(x.shape))]
    return w.reduce_window(x, w.scalar(0, x.dtype), window, [1] * len(x.shape), padding,
                           lambda b, args: [b.binary("add", *args)])


@emits(tape.IotaOp)
def iota(w: Writer, out: V, *, shape: Any, dtype: Any, axis: int) -> V:
    return w.iota(shape, dtype, axis)
