"""Layout ops: reshape, transpose, pad, concatenate, stack, expand_dims, unfold and fold
(broadcast_to is promotion.py's). They keep their operand's dtype, and a weak operand's
weakness."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.errors import ShapeError
from tapeml.tracing.ops.promotion import (
    Array,
    is_weak,
    lift,
    plain,
    promote,
    to_dtype,
    weakened,
)
from tapeml.tracing.trace import at_user_line, bind

__all__ = ["concatenate", "expand_dims", "fold", "moveaxis", "pad", "pad2d", "reshape", "squeeze",
           "stack", "swapaxes", "transpose", "unfold"]


def _keep(x: Array, op: type[tape.TapeOp], **params: Any) -> Array:
    return weakened(bind(op, x, **params), is_weak(x))


def reshape(x: Any, shape: Sequence[int] | int) -> Array:
    """Row-major reshape; one dim may be -1."""
    if plain(x):  # eager: numpy's reshape is the semantics (a size mismatch: the error below)
        try:
            return x.reshape(shape)
        except (ValueError, TypeError):
            pass
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
        axes = {axis_index("squeeze", a, x.ndim, lambda: f"x of shape {tuple(x.shape)}")
                for a in (axis if isinstance(axis, tuple | list) else (axis,))}
        if any(x.shape[a] != 1 for a in axes):
            raise ValueError(at_user_line(f"squeeze: axis {axis} of an array of shape "
                                          f"{tuple(x.shape)} does not have size 1"))
    return reshape(x, [d for a, d in enumerate(x.shape) if a not in axes])


def transpose(x: Any, axes: Sequence[int] | None = None) -> Array:
    if plain(x) and axes is None:  # eager: numpy's transpose is the semantics
        return x.transpose()
    x = lift(x)
    axes = tuple(range(x.ndim))[::-1] if axes is None else tuple(axes)
    if axes == tuple(range(x.ndim)):
        return x
    return _keep(x, tape.PermuteOp, perm=axes)


def axis_index(name: str, axis: Any, ndim: int, of: Callable[[], str] | None = None) -> int:
    """`axis` of an array of `ndim` dims as a non-negative int, or numpy's errors for `name`:
    a TypeError for no int, a ShapeError (a ValueError, as numpy's AxisError) for an axis out
    of range, which says what has `ndim` dims where `of` does (made only on failure: "x of
    shape (2, 3)")."""
    if not isinstance(axis, int | np.integer) or isinstance(axis, bool | np.bool_):
        raise TypeError(at_user_line(f"{name}: an axis is an int, got {axis!r}"))
    if not -ndim <= axis < ndim:
        raise ShapeError(at_user_line(f"{name}: axis {axis} is out of bounds for an array of "
                                      f"{ndim} dims" + (f" ({of()})" if of else "")))
    return int(axis) % ndim


def swapaxes(x: Any, axis1: int, axis2: int) -> Array:
    """numpy.swapaxes: x with its axes axis1 and axis2 exchanged (a tape.permute)."""
    x = lift(x)
    perm = list(range(x.ndim))
    a, b = axis_index("swapaxes", axis1, x.ndim), axis_index("swapaxes", axis2, x.ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


def moveaxis(x: Any, source: int | Sequence[int], destination: int | Sequence[int]) -> Array:
    """numpy.moveaxis: the axes at `source` moved to `destination`, the others in their order
    (a tape.permute)."""
    x = lift(x)
    sources = list(source) if isinstance(source, tuple | list) else [source]
    targets = list(destination) if isinstance(destination, tuple | list) else [destination]
    if len(sources) != len(targets):
        raise ValueError(at_user_line(f"moveaxis: source {source!r} and destination "
                                      f"{destination!r} must name as many axes"))
    sources = [axis_index("moveaxis", a, x.ndim) for a in sources]
    targets = [axis_index("moveaxis", a, x.ndim) for a in targets]
    if len(set(sources)) != len(sources) or len(set(targets)) != len(targets):
        raise ValueError(at_user_line(f"moveaxis: repeated axis in {source!r} or "
                                      f"{destination!r}"))
    rest = iter(a for a in range(x.ndim) if a not in sources)
    at = dict(zip(targets, sources, strict=True))
    return transpose(x, [at[d] if d in at else next(rest) for d in range(x.ndim)])


def pad(x: Any, pad_width: Any, constant_values: float = 0.0) -> Array:
    """numpy.pad in constant mode: `pad_width` is an int, a (before, after) pair, or one pair
    per dim; negative amounts crop. Any dtype: `constant_values` is converted to x's, as
    numpy's (an int that does not fit is an OverflowError)."""
    x = lift(x)
    widths = _pad_widths(pad_width, x)
    dtype = np.dtype(x.dtype)
    if dtype.kind != "f" and isinstance(constant_values, float | np.floating) and \
            not np.isfinite(constant_values):
        raise ValueError(at_user_line(f"pad: a constant of {constant_values} is no {dtype} "
                                      "value"))
    value = float(constant_values) if dtype.kind == "f" else \
        to_dtype("pad", constant_values, dtype).item()
    if dtype.kind == "i" and abs(value) > 2**53:  # (tape.pad's value is an f64)
        raise ValueError(at_user_line(f"pad: a constant of {dtype} padding is at most 2**53 "
                                      f"in magnitude, got {value}"))
    return _keep(x, tape.PadOp, low=tuple(int(w) for w in widths[:, 0]),
                 high=tuple(int(w) for w in widths[:, 1]), value=float(value))


def _pad_widths(pad_width: Any, x: Array) -> np.ndarray:
    """`pad_width` as one (before, after) row per dim of x, numpy's broadcast; widths that do
    not broadcast so (3 pairs for 2 dims) are a ShapeError naming pad, not numpy's internal
    one."""
    try:
        return np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2))
    except ValueError:
        raise ShapeError(at_user_line(
            f"pad: pad widths {pad_width!r} do not fit x of shape {tuple(x.shape)}: give an "
            f"int, a (before, after) pair or {x.ndim} pairs, one per dim")) from None


def pad2d(x: Any, padding: Sequence[int], value: float) -> Array:
    """`pad` over the two spatial dims of an NCHW array: `padding` is (top, left, bottom, right)."""
    top, left, bottom, right = padding
    return pad(x, [(0, 0), (0, 0), (top, bottom), (left, right)], value)


def concatenate(xs: Sequence[Any], axis: int | None = 0) -> Array:
    """numpy.concatenate; the arrays promote to one dtype. With `axis=None` they are
    flattened first, as numpy's."""
    if len(xs) == 0:
        raise ValueError(at_user_line("concatenate: needs at least one array"))
    xs, weak = promote("concatenate", *xs)
    if axis is None:
        xs, axis = [reshape(x, (-1,)) for x in xs], 0
    if xs[0].ndim:  # (a 0-d array: tape.concat's rule says so)
        axis = axis_index("concatenate", axis, xs[0].ndim, lambda: _shapes(xs))
    return weakened(bind(tape.ConcatOp, *xs, axis=axis), weak)


def _shapes(xs: Sequence[Array]) -> str:
    """The arrays' shapes for a message: "shapes (2, 3), (3, 2)"."""
    return "shapes " + ", ".join(str(tuple(x.shape)) for x in xs)


def stack(xs: Sequence[Any], axis: int = 0) -> Array:
    """numpy.stack: arrays of one shape joined along a new `axis` of the result."""
    xs = [lift(x) for x in xs]
    if not xs:
        raise ValueError(at_user_line("stack: needs at least one array"))
    if any(tuple(x.shape) != tuple(xs[0].shape) for x in xs):
        raise ShapeError(at_user_line(f"stack: the arrays must have one shape, got "
                                      f"{_shapes(xs)}"))
    axis = axis_index("stack", axis, xs[0].ndim + 1,
                      lambda: f"the result of stacking {_shapes(xs)}")
    return concatenate([expand_dims(x, axis) for x in xs], axis=axis)


def expand_dims(x: Any, axis: int | Sequence[int]) -> Array:
    """numpy.expand_dims: x with a dim of size 1 at each `axis` (an int or a tuple of ints) of
    the result."""
    x = lift(x)
    given = list(axis) if isinstance(axis, tuple | list) else [axis]
    ndim = x.ndim + len(given)

    def result() -> str:
        return f"the result: x of shape {tuple(x.shape)} and {len(given)} new " + \
            ("dim" if len(given) == 1 else "dims")

    axes = [axis_index("expand_dims", a, ndim, result) for a in given]
    if len(set(axes)) != len(axes):
        raise ValueError(at_user_line(f"expand_dims: repeated axis in {axis!r}"))
    rest = iter(x.shape)
    return reshape(x, [1 if d in axes else next(rest) for d in range(ndim)])


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
