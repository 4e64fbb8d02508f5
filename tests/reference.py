"""Plain reference semantics for the tape ops, written independently of `tapeml.interpreters.tape`.

Everything here is explicit Python loops over output (or input) positions on Python floats, in the
style of JAX's `lax_reference`: slow, obvious, and sharing no code with the implementation under
test. Each function returns a numpy array of the requested dtype; values are computed in Python
floats (IEEE double) and rounded once into that dtype on assignment.

For `+ - * /` and `sqrt` this single rounding of the double result gives exactly the correctly
rounded float32 result (double rounding is innocuous when the wider format has at least 2p + 2
bits), so those references are bit-exact for float32 as well as float64.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

NAN = math.nan
INF = math.inf


def positions(shape: Sequence[int]) -> itertools.product:
    """Every index tuple of `shape`, row-major (the empty tuple once for rank 0)."""
    return itertools.product(*(range(d) for d in shape))


def _fill(shape: Sequence[int], dtype: np.dtype, value: Callable[[tuple[int, ...]], float]):
    out = np.empty(tuple(shape), dtype=dtype)
    for idx in positions(shape):
        out[idx] = value(idx)
    return out


# ----------------------------------------------------------------------------------------------
# Scalar functions with IEEE special cases spelled out (Python's math raises instead).


def s_add(a: float, b: float) -> float:
    return a + b


def s_sub(a: float, b: float) -> float:
    return a - b


def s_mul(a: float, b: float) -> float:
    return a * b


def s_div(a: float, b: float) -> float:
    if b == 0.0:
        if math.isnan(a) or a == 0.0:
            return NAN
        negative = (a < 0) != (math.copysign(1.0, b) < 0)
        return -INF if negative else INF
    return a / b


def s_maximum(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return NAN
    return a if a >= b else b


def s_minimum(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return NAN
    return a if a <= b else b


def s_pow(a: float, b: float) -> float:
    # only used on a > 0 (see the tests for the special cases, checked against literal values)
    return math.pow(a, b)


def s_neg(a: float) -> float:
    return -a


def s_exp(a: float) -> float:
    return math.exp(a)


def s_log(a: float) -> float:
    return math.log(a)


def s_tanh(a: float) -> float:
    return math.tanh(a)


def s_sigmoid(a: float) -> float:
    if a >= 0:
        return 1.0 / (1.0 + math.exp(-a))
    e = math.exp(a)
    return e / (1.0 + e)


def s_relu(a: float) -> float:
    if math.isnan(a):
        return NAN
    return a if a > 0 else 0.0


def s_sqrt(a: float) -> float:
    return math.sqrt(a)


def s_sin(a: float) -> float:
    """C's sin (glibc's is within an ulp in f64); NaN at +-inf, where Python's raises."""
    return NAN if math.isinf(a) or math.isnan(a) else math.sin(a)


def s_cos(a: float) -> float:
    return NAN if math.isinf(a) or math.isnan(a) else math.cos(a)


SCALAR_BINARY = {
    "add": s_add, "sub": s_sub, "mul": s_mul, "div": s_div,
    "maximum": s_maximum, "minimum": s_minimum, "pow": s_pow,
}
SCALAR_UNARY = {
    "neg": s_neg, "exp": s_exp, "log": s_log, "tanh": s_tanh,
    "sigmoid": s_sigmoid, "relu": s_relu, "sqrt": s_sqrt, "sin": s_sin, "cos": s_cos,
}

# Python's float comparisons are IEEE ones: every comparison with NaN is False except !=.
COMPARE = {
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
}


def elementwise(fn: Callable[..., float], *xs: np.ndarray) -> np.ndarray:
    shape = xs[0].shape
    return _fill(shape, xs[0].dtype, lambda i: fn(*(float(x[i]) for x in xs)))


def cmp(a: np.ndarray, b: np.ndarray, predicate: str) -> np.ndarray:
    fn = COMPARE[predicate]
    out = np.empty(a.shape, dtype=bool)
    for i in positions(a.shape):
        out[i] = fn(float(a[i]), float(b[i]))
    return out


def select(cond: np.ndarray, on_true: np.ndarray, on_false: np.ndarray) -> np.ndarray:
    return _fill(cond.shape, on_true.dtype,
                 lambda i: float(on_true[i]) if bool(cond[i]) else float(on_false[i]))


