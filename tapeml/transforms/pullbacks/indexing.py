"""The pullbacks of the indexing tape ops, take and scatter. Indices carry no gradient; neither
do integer or boolean data (their cotangents are None).

    take            ct_x = a scatter add of ct into zeros of x's shape, at the positions take
                    read (normalized and clamped as take clamps them: a clamped read's
                    cotangent goes to the element it read)
    scatter add     ct_x = ct; ct_updates = ct at each update's target, 0 for a dropped update
    scatter set     ct_x = ct, 0 at every element some update wrote; ct_updates = ct at the
                    update's target for the update that won (the last in row-major order), 0
                    for one that was overwritten or dropped
    scatter max/min the cotangent of each result element is split evenly among the elements
                    that attain it: x's element where it equals the result, and each update
                    landing there that equals it (the `max` reduction's rule, even_split). A
                    NaN result is attained by nothing: its cotangent is NaN, as for `max`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.tracing.trace import Tracer, bind
from tapeml.transforms.pullbacks.registry import pullback


def _floating(x: Any) -> bool:
    return np.dtype(x.dtype).kind == "f"


def _constant(array: np.ndarray, like: Any) -> Any:
    """`array` as a constant of `like`'s trace (or as it is when `like` is an array): integer
    constants are built here, not by the trace, which takes only float ones."""
    if isinstance(like, Tracer):
        return like.trace.insert(tape.ConstantOp.build(value=array))
    return array


def _full(value: float | int, shape: Sequence[int], dtype: Any, like: Any) -> Any:
    scalar = _constant(np.asarray(value, dtype), like)
    return bind(tape.BroadcastOp, scalar, shape=tuple(shape))


def _positions(indices: Any, n: int) -> Any:
    """The positions (int64) take reads for `indices` along an axis of length n: normalized
    (i + n for a negative i), then clamped into [0, n-1]."""
    shape = indices.shape
    zero = _full(0, shape, np.int64, indices)
    negative = bind(tape.CmpOp, indices, zero, predicate="lt")
    normalized = bind(tape.SelectOp, negative,
                      bind(tape.AddOp, indices, _full(n, shape, np.int64, indices)), indices)
    return bind(tape.MinimumOp, bind(tape.MaximumOp, normalized, zero),
                _full(n - 1, shape, np.int64, indices))


def _applied(indices: Any, n: int) -> Any:
    """-n <= i < n (i1): the updates a scatter applies."""
    shape = indices.shape
    return bind(tape.AndOp,
                bind(tape.CmpOp, indices, _full(-n, shape, np.int64, indices), predicate="ge"),
                bind(tape.CmpOp, indices, _full(n, shape, np.int64, indices), predicate="lt"))


def _spread(mask: Any, axis: int, shape: Sequence[int]) -> Any:
    """A mask over the index positions, broadcast over the updates' other dims."""
    trail = len(shape) - axis - len(mask.shape)
    ranked = bind(tape.ReshapeOp, mask, shape=(*(1,) * axis, *mask.shape, *(1,) * trail))
    return bind(tape.BroadcastOp, ranked, shape=tuple(shape))


def _where(mask: Any, value: Any) -> Any:
    return bind(tape.SelectOp, mask, value, _full(0, value.shape, value.dtype, value))


def _wide(indices: Any) -> Any:
    """The indices as int64, so that -n and n are exact whatever their type."""
    if np.dtype(indices.dtype) == np.int64:
        return indices
    return bind(tape.CastOp, indices, dtype=np.int64)


@pullback(tape.TakeOp)
def _take(ct, x, indices, *, result, axis):
    if not _floating(x):
        return None, None
    n = x.shape[axis]
    zeros = _full(0, x.shape, x.dtype, x)
    return bind(tape.ScatterOp, zeros, _positions(_wide(indices), n), ct, kind="add",
                axis=axis), None


def _won(indices: Any, applied: Any, n: int) -> Any:
    """For each index position: its update was applied and no later one (in row-major order)
    landed on the same position (i1, the index shape)."""
    order = _constant(np.arange(int(np.prod(indices.shape)), dtype=np.int64)
                      .reshape(indices.shape), indices)
    last = bind(tape.ScatterOp, _full(-1, (n,), np.int64, indices), indices, order,
                kind="set", axis=0)
    winner = bind(tape.TakeOp, last, indices, axis=0)
    return bind(tape.AndOp, applied, bind(tape.CmpOp, winner, order, predicate="eq"))


@pullback(tape.ScatterOp)
def _scatter(ct, x, indices, updates, *, result, kind, axis):
    if not _floating(x):
        return None, None, None
    n = x.shape[axis]
    if n == 0:  # every update was dropped
        return ct, None, _full(0, updates.shape, updates.dtype, updates)
    wide = _wide(indices)
    applied = _applied(wide, n)
    if kind == "add":
        return ct, None, _where(_spread(applied, axis, updates.shape),
                                bind(tape.TakeOp, ct, wide, axis=axis))
    if kind == "set":
        cleared = bind(tape.ScatterOp, ct, wide, _full(0, updates.shape, updates.dtype, updates),
                       kind="set", axis=axis)
        won = _spread(_won(wide, applied, n), axis, updates.shape)
        return cleared, None, _where(won, bind(tape.TakeOp, ct, wide, axis=axis))
    # max / min: ct shared evenly among the elements equal to the result
    one = _full(1, updates.shape, updates.dtype, updates)
    reached = bind(tape.TakeOp, result, wide, axis=axis)
    hit = bind(tape.AndOp, _spread(applied, axis, updates.shape),
               bind(tape.CmpOp, updates, reached, predicate="eq"))
    hits = _where(hit, one)
    kept = bind(tape.CastOp, bind(tape.CmpOp, x, result, predicate="eq"), dtype=x.dtype)
    count = bind(tape.ScatterOp, kept, wide, hits, kind="add", axis=axis)
    share = bind(tape.DivOp, ct, count)
    return (bind(tape.MulOp, kept, share), None,
            bind(tape.MulOp, hits, bind(tape.TakeOp, share, wide, axis=axis)))
