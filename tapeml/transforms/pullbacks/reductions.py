"""The pullbacks of the reductions: sum, and max, which splits the cotangent evenly among the
elements that attain the max (`even_split`, which maxpool2d's backward uses too)."""

from __future__ import annotations

from tapeml.dialects import tape
from tapeml.tracing import ops
from tapeml.transforms.pullbacks.registry import pullback


def _unreduce(ct, a, axes, keepdims):
    """`ct` (a reduction's cotangent) broadcast back to `a`'s shape."""
    if not keepdims:
        ct = ops.reshape(ct, [1 if i in axes else d for i, d in enumerate(a.shape)])
    return ops.broadcast_to(ct, a.shape)


@pullback(tape.SumOp)
def _sum(ct, a, *, result, axes, keepdims):
    return (_unreduce(ct, a, axes, keepdims),)


def even_split(ct, values, top, axes):
    """ct shared evenly among the elements of `values` equal to `top` (both broadcastable)."""
    mask = ops.astype(ops.equal(values, top), values.dtype)
    count = ops.sum(mask, axis=axes, keepdims=True)
    return ops.multiply(mask, ops.divide(ct, count))


@pullback(tape.MaxOp)
def _max(ct, a, *, result, axes, keepdims):
    top = _unreduce(result, a, axes, keepdims)
    return (even_split(_unreduce(ct, a, axes, keepdims), a, top, axes),)
