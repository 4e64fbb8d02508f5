"""Reductions and the composites over them: sum, max, min, mean, logsumexp, softmax,
log_softmax. Sums keep an integer dtype (as JAX's) and count booleans in int64 (as numpy's)."""

from __future__ import annotations

import builtins
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.errors import ShapeError
from tapeml.interpreters.tape import ieee
from tapeml.tracing.ops.creation import full
from tapeml.tracing.ops.elementwise import (
    add,
    clip,
    divide,
    exp,
    invert,
    log,
    multiply,
    negative,
    sqrt,
    stop_gradient,
    subtract,
)
from tapeml.tracing.ops.layout import reshape
from tapeml.tracing.ops.promotion import Array, astype, is_weak, lift, promote, weakened
from tapeml.tracing.trace import Tracer, at_user_line, bind, called_op

__all__ = ["all", "any", "argmax", "argmin", "cumsum", "log_softmax", "logsumexp", "max", "mean",
           "min", "softmax", "std", "sum", "var"]

Axis = int | Sequence[int] | None


def _axis_ok(a: Any) -> bool:
    return isinstance(a, int | np.integer) and not isinstance(a, bool | np.bool_)


def _axes(x: Array, axis: Axis, name: str | None = None) -> tuple[int, ...]:
    """`axis` as a tuple of ints in [0, x.ndim) (None: every axis). Anything else an int or a
    sequence of ints is a TypeError (numpy's rule: a bool or a float is no axis); an axis out
    of range, or one given twice, a ShapeError worded as tape.sum's. Either names the op the
    user called (the composite that reduces: softmax, logsumexp, ...; else `name`, by default
    the function asking)."""
    def op() -> str:
        return called_op(name or sys._getframe(2).f_code.co_name)

    if axis is None:
        return tuple(range(x.ndim))
    if _axis_ok(axis):
        axes: tuple[int, ...] = (axis,)
    elif isinstance(axis, tuple | list) and builtins.all(map(_axis_ok, axis)):
        axes = tuple(axis)
    else:
        raise TypeError(at_user_line(f"{op()}: axis must be an int, a tuple of ints or None, "
                                     f"got {axis!r}"))
    rank = x.ndim
    for a in axes:
        if not -rank <= a < rank:
            raise ShapeError(at_user_line(f"{op()}: axis {a} is out of range for {_type(x)}"))
    normal = tuple(int(a) % rank for a in axes)
    if len(set(normal)) != len(normal):
        raise ShapeError(at_user_line(f"{op()}: axes {axis} repeat an axis"))
    return normal


def _type(x: Array) -> Any:
    """x's tensor type, for a message."""
    return x.value.type if isinstance(x, Tracer) else tape.tensor_type(x.shape, x.dtype)


def _nonempty(name: str, x: Array, axes: tuple[int, ...]) -> None:
    """A max or min over an empty axis has no identity: a ShapeError naming the op called."""
    if not builtins.all(x.shape[a] for a in axes):
        raise ShapeError(at_user_line(f"{called_op(name)}: cannot take the {name} over an "
                                      f"empty axis of {_type(x)} (it has no identity)"))


def _reduce(op: type[tape.TapeOp], x: Array, axes: tuple[int, ...], keepdims: bool) -> Array:
    return weakened(bind(op, x, axes=axes, keepdims=keepdims), is_weak(x))


_NUMBERS = frozenset(map(np.dtype, (np.int32, np.int64, np.float32, np.float64)))
_EAGER = {tape.SumOp: ieee(tape.SumOp), tape.MaxOp: ieee(tape.MaxOp)}


def _at_once(op: type[tape.TapeOp], x: Any, axis: Axis, keepdims: bool) -> Array | None:
    """An eager reduction of a number array over all axes or one valid axis, at once (the
    checks `bind` makes, made here); None for anything else."""
    if type(x) is np.ndarray and x.dtype in _NUMBERS:
        if axis is None:
            axes = tuple(range(x.ndim))
        elif type(axis) is int and -x.ndim <= axis < x.ndim:
            axes = (axis % x.ndim,)
        else:
            return None
        if op is tape.SumOp or builtins.all(x.shape[a] for a in axes):  # max: no empty axis
            return _EAGER[op](x, axes=axes, keepdims=keepdims)
    return None


