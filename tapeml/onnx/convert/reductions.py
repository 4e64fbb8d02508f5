"""ONNX's reductions, softmaxes, scans and contractions."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tapeml.onnx.convert import axis_of, converts, ints, known, present
from tapeml.onnx.graph import Node
from tapeml.tracing import ops

_AXES_INPUT_SINCE = {"ReduceSum": 13}
"""The opset from which `axes` is an input, not an attribute (18 for the others)."""


def _reduction(node: Node, ins: list[Any]) -> tuple[Any, tuple[int, ...] | None, bool]:
    """The input, the axes to reduce (None: the input is returned as it is) and keepdims."""
    x = ins[0]
    rank = len(x.shape)
    if node.opset < _AXES_INPUT_SINCE.get(node.op_type, 18):
        axes = node.attr("axes")
    else:
        axes = ints(node, ins[1], "axes") if len(ins) > 1 and present(ins[1]) else None
    keepdims = bool(node.attr("keepdims", 1))
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return x, None, keepdims
        axes = range(rank)
    axes = tuple(sorted({axis_of(node, a, rank) for a in axes}))
    return x, axes, keepdims


def _same(x: Any) -> Any:
    return x


def _reduce(fn: Any, empty: float | None = None, unreduced: Any = _same) -> Any:
    """A reduction; over an empty axis, `empty` (a max's -inf) where there is no identity.
    `unreduced` is what it computes where noop_with_empty_axes reduces no axis: ONNX defines
    ReduceSumSquare, ReduceL1, ReduceL2 and ReduceLogSum as functions of ReduceSum, so their
    elementwise part still applies (x * x, |x|, sqrt(x * x), log x)."""
    def convert(node: Node, ins: list[Any]) -> Any:
        x, axes, keepdims = _reduction(node, ins)
        if axes is None:
            return unreduced(x)
        if empty is not None and any(x.shape[a] == 0 for a in axes):
            shape = [1 if a in axes else d for a, d in enumerate(x.shape)
                     if keepdims or a not in axes]
            return np.full(shape, _extreme(x.dtype, empty), dtype=x.dtype)
        if x.dtype == np.bool_ and fn in (_max, _min):  # booleans: any and all
            return ops.astype(fn(ops.astype(x, np.int32), axes, keepdims), np.bool_)
        return fn(x, axes, keepdims)
    return convert


def _extreme(dtype: np.dtype, value: float) -> Any:
    """`value` (+-inf) in `dtype`: the type's own extreme for integers and booleans."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return value
    if dtype == np.bool_:
        return value > 0
    return np.iinfo(dtype).min if value < 0 else np.iinfo(dtype).max


def _max(x: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
    return ops.max(x, axis=axes, keepdims=keepdims)


def _min(x: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
    return ops.min(x, axis=axes, keepdims=keepdims)


def _mean(x: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
    """Integers average in float64 and truncate back (ONNX's reference)."""
    out = ops.mean(x, axis=axes, keepdims=keepdims)
    return out if np.dtype(x.dtype).kind == "f" else ops.astype(out, x.dtype)


def _sum_square(x: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
    return ops.sum(ops.multiply(x, x), axis=axes, keepdims=keepdims)


def _prod(x: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
    """The reduced axes moved last as one, then halves multiplied pairwise (log2 of its length
    multiplies; an odd length padded with a 1): a tree of products, as a parallel reduction
    would order them."""
    if isinstance(x, np.ndarray):  # (a product of shapes: folds)
        return np.prod(x, axis=axes, keepdims=keepdims).astype(x.dtype)
    rank = len(x.shape)
    kept = [a for a in range(rank) if a not in axes]
    length = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    y = ops.reshape(ops.transpose(x, (*kept, *axes)), (*(x.shape[a] for a in kept), length))
    if length == 0:
        y = ops.full_like(ops.sum(y, axis=-1, keepdims=True), 1)
    while y.shape[-1] > 1:
        half = -(-y.shape[-1] // 2)
        if y.shape[-1] % 2:
            one = np.ones((*y.shape[:-1], 1), dtype=y.dtype)
            y = ops.concatenate([y, one], axis=-1)
        y = ops.multiply(ops.getitem(y, (..., slice(0, half))),
                         ops.getitem(y, (..., slice(half, None))))
    shape = [1 if a in axes else d for a, d in enumerate(x.shape) if keepdims or a not in axes]
    return ops.reshape(y, tuple(shape))


converts("ReduceMax", static=(1,))(_reduce(_max, -np.inf))
converts("ReduceMin", static=(1,))(_reduce(_min, np.inf))
converts("ReduceLogSumExp", static=(1,))(
    _reduce(lambda x, a, k: ops.logsumexp(x, axis=a, keepdims=k), -np.inf))
for _name, _fn, _unreduced in (
        ("ReduceSum", lambda x, a, k: ops.sum(x, axis=a, keepdims=k), _same),
        ("ReduceMean", _mean, _same),
        ("ReduceSumSquare", _sum_square, lambda x: ops.multiply(x, x)),
        ("ReduceL1", lambda x, a, k: ops.sum(ops.abs(x), axis=a, keepdims=k), ops.abs),
        ("ReduceL2", lambda x, a, k: ops.sqrt(_sum_square(x, a, k)),
         lambda x: ops.sqrt(ops.multiply(x, x))),
        ("ReduceLogSum", lambda x, a, k: ops.log(ops.sum(x, axis=a, keepdims=k)), ops.log),
        ("ReduceProd", _prod, _same)):
    converts(_name, static=(1,))(_reduce(_fn, unreduced=_unreduced))


def _arg(fn: Any) -> Any:
    def convert(node: Node, ins: list[Any]) -> Any:
        x = ins[0]
        axis = axis_of(node, node.attr("axis", 0), len(x.shape))
        keepdims = bool(node.attr("keepdims", 1))
        if not node.attr("select_last_index", 0):
            return fn(x, axis=axis, keepdims=keepdims)
        flipped = [slice(None)] * len(x.shape)
        flipped[axis] = slice(None, None, -1)
        first = fn(ops.getitem(x, tuple(flipped)), axis=axis, keepdims=keepdims)
        return ops.subtract(x.shape[axis] - 1, first)
    return convert


converts("ArgMax")(_arg(ops.argmax))
converts("ArgMin")(_arg(ops.argmin))


def _softmax(fn: Any) -> Any:
    """Before opset 13: over the input flattened to 2-D at `axis` (default 1); from 13: along
    `axis` (default -1)."""
    def convert(node: Node, ins: list[Any]) -> Any:
        x = ins[0]
        rank = len(x.shape)
        if node.opset >= 13:
            return fn(x, axis=axis_of(node, node.attr("axis", -1), rank))
        axis = axis_of(node, node.attr("axis", 1), rank) if rank else 0
        flat = ops.reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))
        return ops.reshape(fn(flat, axis=1), x.shape)
    return convert


converts("Softmax")(_softmax(ops.softmax))
converts("LogSoftmax")(_softmax(ops.log_softmax))


@converts("Hardmax")
def hardmax(node: Node, ins: list[Any]) -> Any:
    """1 at the first largest element along the axis (opset 13; before it, flattened as
    Softmax)."""
    def one(x: Any, axis: int) -> Any:
        top = ops.argmax(x, axis=axis, keepdims=True)
        positions = ops.reshape(np.arange(x.shape[axis], dtype=np.int64),
                                [x.shape[axis] if a == axis else 1 for a in range(len(x.shape))])
        return ops.astype(ops.equal(positions, top), x.dtype)
    return _softmax(one)(node, ins)


@converts("CumSum", static=(1,))
def cumsum(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    axis = axis_of(node, int(known(node, ins[1], "axis").reshape(-1)[0]), len(x.shape))
    reverse = bool(node.attr("reverse", 0))
    out = ops.cumsum(x, axis=axis, reverse=reverse)
    if node.attr("exclusive", 0) and x.shape[axis]:  # shifted by one along the axis, 0 first
        index = [slice(None)] * len(x.shape)
        index[axis] = slice(1, None) if reverse else slice(0, x.shape[axis] - 1)
        zero_shape = [1 if a == axis else d for a, d in enumerate(x.shape)]
        zero = np.zeros(zero_shape, dtype=out.dtype)
        kept = ops.getitem(out, tuple(index))
        out = ops.concatenate([kept, zero] if reverse else [zero, kept], axis=axis)
    return out


@converts("MatMul")
def matmul(node: Node, ins: list[Any]) -> Any:
    return ops.matmul(ins[0], ins[1])


@converts("Gemm")
def gemm(node: Node, ins: list[Any]) -> Any:
    """alpha * A' @ B' + beta * C, A' and B' transposed where transA, transB say; with
    beta = 0 C is not read (BLAS's rule, onnxruntime's: an infinite C adds nothing, not
    NaN as onnx.reference's 0 * inf)."""
    a, b = ins[0], ins[1]
    if node.attr("transA", 0):
        a = ops.transpose(a)
    if node.attr("transB", 0):
        b = ops.transpose(b)
    y = ops.matmul(a, b)
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    if alpha != 1.0:
        y = ops.multiply(y, alpha)
    if beta != 0.0 and len(ins) > 2 and present(ins[2]):
        c = ins[2] if beta == 1.0 else ops.multiply(ins[2], beta)
        y = ops.add(y, c)
    return y


@converts("Einsum")
def einsum(node: Node, ins: list[Any]) -> Any:
    equation = node.attr("equation").replace(" ", "")
    return ops.einsum(equation, *_ellipsis_broadcast(node, equation, ins))


def _ellipsis_broadcast(node: Node, equation: str, xs: list[Any]) -> list[Any]:
    """The operands with the dims `...` stands for broadcast to one shape, aligned from the
    right (ONNX's Einsum broadcasts them as numpy's does: a 1 against a 5; tapeml's einsum
    wants them equal)."""
    terms = equation.partition("->")[0].split(",")
    if "..." not in equation or len(terms) != len(xs):
        return xs  # (a miscount is einsum's error)
    # (an operand of fewer dims than its term has letters: einsum's error)
    spans = {k: _ellipsis_span(term, len(x.shape))
             for k, (term, x) in enumerate(zip(terms, xs, strict=True))
             if "..." in term and len(x.shape) >= len(term) - 3}
    under = [tuple(xs[k].shape[span]) for k, span in spans.items()]
    try:
        common = np.broadcast_shapes(*under)
    except ValueError:
        raise node.fail(f"the dims '...' stands for in {equation!r}, "
                        f"{', '.join(map(str, under))}, do not broadcast together") from None
    out = list(xs)
    for k, span in spans.items():
        shape = list(xs[k].shape)
        shape[span] = common[len(common) - (span.stop - span.start):]
        if tuple(shape) != tuple(xs[k].shape):
            out[k] = ops.broadcast_to(xs[k], tuple(shape))
    return out


def _ellipsis_span(term: str, rank: int) -> slice:
    """Where the dims `...` stands for are in an operand of `rank` dims named by `term`."""
    start = term.index("...")
    return slice(start, start + rank - (len(term) - 3))
