"""The reference semantics of every tape op, in numpy.

`SEMANTICS[Op](*arrays, **op.params)` computes an op's result. These functions are the single
source of each op's meaning: xDSL's interpreter runs them (`TapeFunctions`) and eager mode calls
them directly. They keep the element type (f32 in, f32 out) and never mutate their inputs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from tapeml.dialects import tape
from tapeml.dialects.base import TapeOp

Semantics = Callable[..., np.ndarray]
SEMANTICS: dict[type[TapeOp], Semantics] = {}


def semantics(*ops: type[TapeOp]) -> Callable[[Semantics], Semantics]:
    def register(fn: Semantics) -> Semantics:
        for op in ops:
            SEMANTICS[op] = fn
        return fn

    return register


def _elementwise(op: type[TapeOp], fn: Callable[..., Any]) -> None:
    SEMANTICS[op] = lambda *xs: np.asarray(fn(*xs))


# maximum and minimum are IEEE 754-2019's: NaN if either side is NaN, and -0 < +0. numpy's own
# tie rule is the platform's (on x86, np.maximum(+0.0, -0.0) is -0.0), LLVM's llvm.maximum and
# StableHLO's maximum are IEEE's; every stage computes this one.
def maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    zeros = (a == 0) & (b == 0)
    return np.where(zeros, a + b, np.maximum(a, b))  # -0 + -0 is -0; +0 beside either, +0


def minimum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    zeros = (a == 0) & (b == 0)
    return np.where(zeros, -(-a + -b), np.minimum(a, b))


def max_over(x: np.ndarray, axes: tuple[int, ...], keepdims: bool = False) -> np.ndarray:
    """The IEEE maximum of `x` over `axes`: NaN if any is NaN, +0 if the largest are zeros of
    both signs (np.max keeps whichever zero its order meets first)."""
    top = np.max(x, axis=axes, keepdims=keepdims)
    zero = top == 0
    if not np.any(zero):
        return np.asarray(top)
    positive = np.any((x == 0) & ~np.signbit(x), axis=axes, keepdims=keepdims)
    return np.asarray(np.where(zero & positive, np.zeros((), x.dtype), top))


for _op, _fn in {
    tape.AddOp: np.add,
    tape.SubOp: np.subtract,
    tape.MulOp: np.multiply,
    tape.DivOp: np.divide,
    tape.MaximumOp: maximum,
    tape.MinimumOp: minimum,
    # numpy takes a fast path (x*x, sqrt, ...) for some exponents given as a broadcast scalar;
    # contiguous operands pin pow to its general algorithm, whatever the layout
    tape.PowOp: lambda x, y: np.power(np.require(x, requirements="C"),
                                      np.require(y, requirements="C")),
    tape.NegOp: np.negative,
    tape.ExpOp: np.exp,
    tape.LogOp: np.log,
    tape.TanhOp: np.tanh,
    tape.SqrtOp: np.sqrt,
    tape.SigmoidOp: lambda x: 1 / (1 + np.exp(-x)),
    tape.ReluOp: lambda x: maximum(x, np.zeros_like(x)),
}.items():
    _elementwise(_op, _fn)

_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
            "eq": np.equal, "ne": np.not_equal}


@semantics(tape.CmpOp)
def cmp(lhs: np.ndarray, rhs: np.ndarray, *, predicate: str) -> np.ndarray:
    return np.asarray(_COMPARE[predicate](lhs, rhs))


@semantics(tape.SelectOp)
def select(cond: np.ndarray, on_true: np.ndarray, on_false: np.ndarray) -> np.ndarray:
    return np.where(cond, on_true, on_false)


@semantics(tape.ConstantOp)
def constant(*, value: np.ndarray) -> np.ndarray:
    return np.array(value)


@semantics(tape.CastOp)
def cast(x: np.ndarray, *, dtype: Any) -> np.ndarray:
    return x.astype(dtype)


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


@semantics(tape.SumOp)
def sum_(x: np.ndarray, *, axes: Sequence[int], keepdims: bool) -> np.ndarray:
    return np.asarray(np.sum(x, axis=tuple(axes), keepdims=keepdims))


@semantics(tape.MaxOp)
def max_(x: np.ndarray, *, axes: Sequence[int], keepdims: bool) -> np.ndarray:
    return max_over(x, tuple(axes), keepdims)


@semantics(tape.MatmulOp)
def matmul(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return np.matmul(lhs, rhs)


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


@semantics(tape.FusedOp)
def fused(*inputs: np.ndarray, body: Any) -> np.ndarray:
    """The body's ops, each on whole arrays: the same numpy calls as the ops it fused."""
    shape = np.broadcast_shapes(*(x.shape for x in inputs))
    env = {arg: np.broadcast_to(x, shape) for arg, x in zip(body.args, inputs, strict=True)}
    for op in body.ops:
        if isinstance(op, tape.YieldOp):
            return np.ascontiguousarray(np.broadcast_to(env[op.value], shape))
        env[op.results[0]] = evaluate(type(op), *(env[o] for o in op.operands), **op.params)
    raise AssertionError("a verified tape.fused body ends in tape.yield")


def evaluate(op_type: type[TapeOp], *arrays: np.ndarray, **params: Any) -> np.ndarray:
    """Compute one op on arrays, under IEEE semantics (no numpy warnings for inf/nan)."""
    with np.errstate(all="ignore"):
        return np.asarray(SEMANTICS[op_type](*arrays, **params))  # rank 0 stays an array


def _run(op_type: type[TapeOp]) -> Callable[..., tuple[np.ndarray]]:
    def run(self: InterpreterFunctions, interpreter: Interpreter, op: TapeOp, args: tuple):
        return (evaluate(op_type, *args, **op.params),)

    run.__name__ = f"run_{op_type.name.removeprefix('tape.')}"
    return run


TapeFunctions = register_impls(
    type(
        "TapeFunctions",
        (InterpreterFunctions,),
        {f"run_{op.name.removeprefix('tape.')}": impl(op)(_run(op)) for op in SEMANTICS},
    )
)
TapeFunctions.__doc__ = "xDSL interpreter implementations of the tape ops (see SEMANTICS)."