def sum(x: Any, axis: Axis = None, keepdims: bool = False) -> Array:  # noqa: A001
    if (out := _at_once(tape.SumOp, x, axis, keepdims)) is not None:
        return out
    x = lift(x)
    axes = _axes(x, axis, "sum")
    if np.dtype(x.dtype) == np.bool_:
        x = astype(x, np.int64)
    return _reduce(tape.SumOp, x, axes, keepdims)


def max(x: Any, axis: Axis = None, keepdims: bool = False) -> Array:  # noqa: A001
    """numpy.max; of booleans, whether any is True (and min whether all are), as numpy's."""
    if (out := _at_once(tape.MaxOp, x, axis, keepdims)) is not None:
        return out
    x = lift(x)
    axes = _axes(x, axis, "max")
    if np.dtype(x.dtype) == np.bool_:
        return astype(max(astype(x, np.int32), axis, keepdims), np.bool_)
    _nonempty("max", x, axes)
    return _reduce(tape.MaxOp, x, axes, keepdims)


def min(x: Any, axis: Axis = None, keepdims: bool = False) -> Array:  # noqa: A001
    """-max(-x) for floats (exact); ~max(~x) for integers, where -x would wrap at the minimum."""
    x = lift(x)
    _nonempty("min", x, _axes(x, axis, "min"))
    flip = negative if np.dtype(x.dtype).kind == "f" else invert
    return flip(max(flip(x), axis=axis, keepdims=keepdims))


def any(x: Any, axis: Axis = None, keepdims: bool = False) -> Array:  # noqa: A001
    """numpy.any: whether any element along `axis` is nonzero (NaN is); False over none."""
    return _logical(x, axis, keepdims, max, False)


def all(x: Any, axis: Axis = None, keepdims: bool = False) -> Array:  # noqa: A001
    """numpy.all: whether every element along `axis` is nonzero; True over none."""
    return _logical(x, axis, keepdims, min, True)


def _logical(x: Any, axis: Axis, keepdims: bool, reduce: Any, empty: bool) -> Array:
    """max (any) or min (all) of x as booleans; over an axis of no elements, `empty`."""
    x = astype(lift(x), np.bool_)
    axes = _axes(x, axis, "all" if empty else "any")
    if builtins.any(x.shape[a] == 0 for a in axes):
        shape = [1 if i in axes else d for i, d in enumerate(x.shape)] if keepdims else \
            [d for i, d in enumerate(x.shape) if i not in axes]
        return full(shape, empty, np.bool_)
    return reduce(x, axis=axis, keepdims=keepdims)


def _arg(op: type[tape.TapeOp], x: Any, axis: int | None, keepdims: bool) -> Array:
    x = lift(x)
    if axis is None:
        out = bind(op, reshape(x, (-1,)), axis=0, keepdims=False)
        return reshape(out, (1,) * x.ndim) if keepdims else out
    return bind(op, x, axis=_axis(x, axis, op.name.removeprefix("tape.")), keepdims=keepdims)


def _axis(x: Array, axis: Any, name: str) -> int:
    """One axis (argmax's, cumsum's) as `_axes` checks it: numpy's TypeError for a tuple."""
    if not _axis_ok(axis):
        raise TypeError(at_user_line(f"{called_op(name)}: axis must be an int or None, got "
                                     f"{axis!r}"))
    return _axes(x, axis, name)[0]


def argmax(x: Any, axis: int | None = None, keepdims: bool = False) -> Array:
    """numpy.argmax (int64): the first index of the largest element, of the first NaN if any;
    over the flattened array when `axis` is None."""
    return _arg(tape.ArgMaxOp, x, axis, keepdims)


def argmin(x: Any, axis: int | None = None, keepdims: bool = False) -> Array:
    """numpy.argmin (int64): the first index of the smallest element, of the first NaN if any."""
    return _arg(tape.ArgMinOp, x, axis, keepdims)


def cumsum(x: Any, axis: int | None = None, reverse: bool = False) -> Array:
    """numpy.cumsum, added in order (so floats equal numpy's bit for bit); integers keep their
    dtype and wrap, booleans count in int64; over the flattened array when `axis` is None.
    `reverse` sums from the end (jax.lax.cumsum's)."""
    x = lift(x)
    if np.dtype(x.dtype) == np.bool_:
        x = astype(x, np.int64)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    return weakened(bind(tape.CumsumOp, x, axis=_axis(x, axis, "cumsum"), reverse=reverse),
                    is_weak(x))


