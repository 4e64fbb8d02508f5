"""The numpy semantics of the layout tape ops: broadcast, reshape, permute, pad (negative amounts
crop), slice, unfold, fold and concat."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from tapeml.dialects import tape
from tapeml.interpreters.tape.registry import semantics


@semantics(tape.BroadcastOp)
def broadcast(x: np.ndarray, *, shape: Sequence[int]) -> np.ndarray:
    return np.broadcast_to(x, tuple(shape))


@semantics(tape.ReshapeOp)
def reshape(x: np.ndarray, *, shape: Sequence[int]) -> np.ndarray:
    return x.reshape(tuple(shape))


@semantics(tape.PermuteOp)
def permute(x: np.ndarray, *, perm: Sequence[int]) -> np.ndarray:
    return np.transpose(x, perm)


@semantics(tape.PadOp)
def pad(x: np.ndarray, *, low: Sequence[int], high: Sequence[int], value: float) -> np.ndarray:
    if x.ndim == 0:
        return x
    # negative amounts crop, positive ones pad; the two sides of a dim are independent
    sides = list(zip(x.shape, low, high, strict=True))
    crop = tuple(slice(max(0, -lo), d - max(0, -hi)) for d, lo, hi in sides)
    widths = [(max(0, lo), max(0, hi)) for _, lo, hi in sides]
    return np.pad(x[crop], widths, constant_values=np.asarray(value, x.dtype))


@semantics(tape.SliceOp)
def slice_(x: np.ndarray, *, start: Sequence[int], stop: Sequence[int],
           step: Sequence[int]) -> np.ndarray:
    return x[tuple(slice(a, b, s) for a, b, s in zip(start, stop, step, strict=True))]


@semantics(tape.UnfoldOp)
def unfold(x: np.ndarray, *, kernel: Sequence[int], stride: Sequence[int],
           dilation: Sequence[int]) -> np.ndarray:
    k = len(kernel)
    spans = [d * (n - 1) + 1 for n, d in zip(kernel, dilation, strict=True)]
    axes = tuple(range(x.ndim - k, x.ndim))
    windows = np.lib.stride_tricks.sliding_window_view(x, spans, axis=axes)
    # windows: (*batch, *positions, *spans); keep every stride-th position, every dilation-th tap
    every = [slice(None, None, n) for n in (*stride, *dilation)]
    picks = (..., *every)
    return np.ascontiguousarray(windows[picks])


@semantics(tape.FoldOp)
def fold(x: np.ndarray, *, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int],
         spatial: Sequence[int]) -> np.ndarray:
    k = len(kernel)
    batch = x.shape[: x.ndim - 2 * k]
    windows = x.shape[x.ndim - 2 * k: x.ndim - k]
    out = np.zeros((*batch, *spatial), dtype=x.dtype)
    for tap in itertools.product(*(range(n) for n in kernel)):
        # every window's value at this tap lands on a strided grid of output positions
        target = tuple(
            slice(t * d, t * d + s * (w - 1) + 1, s)
            for t, d, s, w in zip(tap, dilation, stride, windows, strict=True)
        )
        out[(..., *target)] += x[(..., *(slice(None),) * k, *tap)]
    return out


@semantics(tape.ConcatOp)
def concat(*xs: np.ndarray, axis: int) -> np.ndarray:
    return np.concatenate(xs, axis=axis)