def cast(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    # element by element through a Python float and numpy's scalar constructor
    scalar = np.dtype(dtype).type
    out = np.empty(x.shape, dtype=dtype)
    with np.errstate(over="ignore"):  # overflow to inf is the expected IEEE result
        for i in positions(x.shape):
            out[i] = scalar(float(x[i]))
    return out


# ----------------------------------------------------------------------------------------------
# Layout


def broadcast(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    extra = len(shape) - x.ndim

    def value(i):
        src = tuple(0 if d == 1 else j for j, d in zip(i[extra:], x.shape, strict=True))
        return float(x[src])

    return _fill(shape, x.dtype, value)


def reshape(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    flat = [float(x[i]) for i in positions(x.shape)]
    out = np.empty(tuple(shape), dtype=x.dtype)
    targets = list(positions(shape))
    assert len(targets) == len(flat)
    for i, v in zip(targets, flat, strict=True):
        out[i] = v
    return out


def permute(x: np.ndarray, perm: Sequence[int]) -> np.ndarray:
    shape = [x.shape[p] for p in perm]

    def value(i):
        src = [0] * x.ndim
        for k, p in enumerate(perm):
            src[p] = i[k]
        return float(x[tuple(src)])

    return _fill(shape, x.dtype, value)


def pad(x: np.ndarray, low: Sequence[int], high: Sequence[int], value: float) -> np.ndarray:
    """Output position o of a dim reads input position o - low (negative low crops)."""
    shape = [lo + d + hi for d, lo, hi in zip(x.shape, low, high, strict=True)]

    def read(i):
        src = tuple(o - lo for o, lo in zip(i, low, strict=True))
        if all(0 <= s < d for s, d in zip(src, x.shape, strict=True)):
            return float(x[src])
        return value

    return _fill(shape, x.dtype, read)


def slice_(x: np.ndarray, start: Sequence[int], stop: Sequence[int],
           step: Sequence[int]) -> np.ndarray:
    shape = []
    for a, b, s in zip(start, stop, step, strict=True):
        n = 0
        while a + n * s < b:
            n += 1
        shape.append(n)
    return _fill(shape, x.dtype,
                 lambda i: float(x[tuple(a + j * s for j, a, s in zip(i, start, step,
                                                                      strict=True))]))


def _count(size: int, kernel: int, stride: int, dilation: int) -> int:
    """Number of windows: positions p = 0, stride, 2*stride, ... with p + dilation*(kernel-1) in
    range, counted one by one."""
    n = 0
    while n * stride + dilation * (kernel - 1) < size:
        n += 1
    return n


def unfold(x: np.ndarray, kernel: Sequence[int], stride: Sequence[int],
           dilation: Sequence[int]) -> np.ndarray:
    k = len(kernel)
    batch, spatial = x.shape[: x.ndim - k], x.shape[x.ndim - k:]
    windows = [_count(*a) for a in zip(spatial, kernel, stride, dilation, strict=True)]
    shape = [*batch, *windows, *kernel]
    nb = len(batch)

    def value(i):
        b, w, t = i[:nb], i[nb: nb + k], i[nb + k:]
        src = tuple(wj * s + tj * d for wj, tj, s, d in zip(w, t, stride, dilation, strict=True))
        return float(x[b + src])

    return _fill(shape, x.dtype, value)


def fold(y: np.ndarray, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int],
         spatial: Sequence[int]) -> np.ndarray:
    """Scatter-add every window tap back to the position it was read from (float64 sums)."""
    k = len(kernel)
    nb = y.ndim - 2 * k
    batch = y.shape[:nb]
    acc = np.zeros((*batch, *spatial), dtype=np.float64)
    for i in positions(y.shape):
        b, w, t = i[:nb], i[nb: nb + k], i[nb + k:]
        dst = tuple(wj * s + tj * d for wj, tj, s, d in zip(w, t, stride, dilation, strict=True))
        acc[b + dst] += float(y[i])
    return acc


def concat(xs: Sequence[np.ndarray], axis: int) -> np.ndarray:
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    out = np.empty(shape, dtype=xs[0].dtype)
    offset = 0
    for x in xs:
        for i in positions(x.shape):
            dst = list(i)
            dst[axis] += offset
            out[tuple(dst)] = x[i]
        offset += x.shape[axis]
    return out


# ----------------------------------------------------------------------------------------------
# Reductions and contractions (sums in float64)


def _reduce(x: np.ndarray, axes: Sequence[int], keepdims: bool, start: float,
            combine: Callable[[float, float], float], dtype: np.dtype) -> np.ndarray:
    kept = [a for a in range(x.ndim) if a not in axes]
    out_shape = [1 if a in axes else x.shape[a] for a in range(x.ndim)] if keepdims else \
        [x.shape[a] for a in kept]
    out = np.empty(out_shape, dtype=dtype)
    for o in positions(out_shape):
        kept_idx = [o[a] for a in kept] if keepdims else list(o)
        acc = start
        for r in positions([x.shape[a] for a in axes]):
            src = [0] * x.ndim
            for a, v in zip(kept, kept_idx, strict=True):
                src[a] = v
            for a, v in zip(axes, r, strict=True):
                src[a] = v
            acc = combine(acc, float(x[tuple(src)]))
        out[o] = acc
    return out


def sum_(x: np.ndarray, axes: Sequence[int], keepdims: bool) -> np.ndarray:
    return _reduce(x, axes, keepdims, 0.0, lambda a, b: a + b, np.float64)


def max_(x: np.ndarray, axes: Sequence[int], keepdims: bool) -> np.ndarray:
    return _reduce(x, axes, keepdims, -INF, s_maximum, x.dtype)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.ndim == 3:
        return np.stack([matmul(a[i], b[i]) for i in range(a.shape[0])]) if a.shape[0] else \
            np.zeros((0, a.shape[1], b.shape[2]))
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), dtype=np.float64)
    for i in range(m):
        for j in range(n):
            acc = 0.0
            for t in range(k):
                acc += float(a[i, t]) * float(b[t, j])
            out[i, j] = acc
    return out