def mean(x: Any, axis: Axis = None, keepdims: bool = False) -> Array:
    """The float mean (integers are averaged in float64, as numpy does)."""
    (x,), weak = promote("mean", x, floating=True)
    count = int(np.prod([x.shape[a] for a in _axes(x, axis)], dtype=np.int64))
    return weakened(divide(sum(x, axis=axis, keepdims=keepdims), float(count)), weak)


def var(x: Any, axis: Axis = None, ddof: int = 0, keepdims: bool = False) -> Array:
    """numpy.var: the mean squared deviation from the mean, divided by N - ddof."""
    (x,), weak = promote("var", x, floating=True)
    deviation = subtract(x, mean(x, axis=axis, keepdims=True))
    count = int(np.prod([x.shape[a] for a in _axes(x, axis)], dtype=np.int64))
    return weakened(divide(sum(multiply(deviation, deviation), axis=axis, keepdims=keepdims),
                           float(count - ddof)), weak)


def std(x: Any, axis: Axis = None, ddof: int = 0, keepdims: bool = False) -> Array:
    """numpy.std: sqrt(var)."""
    return sqrt(var(x, axis=axis, ddof=ddof, keepdims=keepdims))


def logsumexp(x: Any, axis: Axis = None, keepdims: bool = False) -> Array:
    """log(sum(exp(x))) along `axis`, shifted by the max so that exp cannot overflow: -inf
    where every term is -inf, inf where one is inf, NaN where one is NaN (as JAX's and
    scipy's)."""
    (x,), weak = promote("logsumexp", x, floating=True)
    # an infinite max shifts by the largest finite value of its sign: -inf - -inf and
    # inf - inf would make the sum NaN
    big = float(np.finfo(x.dtype).max)
    top = stop_gradient(clip(_shift(x, axis), -big, big))  # (_SHIFT)
    out = add(log(sum(exp(subtract(x, top)), axis=axis, keepdims=True)), top)
    return weakened(out if keepdims else reshape(out, _reduced_shape(x, axis)), weak)


def _reduced_shape(x: Array, axis: Axis) -> tuple[int, ...]:
    axes = {a % x.ndim for a in _axes(x, axis)}
    return tuple(d for i, d in enumerate(x.shape) if i not in axes)


# (_SHIFT) logsumexp, softmax and log_softmax subtract the max before exp (so it cannot
# overflow) behind stop_gradient, as JAX's do: the result does not depend on the shift, so its
# exact derivative through the max is 0; differentiated anyway, the max cost the backward passes
# over the scores (ties shared out, a sum that rounds to about 0): the GPT step, 2 layers, one
# core, 2-3% of its time.


def _shift(x: Array, axis: Axis) -> Array:
    """x's max along `axis`, kept as dims of 1: the shift of (_SHIFT). Over an empty axis there
    is no max and nothing to shift: 0 (so, as JAX's, softmax and log_softmax of an empty axis
    are empty and logsumexp over one is log(0) = -inf)."""
    axes = _axes(x, axis, "max")
    if builtins.all(x.shape[a] for a in axes):
        return max(x, axis=axis, keepdims=True)
    return full([1 if i in axes else d for i, d in enumerate(x.shape)], 0, x.dtype)


def softmax(x: Any, axis: int = -1) -> Array:
    """Along the last axis one tape.softmax (its gradient one tape.softmax_backward, from the
    result alone); along another, the ops written out."""
    (x,), weak = promote("softmax", x, floating=True)
    rank = x.ndim
    if type(axis) is int and rank and -rank <= axis < rank and axis % rank == rank - 1 and \
            x.shape[-1] > 0:
        return weakened(bind(tape.SoftmaxOp, x), weak)
    e = exp(subtract(x, stop_gradient(_shift(x, axis))))  # (_SHIFT)
    return weakened(divide(e, sum(e, axis=axis, keepdims=True)), weak)


def log_softmax(x: Any, axis: int = -1) -> Array:
    (x,), weak = promote("log_softmax", x, floating=True)
    shifted = subtract(x, stop_gradient(_shift(x, axis)))  # (_SHIFT)
    return weakened(subtract(shifted, log(sum(exp(shifted), axis=axis, keepdims=True))), weak)
