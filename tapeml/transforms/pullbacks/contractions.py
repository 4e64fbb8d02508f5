"""The pullback of the contraction, matmul."""

from __future__ import annotations

from tapeml.dialects import tape
from tapeml.tracing import ops
from tapeml.transforms.pullbacks.registry import pullback


def _swap_last(x):
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return ops.transpose(x, perm)


@pullback(tape.MatmulOp)
def _matmul(ct, a, b, *, result):
    return ops.matmul(ct, _swap_last(b)), ops.matmul(_swap_last(a), ct)
