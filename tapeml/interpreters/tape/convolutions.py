"""The numpy semantics of the 2-D window ops on NCHW tensors: conv2d, maxpool2d and avgpool2d, and
their backward ops, written with unfold and fold over the padded input (`_pad2d`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tapeml.dialects import tape
from tapeml.interpreters.tape.layout import fold, pad, unfold
from tapeml.interpreters.tape.reductions import max_over
from tapeml.interpreters.tape.registry import semantics


def _pad2d(x: np.ndarray, padding: Sequence[int], value: float) -> np.ndarray:
    top, left, bottom, right = padding
    return pad(x, low=(0, 0, top, left), high=(0, 0, bottom, right), value=value)


@semantics(tape.Conv2dOp)
def conv2d(x: np.ndarray, w: np.ndarray, *, stride: Sequence[int], padding: Sequence[int],
           dilation: Sequence[int], groups: int) -> np.ndarray:
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    cols = unfold(_pad2d(x, padding, 0.0), kernel=(kh, kw), stride=stride, dilation=dilation)
    oh, ow = cols.shape[2:4]
    cols = cols.reshape(n, groups, cg, oh, ow, kh, kw)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    y = np.einsum("ngchwij,gocij->ngohw", cols, wg, optimize=True)
    return np.ascontiguousarray(y.reshape(n, o, oh, ow))


@semantics(tape.MaxPool2dOp)
def maxpool2d(x: np.ndarray, *, kernel: Sequence[int], stride: Sequence[int],
              padding: Sequence[int]) -> np.ndarray:
    cols = unfold(_pad2d(x, padding, -np.inf), kernel=kernel, stride=stride, dilation=(1, 1))
    return max_over(cols, (-2, -1))


@semantics(tape.AvgPool2dOp)
def avgpool2d(x: np.ndarray, *, kernel: Sequence[int], stride: Sequence[int],
              padding: Sequence[int]) -> np.ndarray:
    cols = unfold(_pad2d(x, padding, 0.0), kernel=kernel, stride=stride, dilation=(1, 1))
    return cols.sum(axis=(-2, -1)) / (kernel[0] * kernel[1])


def _unpad2d(x: np.ndarray, padding: Sequence[int]) -> np.ndarray:
    top, left, bottom, right = padding
    return pad(x, low=(0, 0, -top, -left), high=(0, 0, -bottom, -right), value=0.0)


def _padded(spatial: Sequence[int], padding: Sequence[int]) -> tuple[int, int]:
    return (spatial[0] + padding[0] + padding[2], spatial[1] + padding[1] + padding[3])


@semantics(tape.Conv2dBackwardInputOp)
def conv2d_backward_input(ct: np.ndarray, w: np.ndarray, *, stride: Sequence[int],
                          padding: Sequence[int], dilation: Sequence[int], groups: int,
                          spatial: Sequence[int]) -> np.ndarray:
    n, o, oh, ow = ct.shape
    _, cg, kh, kw = w.shape
    ctg = ct.reshape(n, groups, o // groups, oh, ow)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    cols = np.einsum("ngohw,gocij->ngchwij", ctg, wg, optimize=True)
    cols = cols.reshape(n, groups * cg, oh, ow, kh, kw)
    folded = fold(cols, kernel=(kh, kw), stride=stride, dilation=dilation,
                  spatial=_padded(spatial, padding))
    return np.ascontiguousarray(_unpad2d(folded, padding))


@semantics(tape.Conv2dBackwardWeightOp)
def conv2d_backward_weight(x: np.ndarray, ct: np.ndarray, *, stride: Sequence[int],
                           padding: Sequence[int], dilation: Sequence[int], groups: int,
                           kernel: Sequence[int]) -> np.ndarray:
    n, c = x.shape[:2]
    _, o, oh, ow = ct.shape
    kh, kw = kernel
    cols = unfold(_pad2d(x, padding, 0.0), kernel=kernel, stride=stride, dilation=dilation)
    cols = cols.reshape(n, groups, c // groups, oh, ow, kh, kw)
    ctg = ct.reshape(n, groups, o // groups, oh, ow)
    w = np.einsum("ngohw,ngchwij->gocij", ctg, cols, optimize=True)
    return np.ascontiguousarray(w.reshape(o, c // groups, kh, kw))


@semantics(tape.MaxPool2dBackwardOp)
def maxpool2d_backward(x: np.ndarray, ct: np.ndarray, *, kernel: Sequence[int],
                       stride: Sequence[int], padding: Sequence[int]) -> np.ndarray:
    cols = unfold(_pad2d(x, padding, -np.inf), kernel=kernel, stride=stride, dilation=(1, 1))
    top = cols.max(axis=(-2, -1), keepdims=True)
    mask = (cols == top).astype(x.dtype)
    share = ct[..., None, None] / mask.sum(axis=(-2, -1), keepdims=True)
    folded = fold(mask * share, kernel=kernel, stride=stride, dilation=(1, 1),
                  spatial=_padded(x.shape[2:], padding))
    return np.ascontiguousarray(_unpad2d(folded, padding))


@semantics(tape.AvgPool2dBackwardOp)
def avgpool2d_backward(ct: np.ndarray, *, kernel: Sequence[int], stride: Sequence[int],
                       padding: Sequence[int], spatial: Sequence[int]) -> np.ndarray:
    share = ct / (kernel[0] * kernel[1])
    cols = np.broadcast_to(share[..., None, None], (*ct.shape, *kernel))
    folded = fold(cols, kernel=kernel, stride=stride, dilation=(1, 1),
                  spatial=_padded(spatial, padding))
    return np.ascontiguousarray(_unpad2d(folded, padding))
