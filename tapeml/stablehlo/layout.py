"""The layout tape ops in StableHLO: broadcast_in_dim, reshape, transpose, pad (negative amounts
crop, as tape's do), slice and concatenate; unfold as one strided slice per kernel tap, stacked,
and fold, its adjoint, as each tap's windows padded back (interior padding = stride - 1) and
summed — the forms `unfold_windows` and `fold_windows` the window ops' rules share."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from tapeml.dialects import tape
from tapeml.stablehlo.registry import V, Writer, emits


@emits(tape.BroadcastOp)
def broadcast(w: Writer, out: V, x: V, *, shape: Sequence[int]) -> V:
    return w.broadcast(x, shape)


@emits(tape.ReshapeOp)
def reshape(w: Writer, out: V, x: V, *, shape: Sequence[int]) -> V:
    return w.reshape(x, shape)


@emits(tape.PermuteOp)
def permute(w: Writer, out: V, x: V, *, perm: Sequence[int]) -> V:
    return w.transpose(x, perm)


@emits(tape.PadOp)
def pad(w: Writer, out: V, x: V, *, low: Sequence[int], high: Sequence[int],
        value: float) -> V:
    if x.size == 0:  # all padding
        return w.splat(value, out.shape, out.dtype)
    return w.pad(x, w.scalar(value, x.dtype), low, high)


@emits(tape.SliceOp)
def slice_(w: Writer, out: V, x: V, *, start: Sequence[int], stop: Sequence[int],
           step: Sequence[int]) -> V:
    return w.slice(x, start, stop, step)


@emits(tape.ConcatOp)
def concat(w: Writer, out: V, *xs: V, axis: int) -> V:
    return w.concatenate([x for x in xs if x.shape[axis]] or xs[:1], axis)


def unfold_windows(w: Writer, x: V, kernel: Sequence[int], stride: Sequence[int],
                   dilation: Sequence[int]) -> V:
    """(*batch, *spatial) -> (*batch, *windows, *kernel): one strided slice per tap."""
    k = len(kernel)
    batch, spatial = x.shape[:-k], x.shape[-k:]
    windows = [(s - (kk - 1) * d - 1) // st + 1
               for s, kk, st, d in zip(spatial, kernel, stride, dilation, strict=True)]
    taps = []
    for tap in itertools.product(*(range(kk) for kk in kernel)):
        start = [*(0 for _ in batch), *(t * d for t, d in zip(tap, dilation, strict=True))]
        limit = [*batch, *(t * d + (n - 1) * st + 1
                           for t, d, n, st in zip(tap, dilation, windows, stride, strict=True))]
        piece = w.slice(x, start, limit, [*(1 for _ in batch), *stride])
        taps.append(w.reshape(piece, [*batch, *windows, 1]))
    stacked = w.concatenate(taps, len(batch) + k)
    return w.reshape(stacked, [*batch, *windows, *kernel])


def fold_windows(w: Writer, x: V, kernel: Sequence[int], stride: Sequence[int],
                 dilation: Sequence[int], spatial: Sequence[int]) -> V:
    """(*batch, *windows, *kernel) -> (*batch, *spatial): each tap's windows padded to where
    they were read from, summed in the taps' row-major order."""
    k = len(kernel)
    batch, windows = x.shape[:-2 * k], x.shape[-2 * k:-k]
    zero = w.scalar(0, x.dtype)
    flat = w.reshape(x, [*batch, *windows, math.prod(kernel)])
    total = None
    for i, tap in enumerate(itertools.product(*(range(kk) for kk in kernel))):
        rank = len(flat.shape)
        piece = w.slice(flat, [0] * (rank - 1) + [i], [*flat.shape[:-1], i + 1])
        piece = w.reshape(piece, [*batch, *windows])
        low = [t * d for t, d in zip(tap, dilation, strict=True)]
        high = [s - lo - (n - 1) * st - 1
                for s, lo, n, st in zip(spatial, low, windows, stride, strict=True)]
        placed = w.pad(piece, zero, [*(0 for _ in batch), *low], [*(0 for _ in batch), *high],
                       [*(0 for _ in batch), *(st - 1 for st in stride)])
        total = placed if total is None else w.binary("add", total, placed)
    return total


@emits(tape.UnfoldOp)
def unfold(w: Writer, out: V, x: V, *, kernel: Sequence[int], stride: Sequence[int],
           dilation: Sequence[int]) -> V:
    return unfold_windows(w, x, kernel, stride, dilation)


@emits(tape.FoldOp)
def fold(w: Writer, out: V, x: V, *, kernel: Sequence[int], stride: Sequence[int],
         dilation: Sequence[int], spatial: Sequence[int]) -> V:
    return fold_windows(w, x, kernel, stride, dilation, spatial)


def crop2d(w: Writer, x: V, padding: Sequence[int]) -> V:
    """(N, C, H, W) without [top, left, bottom, right] rows and columns."""
    top, left, bottom, right = padding
    return w.slice(x, [0, 0, top, left], [*x.shape[:2], x.shape[2] - bottom,
                                           x.shape[3] - right])


def pad2d(w: Writer, x: V, padding: Sequence[int], value: float) -> V:
    top, left, bottom, right = padding
    return w.pad(x, w.scalar(value, x.dtype), [0, 0, top, left], [0, 0, bottom, right])