def _out_size(size: int, before: int, after: int, kernel: int, stride: int,
              dilation: int) -> int:
    return _count(size + before + after, kernel, stride, dilation)


def conv2d(x: np.ndarray, w: np.ndarray, stride: Sequence[int], padding: Sequence[int],
           dilation: Sequence[int], groups: int) -> np.ndarray:
    """Direct convolution: every output element as an explicit sum over its window; positions
    outside the input (in the zero padding) contribute nothing."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    top, left, bottom, right = padding
    sh, sw = stride
    dh, dw = dilation
    oh = _out_size(h, top, bottom, kh, sh, dh)
    ow = _out_size(wd, left, right, kw, sw, dw)
    og = o // groups
    out = np.zeros((n, o, oh, ow), dtype=np.float64)
    for b, f, y, xx in positions((n, o, oh, ow)):
        g = f // og
        acc = 0.0
        for ci, i, j in positions((cg, kh, kw)):
            iy = y * sh - top + i * dh
            ix = xx * sw - left + j * dw
            if 0 <= iy < h and 0 <= ix < wd:
                acc += float(x[b, g * cg + ci, iy, ix]) * float(w[f, ci, i, j])
        out[b, f, y, xx] = acc
    return out


def _pool(x: np.ndarray, kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int],
          reduce: Callable[[list[float]], float], dtype: np.dtype) -> np.ndarray:
    n, c, h, wd = x.shape
    kh, kw = kernel
    sh, sw = stride
    top, left, bottom, right = padding
    oh = _out_size(h, top, bottom, kh, sh, 1)
    ow = _out_size(wd, left, right, kw, sw, 1)
    out = np.zeros((n, c, oh, ow), dtype=dtype)
    for b, ch, y, xx in positions((n, c, oh, ow)):
        window = []
        for i, j in positions((kh, kw)):
            iy, ix = y * sh - top + i, xx * sw - left + j
            window.append(float(x[b, ch, iy, ix]) if 0 <= iy < h and 0 <= ix < wd else None)
        out[b, ch, y, xx] = reduce(window)
    return out


def maxpool2d(x: np.ndarray, kernel: Sequence[int], stride: Sequence[int],
              padding: Sequence[int]) -> np.ndarray:
    def largest(window):
        acc = -INF  # padding counts as -inf
        for v in window:
            acc = s_maximum(acc, -INF if v is None else v)
        return acc

    return _pool(x, kernel, stride, padding, largest, x.dtype)


def avgpool2d(x: np.ndarray, kernel: Sequence[int], stride: Sequence[int],
              padding: Sequence[int]) -> np.ndarray:
    def mean(window):
        # padding counts as zero; the divisor is always the full window size
        return sum(0.0 if v is None else v for v in window) / len(window)

    return _pool(x, kernel, stride, padding, mean, np.float64)


# ----------------------------------------------------------------------------------------------
# The backward ops, straight from the forward loops: each output element's window, visited as in
# conv2d / _pool above, sends its cotangent back to the inputs it read.


def _conv_taps(x_shape, w_shape, stride, padding, dilation, groups):
    """(b, f, y, xx, ci, i, j, iy, ix) for every in-bounds tap of every conv output element."""
    n, c, h, wd = x_shape
    o, cg, kh, kw = w_shape
    top, left, bottom, right = padding
    oh = _out_size(h, top, bottom, kh, stride[0], dilation[0])
    ow = _out_size(wd, left, right, kw, stride[1], dilation[1])
    og = o // groups
    for b, f, y, xx in positions((n, o, oh, ow)):
        for ci, i, j in positions((cg, kh, kw)):
            iy = y * stride[0] - top + i * dilation[0]
            ix = xx * stride[1] - left + j * dilation[1]
            if 0 <= iy < h and 0 <= ix < wd:
                yield b, f, y, xx, (f // og) * cg + ci, ci, i, j, iy, ix


def conv2d_backward_input(ct, w, stride, padding, dilation, groups, spatial):
    n, o = ct.shape[:2]
    cg = w.shape[1]
    dx = np.zeros((n, cg * groups, *spatial))
    for b, f, y, xx, c, ci, i, j, iy, ix in _conv_taps(dx.shape, w.shape, stride, padding,
                                                        dilation, groups):
        dx[b, c, iy, ix] += float(ct[b, f, y, xx]) * float(w[f, ci, i, j])
    return dx


def conv2d_backward_weight(x, ct, stride, padding, dilation, groups, kernel):
    o = ct.shape[1]
    dw = np.zeros((o, x.shape[1] // groups, *kernel))
    for b, f, y, xx, c, ci, i, j, iy, ix in _conv_taps(x.shape, dw.shape, stride, padding,
                                                        dilation, groups):
        dw[f, ci, i, j] += float(ct[b, f, y, xx]) * float(x[b, c, iy, ix])
    return dw


def _pool_windows(x_shape, kernel, stride, padding):
    """(b, ch, y, xx, taps) per pool output element; taps: in-bounds (iy, ix) or None (pad)."""
    n, c, h, wd = x_shape
    top, left, bottom, right = padding
    oh = _out_size(h, top, bottom, kernel[0], stride[0], 1)
    ow = _out_size(wd, left, right, kernel[1], stride[1], 1)
    for b, ch, y, xx in positions((n, c, oh, ow)):
        taps = []
        for i, j in positions(kernel):
            iy, ix = y * stride[0] - top + i, xx * stride[1] - left + j
            taps.append((iy, ix) if 0 <= iy < h and 0 <= ix < wd else None)
        yield b, ch, y, xx, taps


def maxpool2d_backward(x, ct, kernel, stride, padding):
    """Each window's cotangent split evenly among the taps holding its max (padding is -inf)."""
    dx = np.zeros(x.shape)
    for b, ch, y, xx, taps in _pool_windows(x.shape, kernel, stride, padding):
        values = [float(x[b, ch, t[0], t[1]]) if t else -INF for t in taps]
        top = max(values)
        winners = [t for t, v in zip(taps, values, strict=True) if v == top]
        for t in winners:
            if t:
                dx[b, ch, t[0], t[1]] += float(ct[b, ch, y, xx]) / len(winners)
    return dx


def avgpool2d_backward(ct, kernel, stride, padding, spatial):
    n, c = ct.shape[:2]
    dx = np.zeros((n, c, *spatial))
    for b, ch, y, xx, taps in _pool_windows(dx.shape, kernel, stride, padding):
        for t in taps:
            if t:
                dx[b, ch, t[0], t[1]] += float(ct[b, ch, y, xx]) / (kernel[0] * kernel[1])
    return dx
