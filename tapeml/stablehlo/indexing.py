"""take and scatter in StableHLO: `stablehlo.gather` and `stablehlo.scatter` along one axis,
after the indices are brought to tape's rule (an index in [-n, 0) counts from the end; take
clamps any other into the axis, scatter drops the update of any other).

StableHLO leaves a scatter index outside the operand to the implementation: IREE 3.13 skips a
positive one but writes a negative one out of bounds (over another result's buffer). So every
index outside [-n, n) is sent to n, where every consumer skips it."""

from __future__ import annotations

from tapeml.dialects import tape
from tapeml.stablehlo.registry import V, Writer, emits


def _from_end(w: Writer, indices: V, n: int) -> V:
    """i + n where i < 0 (below -n this stays negative: out of range)."""
    negative = w.compare("lt", indices, w.like(0, indices))
    return w.select(negative, w.binary("add", indices, w.like(n, indices)), indices)


def _dropped_past_end(w: Writer, indices: V, n: int) -> V:
    """Each index in [-n, n) in [0, n), every other n: past the end, which consumers skip."""
    j = _from_end(w, indices, n)
    past = w.like(n, indices)
    outside = w.binary("or", w.compare("lt", j, w.like(0, indices)), w.compare("ge", j, past))
    return w.select(outside, past, j)


@emits(tape.TakeOp)
def take(w: Writer, out: V, x: V, indices: V, *, axis: int) -> V:
    n = x.shape[axis]
    inside = w.clamp(w.scalar(0, indices.dtype), _from_end(w, indices, n),
                     w.scalar(n - 1, indices.dtype))
    return w.gather(x, inside, axis)


_COMBINE = {"add": "add", "max": "maximum", "min": "minimum"}


@emits(tape.ScatterOp)
def scatter(w: Writer, out: V, x: V, indices: V, updates: V, *, kind: str, axis: int) -> V:
    if updates.size == 0:  # nothing lands: x (IREE 3.13's compiler crashes on an empty one)
        return x

    def combine(b: Writer, args: list[V]) -> list[V]:
        current, update = args
        return [update if kind == "set" else b.binary(_COMBINE[kind], current, update)]

    return w.scatter(x, _dropped_past_end(w, indices, x.shape[axis]), updates, axis, combine)
