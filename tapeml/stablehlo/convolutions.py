"""The 2-D window ops in StableHLO, NCHW. conv2d is one `stablehlo.convolution`; its backward
ops are convolutions as XLA writes them: the input's cotangent convolves the cotangent, dilated
by the stride, with the weight reversed and its feature dims swapped; the weight's convolves the
input with the cotangent as the kernel (batch and feature dims swapped, the stride as the
kernel's dilation); groups are the convolutions' feature_group_count (the input's cotangent)
and batch_group_count (the weight's). The pools are `stablehlo.reduce_window`; max-pool's
backward splits each window's cotangent evenly among the elements that attain its max (tape's
rule, which `select_and_scatter` cannot state: it picks one), elementwise where the windows
tile the input and with the windows unfolded otherwise; avg-pool's spreads it over every tap,
folded back."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tapeml.dialects import tape
from tapeml.stablehlo.layout import crop2d, fold_windows, pad2d, unfold_windows
from tapeml.stablehlo.reductions import lowest
from tapeml.stablehlo.registry import V, Writer, emits

NCHW = "[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]"


def _pairs(padding: Sequence[int]) -> list[tuple[int, int]]:
    top, left, bottom, right = padding
    return [(top, bottom), (left, right)]


@emits(tape.Conv2dOp)
def conv2d(w: Writer, out: V, x: V, weight: V, *, stride: Sequence[int],
           padding: Sequence[int], dilation: Sequence[int], groups: int) -> V:
    return w.convolution(x, weight, NCHW, out.shape, stride=stride, pad=_pairs(padding),
                         lhs_dilate=[1, 1], rhs_dilate=dilation, groups=groups)


@emits(tape.Conv2dBackwardInputOp)
def conv2d_backward_input(w: Writer, out: V, ct: V, weight: V, *, stride: Sequence[int],
                          padding: Sequence[int], dilation: Sequence[int], groups: int,
                          spatial: Sequence[int]) -> V:
    """The full correlation of the cotangent, dilated by the stride, with the kernel reversed
    and its feature dims swapped (per group: O/g in, C/g out), over the padded input; then
    the padding cropped (negative amounts written as a crop)."""
    o, cg, *kernel = weight.shape
    pads = []
    for k, d, s, n, size, lo_pad, hi_pad in zip(kernel, dilation, stride, ct.shape[2:],
                                                spatial, padding[:2], padding[2:], strict=True):
        span = (k - 1) * d + 1
        rest = size + lo_pad + hi_pad - span - (n - 1) * s  # rows the windows never read
        pads.append((span - 1 - lo_pad, span - 1 + rest - hi_pad))
    positive = [(max(lo, 0), max(hi, 0)) for lo, hi in pads]
    shape = [ct.shape[0], cg * groups, *(
        (n - 1) * s + 1 + lo + hi - ((k - 1) * d + 1) + 1
        for n, s, (lo, hi), k, d in zip(ct.shape[2:], stride, positive, kernel, dilation,
                                        strict=True))]
    flipped = w.reverse(weight, [2, 3])
    if groups > 1:  # (O, C/g, ...) -> (O/g, C, ...): each group's C/g outputs side by side
        split = w.reshape(flipped, [groups, o // groups, cg, *kernel])
        flipped = w.reshape(w.transpose(split, [1, 0, 2, 3, 4]), [o // groups, cg * groups,
                                                                  *kernel])
    full = w.convolution(ct, flipped, "[b, f, 0, 1]x[i, o, 0, 1]->[b, f, 0, 1]", shape,
                         stride=[1, 1], pad=positive, lhs_dilate=stride, rhs_dilate=dilation,
                         groups=groups)
    crop = [max(-lo, 0) for lo, _ in pads] + [max(-hi, 0) for _, hi in pads]
    return crop2d(w, full, crop)


@emits(tape.Conv2dBackwardWeightOp)
def conv2d_backward_weight(w: Writer, out: V, x: V, ct: V, *, stride: Sequence[int],
                           padding: Sequence[int], dilation: Sequence[int], groups: int,
                           kernel: Sequence[int]) -> V:
    """The padded input, cropped to the rows the windows read, convolved with the cotangent
    as the kernel: batch and feature dims swapped (the images are summed over), the stride as
    the kernel's dilation, each group's channels its own batch group."""
    padded = pad2d(w, x, padding, 0.0)
    used = [(k - 1) * d + (n - 1) * s + 1
            for k, d, n, s in zip(kernel, dilation, ct.shape[2:], stride, strict=True)]
    padded = w.slice(padded, [0, 0, 0, 0], [*padded.shape[:2], *used])
    shape = [x.shape[1] // groups, ct.shape[1], *kernel]  # (C/g, O, KH, KW)
    product = w.convolution(padded, ct, "[f, b, 0, 1]x[i, o, 0, 1]->[b, f, 0, 1]", shape,
                            stride=dilation, pad=[(0, 0), (0, 0)], lhs_dilate=[1, 1],
                            rhs_dilate=stride, batch_groups=groups)
    return w.transpose(product, [1, 0, 2, 3])


def _pool(w: Writer, x: V, kernel: Sequence[int], stride: Sequence[int],
          padding: Sequence[int], body: str, init: float) -> V:
    return w.reduce_window(x, w.scalar(init, x.dtype), [1, 1, *kernel], [1, 1, *stride],
                           [(0, 0), (0, 0), *_pairs(padding)],
                           lambda b, args: [b.binary(body, *args)])


@emits(tape.MaxPool2dOp)
def maxpool2d(w: Writer, out: V, x: V, *, kernel: Sequence[int], stride: Sequence[int],
              padding: Sequence[int]) -> V:
    return _pool(w, x, kernel, stride, padding, "maximum", lowest(x.dtype))


@emits(tape.AvgPool2dOp)
def avgpool2d(w: Writer, out: V, x: V, *, kernel: Sequence[int], stride: Sequence[int],
              padding: Sequence[int]) -> V:
    total = _pool(w, x, kernel, stride, padding, "add", 0)
    return w.binary("divide", total, w.like(kernel[0] * kernel[1], total))


def _spread(w: Writer, ct: V, kernel: Sequence[int]) -> V:
    """(N, C, OH, OW) -> (N, C, OH, OW, KH, KW), each window's value on each of its taps."""
    return w.broadcast(ct, [*ct.shape, *kernel], [0, 1, 2, 3])


