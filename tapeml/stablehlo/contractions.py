"""matmul in StableHLO: one `stablehlo.dot_general` (batched over the leading dim for rank 3)."""

from __future__ import annotations

from tapeml.dialects import tape
from tapeml.stablehlo.registry import V, Writer, emits


@emits(tape.MatmulOp)
def matmul(w: Writer, out: V, a: V, b: V) -> V:
    if len(a.shape) == 2:
        return w.dot_general(a, b, ([], []), ([1], [0]), out.shape)
    return w.dot_general(a, b, ([0], [0]), ([2], [1]), out.shape)
