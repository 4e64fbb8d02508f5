"""Arrays made from a shape: full, zeros, ones and their _like forms, arange and iota, one_hot,
tril and triu. Inside a trace, positions come from tape.iota and fills are one scalar constant
broadcast, so a causal mask or a one-hot encoding is a few elementwise ops, not a constant of
its whole size."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.tracing.ops.elementwise import add, equal, less_equal, multiply, where
from tapeml.tracing.ops.layout import axis_index, expand_dims
from tapeml.tracing.ops.promotion import (
    Array,
    astype,
    broadcast_to,
    lift,
    user_dtype,
    user_shape,
)
from tapeml.tracing.trace import Tracer, at_user_line, bind

__all__ = ["arange", "full", "full_like", "iota", "one_hot", "ones", "ones_like", "tril",
           "triu", "zeros", "zeros_like"]

Shape = Sequence[int] | int


def full(shape: Shape, fill_value: Any, dtype: Any = None) -> Array:
    """numpy.full: a new array, writable as numpy's (a constant when a traced function uses
    it); a traced `fill_value` (jnp.full's) gives a tracer, it broadcast to `shape`. Without
    `dtype`, a Python float gives float32 and an int int64, as tapeml takes them
    (promotion.py)."""
    shape = user_shape("full", shape)
    if isinstance(fill_value, Tracer):
        return broadcast_to(fill_value if dtype is None else
                            astype(fill_value, user_dtype("full", dtype)), shape)
    value = lift(fill_value) if dtype is None else \
        np.asarray(fill_value, dtype=user_dtype("full", dtype))
    return np.array(np.broadcast_to(value, shape), order="C")  # (the view is read-only)


def zeros(shape: Shape, dtype: Any = np.float32) -> np.ndarray:
    return full(shape, 0, None if dtype is None else user_dtype("zeros", dtype))


def ones(shape: Shape, dtype: Any = np.float32) -> np.ndarray:
    return full(shape, 1, None if dtype is None else user_dtype("ones", dtype))


def full_like(x: Any, fill_value: Any, dtype: Any = None) -> Array:
    """An array shaped like `x` holding `fill_value` (of x's dtype unless `dtype` says). Inside
    a trace it is one scalar constant broadcast, not a constant of x's whole size."""
    x = lift(x)
    dtype = x.dtype if dtype is None else user_dtype("full_like", dtype)
    if isinstance(fill_value, Tracer):  # (jnp.full_like's traced fill)
        return broadcast_to(astype(fill_value, dtype), x.shape)
    value = np.asarray(fill_value, dtype=dtype)
    if not isinstance(x, Tracer):  # eager: a new array, writable as numpy's
        return np.array(np.broadcast_to(lift(value), x.shape), order="C")
    return broadcast_to(Tracer(x.trace.operand(value), x.trace), x.shape)


def zeros_like(x: Any, dtype: Any = None) -> Array:
    return full_like(x, 0, None if dtype is None else user_dtype("zeros_like", dtype))


def ones_like(x: Any, dtype: Any = None) -> Array:
    return full_like(x, 1, None if dtype is None else user_dtype("ones_like", dtype))


def iota(shape: Shape, axis: int = 0, dtype: Any = np.int64) -> Array:
    """Each element's index along `axis` (jax.lax.broadcasted_iota): tape.iota in a trace."""
    return bind(tape.IotaOp, shape=user_shape("iota", shape), axis=axis,
                dtype=user_dtype("iota", dtype))


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None) -> Array:
    """numpy.arange: ints give int64, a float bound float32 (tapeml's Python float), unless
    `dtype` says; the values are start + i * step, computed in float64 for floats."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError(at_user_line("arange: step must not be zero"))
    count = max(0, int(np.ceil((stop - start) / step)))
    floats = any(isinstance(v, float | np.floating) for v in (start, stop, step))
    dtype = user_dtype("arange", dtype or (np.float32 if floats else np.int64))
    if dtype.kind == "f" or floats:
        positions = iota(count, dtype=np.float64)
        return astype(add(multiply(positions, float(step)), float(start)), dtype)
    if dtype != np.bool_ and count:
        info = np.iinfo(dtype)
        for bound in (int(start), int(start) + (count - 1) * int(step)):
            if not info.min <= bound <= info.max:
                raise OverflowError(at_user_line(f"arange: {bound} does not fit in {dtype}"))
    return astype(add(multiply(iota(count, dtype=np.int64), int(step)), int(start)), dtype)


def one_hot(labels: Any, num_classes: int, dtype: Any = np.float32, axis: int = -1) -> Array:
    """jax.nn.one_hot: 1 where the class is the label, else 0, along a new `axis`; a label out
    of [0, num_classes) (negative ones too) gives a row of zeros."""
    dtype = user_dtype("one_hot", dtype)
    labels = lift(labels)
    if np.dtype(labels.dtype).kind not in "iu":
        raise TypeError(at_user_line(f"one_hot: labels must be integers, got {labels.dtype}"))
    axis = axis_index("one_hot", axis, labels.ndim + 1,
                      lambda: f"the result: labels of shape {tuple(labels.shape)} and a class "
                      "dim")
    shape = list(labels.shape)
    shape.insert(axis, num_classes)
    classes = iota(shape, axis=axis, dtype=labels.dtype)
    return astype(equal(expand_dims(labels, axis), classes), dtype)


def _triangle(x: Any, k: int, lower: bool, name: str) -> Array:
    x = lift(x)
    if x.ndim < 2:
        raise ValueError(at_user_line(f"{name}: x must have at least 2 dims, got shape "
                                      f"{tuple(x.shape)}"))
    rows, cols = x.shape[-2:]
    i, j = iota((rows, cols), 0), iota((rows, cols), 1)
    shifted = add(i, k) if k else i
    keep = less_equal(j, shifted) if lower else less_equal(shifted, j)
    return where(keep, x, False if np.dtype(x.dtype) == np.bool_ else 0)  # (keeps x's dtype)


def tril(x: Any, k: int = 0) -> Array:
    """numpy.tril: x with the elements above the k-th diagonal of its last two dims zeroed."""
    return _triangle(x, k, True, "tril")


def triu(x: Any, k: int = 0) -> Array:
    """numpy.triu: x with the elements below the k-th diagonal of its last two dims zeroed."""
    return _triangle(x, k, False, "triu")
