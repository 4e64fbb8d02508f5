"""take and scatter in StableHLO: `stablehlo.gather` and `stablehlo.scatter` along one axis,
after the indices are brought to tape's rule (a negative index counts from the end; take
clamps the rest into the axis, scatter leaves them out of it, where StableHLO skips them)."""

from __future__ import annotations

from tapeml.dialects import tape
from tapeml.stablehlo.registry import V, Writer, emits


def _from_end(w: Writer, indices: V, n: int) -> V:
    """i + n where i < 0."""
    negative = w.compare("lt", indices, w.like(0, indices))
    return w.select(negative, w.binary("add", indices, w.like(n, indices)), indices)


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

    return w.scatter(x, _from_end(w, indices, x.shape[axis]), updates, axis, combine)
