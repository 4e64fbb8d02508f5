"""The pullbacks of the layout tape ops: broadcast (its rule, `broadcast`, also pulls the
cotangent back through a fused group's broadcast inputs), reshape, permute, pad, slice, unfold,
fold and concat."""

from __future__ import annotations

import numpy as np

from tapeml.dialects import tape
from tapeml.tracing import ops
from tapeml.transforms.pullbacks.registry import pullback


@pullback(tape.BroadcastOp)
def broadcast(ct, a, *, result, shape):
    lead = len(shape) - a.ndim
    stretched = tuple(lead + i for i, d in enumerate(a.shape) if d == 1 and shape[lead + i] != 1)
    summed = ops.sum(ct, axis=tuple(range(lead)) + stretched, keepdims=True)
    return (ops.reshape(summed, a.shape),)


@pullback(tape.ReshapeOp)
def _reshape(ct, a, *, result, shape):
    return (ops.reshape(ct, a.shape),)


@pullback(tape.PermuteOp)
def _permute(ct, a, *, result, perm):
    return (ops.transpose(ct, tuple(np.argsort(perm))),)


@pullback(tape.PadOp)
def _pad(ct, a, *, result, low, high, value):
    # padding's adjoint crops what was added and zero-pads what was cropped: the opposite pad
    return (ops.pad(ct, [(-lo, -hi) for lo, hi in zip(low, high, strict=True)]),)


@pullback(tape.SliceOp)
def _slice(ct, a, *, result, start, stop, step):
    # scatter back: spread each dim out to `step` apart (zeros between), then place at `start`
    for axis, (s, d, n) in enumerate(zip(step, a.shape, ct.shape, strict=True)):
        if s > 1 and n > 0:
            ct = ops.expand_dims(ct, axis + 1)
            widths = [(0, 0)] * ct.ndim
            widths[axis + 1] = (0, s - 1)
            ct = ops.pad(ct, widths)
            ct = ops.reshape(ct, (*ct.shape[:axis], n * s, *ct.shape[axis + 2:]))
        widths = [(0, 0)] * ct.ndim
        widths[axis] = (start[axis], d - start[axis] - ct.shape[axis])
        ct = ops.pad(ct, widths)
    return (ct,)


@pullback(tape.UnfoldOp)
def _unfold(ct, a, *, result, kernel, stride, dilation):
    k = len(kernel)
    return (ops.fold(ct, a.shape[a.ndim - k:], kernel, stride, dilation),)


@pullback(tape.FoldOp)
def _fold(ct, a, *, result, kernel, stride, dilation, spatial):
    return (ops.unfold(ct, kernel, stride, dilation),)


@pullback(tape.ConcatOp)
def _concat(ct, *inputs, result, axis):
    cts, offset = [], 0
    for x in inputs:
        index = [slice(None)] * ct.ndim
        index[axis] = slice(offset, offset + x.shape[axis])
        cts.append(ops.getitem(ct, tuple(index)))
        offset += x.shape[axis]
    return tuple(cts)
