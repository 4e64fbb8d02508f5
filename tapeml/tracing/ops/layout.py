"""Layout ops: reshape, transpose, pad, concatenate, stack, expand_dims, unfold and fold
(broadcast_to is promotion.py's). They keep their operand's dtype, and a weak operand's
weakness."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.tracing.ops.promotion import (
    Array,
    broadcast_to,
    is_weak,
    lift,
    promote,
    weakened,
)
from tapeml.tracing.trace import Tracer, at_user_line, bind

__all__ = ["concatenate", "expand_dims", "fold", "full", "full_like", "ones", "ones_like", "pad",
           "pad2d", "reshape", "squeeze", "stack", "transpose", "unfold", "zeros", "zeros_like"]


def _keep(x: Array, op: type[tape.TapeOp], **params: Any) -> Array:
    return weakened(bind(op, x, **params), is_weak(x))


def reshape(x: Any, shape: Sequence[int] | int) -> Array:
    """Row-major reshape; one dim may be -1."""
    x = lift(x)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if tuple(x.shape) == shape:
        return x
    return _keep(x, tape.ReshapeOp, shape=shape)


def squeeze(x: Any, axis: int | Sequence[int] | None = None) -> Array:
    """numpy.squeeze: drop the size-1 dims (`axis` names which; each must have size 1)."""
    x = lift(x)
    if axis is None:
        axes = {a for a, d in enumerate(x.shape) if d == 1}
    else:
        axes = {a % x.ndim if -x.ndim <= a < x.ndim else _bad_axis(a, x)
                for a in ((axis,) if isinstance(axis, int | np.integer) else axis)}
        if any(x.shape[a] != 1 for a in axes):
            raise ValueError(at_user_line(f"squeeze: axis {axis} of an array of shape "
                                          f"{tuple(x.shape)} does not have size 1"))
    return reshape(x, [d for a, d in enumerate(x.shape) if a not in axes])


def _bad_axis(axis: int, x: Array) -> int:
    raise ValueError(at_user_line(f"axis {axis} is out of bounds for an array of rank {x.ndim}"))


def full(shape: Sequence[int] | int, fill_value: Any, dtype: Any = None) -> np.ndarray:
    """numpy.full: an array (a constant when a traced function uses it). Without `dtype`, a
    Python float gives float32 and an int int64, as tapeml takes them (promotion.py)."""
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    return np.broadcast_to(lift(fill_value) if dtype is None else
                           np.asarray(fill_value, dtype=dtype), shape)


def zeros(shape: Sequence[int] | int, dtype: Any = np.float32) -> np.ndarray:
    return full(shape, 0, dtype)


def ones(shape: Sequence[int] | int, dtype: Any = np.float32) -> np.ndarray:
    return full(shape, 1, dtype)


def full_like(x: Any, fill_value: Any, dtype: Any = None) -> Array:
    """An array shaped like `x` holding `fill_value` (of x's dtype unless `dtype` says). Inside
    a trace it is one scalar constant broadcast, not a constant of x's whole size."""
    x = lift(x)
    value = np.asarray(fill_value, dtype=x.dtype if dtype is None else dtype)
    if isinstance(x, Tracer):
        value = Tracer(x.trace.operand(value), x.trace)
    return broadcast_to(value, x.shape)


def zeros_like(x: Any, dtype: Any = None) -> Array:
    return full_like(x, 0, dtype)


def ones_like(x: Any, dtype: Any = None) -> Array:
    return full_like(x, 1, dtype)


def transpose(x: Any, axes: Sequence[int] | None = None) -> Array:
    x = lift(x)
    axes = tuple(range(x.ndim))[::-1] if axes is None else tuple(axes)
    if axes == tuple(range(x.ndim)):
        return x
    return _keep(x, tape.PermuteOp, perm=axes)


def pad(x: Any, pad_width: Any, constant_values: float = 0.0) -> Array:
    """numpy.pad in constant mode: `pad_width` is an int, a (before, after) pair, or one pair
    per dim; negative amounts crop."""
    x = lift(x)
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2))
    return _keep(x, tape.PadOp, low=tuple(int(w) for w in widths[:, 0]),
                 high=tuple(int(w) for w in widths[:, 1]), value=float(constant_values))


def pad2d(x: Any, padding: Sequence[int], value: float) -> Array:
    """`pad` over the two spatial dims of an NCHW array: `padding` is (top, left, bottom, right)."""
    top, left, bottom, right = padding
    return pad(x, [(0, 0), (0, 0), (top, bottom), (left, right)], value)


def concatenate(xs: Sequence[Any], axis: int = 0) -> Array:
    """numpy.concatenate; the arrays promote to one dtype."""
    xs, weak = promote("concatenate", *xs)
    return weakened(bind(tape.ConcatOp, *xs, axis=axis), weak)


def stack(xs: Sequence[Any], axis: int = 0) -> Array:
    xs = [lift(x) for x in xs]
    axis = axis + xs[0].ndim + 1 if axis < 0 else axis
    return concatenate([expand_dims(x, axis) for x in xs], axis=axis)


def expand_dims(x: Any, axis: int) -> Array:
    x = lift(x)
    shape = list(x.shape)
    axis = axis + len(shape) + 1 if axis < 0 else axis
    shape.insert(axis, 1)
    return reshape(x, shape)


def unfold(x: Any, kernel: Sequence[int], stride: Sequence[int] | None = None,
           dilation: Sequence[int] | None = None) -> Array:
    """Sliding windows over the trailing len(kernel) dims: (*batch, *windows, *kernel)."""
    k = len(kernel)
    return _keep(lift(x), tape.UnfoldOp, kernel=tuple(kernel),
                 stride=tuple(stride or (1,) * k), dilation=tuple(dilation or (1,) * k))


def fold(x: Any, spatial: Sequence[int], kernel: Sequence[int],
         stride: Sequence[int] | None = None, dilation: Sequence[int] | None = None) -> Array:
    """The adjoint of `unfold`: sums windows back onto spatial dims of size `spatial`."""
    k = len(kernel)
    return _keep(lift(x), tape.FoldOp, kernel=tuple(kernel), stride=tuple(stride or (1,) * k),
                 dilation=tuple(dilation or (1,) * k), spatial=tuple(spatial))