def _upsampled(w: Writer, y: V, kernel: Sequence[int]) -> V:
    """(N, C, OH, OW) -> (N, C, OH * KH, OW * KW): each window's value on each of its taps,
    for windows that tile the input (stride = kernel)."""
    n, c, oh, ow = y.shape
    kh, kw = kernel
    spread = w.broadcast(y, [n, c, oh, kh, ow, kw], [0, 1, 2, 4])
    return w.reshape(spread, [n, c, oh * kh, ow * kw])


def _tiled_maxpool2d_backward(w: Writer, x: V, ct: V, kernel: Sequence[int]) -> V:
    """max-pool's backward where the windows tile the input (stride = kernel, no padding, the
    common 2x2/2 pool): every element is in at most one window, so the ties and their count
    are elementwise work and one reduce_window, with no windows unfolded."""
    n, c, oh, ow = ct.shape
    kh, kw = kernel
    covered = w.slice(x, [0, 0, 0, 0], [n, c, oh * kh, ow * kw])
    top = _pool(w, x, kernel, kernel, (0, 0, 0, 0), "maximum", lowest(x.dtype))
    tops = w.compare("eq", covered, _upsampled(w, top, kernel))
    count = _pool(w, w.convert(tops, x.dtype), kernel, kernel, (0, 0, 0, 0), "add", 0)
    share = _upsampled(w, w.binary("divide", ct, count), kernel)
    off = w.select(w.is_finite(share), w.like(0, share), w.like(np.nan, share))
    spread = w.select(tops, share, off)  # tape's mask * share: NaN where the max is NaN
    return w.pad(spread, w.scalar(0, x.dtype), [0, 0, 0, 0],
                 [0, 0, x.shape[2] - oh * kh, x.shape[3] - ow * kw])


@emits(tape.MaxPool2dBackwardOp)
def maxpool2d_backward(w: Writer, out: V, x: V, ct: V, *, kernel: Sequence[int],
                       stride: Sequence[int], padding: Sequence[int]) -> V:
    if list(stride) == list(kernel) and not any(padding):
        return _tiled_maxpool2d_backward(w, x, ct, kernel)
    padded = pad2d(w, x, padding, -np.inf)
    cols = unfold_windows(w, padded, kernel, stride, [1, 1])
    top = _pool(w, x, kernel, stride, padding, "maximum", lowest(x.dtype))
    tops = w.compare("eq", cols, _spread(w, top, kernel))
    (count,) = w.reduce([w.convert(tops, x.dtype)], [w.scalar(0, x.dtype)], [4, 5],
                        lambda b, args: [b.binary("add", *args)])
    share = _spread(w, w.binary("divide", ct, count), kernel)
    # tape's mask * share, written with selects (compilers fold a 0/1 product into one, which
    # drops the NaN of 0 * inf): a window whose max is NaN (count 0) is NaN on every tap
    off = w.select(w.is_finite(share), w.like(0, share), w.like(np.nan, share))
    folded = fold_windows(w, w.select(tops, share, off), kernel, stride, [1, 1],
                          padded.shape[2:])
    return crop2d(w, folded, padding)


@emits(tape.AvgPool2dBackwardOp)
def avgpool2d_backward(w: Writer, out: V, ct: V, *, kernel: Sequence[int],
                       stride: Sequence[int], padding: Sequence[int],
                       spatial: Sequence[int]) -> V:
    share = w.binary("divide", ct, w.like(kernel[0] * kernel[1], ct))
    padded = [spatial[0] + padding[0] + padding[2], spatial[1] + padding[1] + padding[3]]
    folded = fold_windows(w, _spread(w, share, kernel), kernel, stride, [1, 1], padded)
    return crop2d(w, folded, padding)
