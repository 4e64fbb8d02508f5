"""Indexing as numpy spells it, and JAX's functional updates.

`x[index]` takes ints, slices (any step), `...`, None, integer arrays or tracers (any rank,
negative entries from the end), lists, and constant boolean masks, mixed as numpy allows and
giving numpy's result shape (advanced indices side by side put their broadcast dims where they
stand, apart they put them first). An int or slice out of range is an IndexError as in numpy;
an index *array*'s entries are not known when tracing, so they are clamped into range, as JAX's
gathers are (tape.take's rule).

    basic indices only           tape.slice (a negative step: a take of the reversed positions)
                                 and a reshape
    one index array, else `:`    one tape.take along that axis
    anything else                one tape.take of the flattened array at the flat positions,
                                 computed elementwise from every dim's index

`at(x)[index].set(v)` (and `x.at[...]` on tracers) is JAX's functional update: set, add, max,
min, or get; it is tape.scatter in the same three forms, and an update whose index is out of
range in any dim is dropped (JAX's rule). The updates are cast to x's dtype, as JAX does.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.tracing.ops.elementwise import add, bitwise_and, clip, less, multiply, where
from tapeml.tracing.ops.layout import axis_index, reshape
from tapeml.tracing.ops.promotion import (
    Array,
    astype,
    broadcast_to,
    is_weak,
    lift,
    plain,
    to_dtype,
    weakened,
)
from tapeml.tracing.trace import Tracer, at_user_line, bind, is_weak_scalar

__all__ = ["at", "flip", "getitem", "split", "take", "take_along_axis"]

_FULL = slice(None)


def _index_array(i: Any) -> Array | None:
    """An integer index array (or tracer) for `i`, None for a basic index; bool masks are
    turned into their positions by the caller."""
    if isinstance(i, Tracer) or (isinstance(i, np.ndarray | list) and not isinstance(i, bool)):
        a = i if isinstance(i, Tracer) else np.asarray(i)
        if a.dtype.kind == "i" or (a.dtype.kind == "u" and a.dtype.itemsize < 8) or \
                (isinstance(i, list) and a.size == 0):
            return lift(a.astype(np.int64) if isinstance(a, np.ndarray) and a.size == 0 else a)
        raise IndexError(at_user_line(f"an index array must hold integers, got {a.dtype}"))
    return None


def _parts(x: Array, index: Any, name: str) -> list[Any]:
    """The index as one entry per component: None, a slice, an int or an index array, with
    `...` expanded and constant boolean masks as their positions (numpy's nonzero), each
    mask checked against the dims of x it covers (`name`, the op, for the message)."""
    index = index if isinstance(index, tuple) else (index,)
    parts: list[Any] = []
    for i in index:
        if isinstance(i, Tracer) and i.dtype == np.bool_:
            raise IndexError(at_user_line(
                "a boolean mask tracer gives a result whose shape depends on its values; "
                "use tapeml.where(mask, x, fill) instead"))
        if isinstance(i, np.ndarray | list) and np.asarray(i).dtype == np.bool_ and \
                np.asarray(i).ndim > 0:
            parts.append(np.asarray(i))  # (its positions once `...` has its place: below)
        elif isinstance(i, slice) and i.step == 0:
            raise ValueError(at_user_line(f"{name}: slice step cannot be zero (indexing x of "
                                          f"shape {tuple(x.shape)} with {i})"))
        elif isinstance(i, bool | np.bool_):
            raise IndexError(at_user_line("a boolean scalar is not an index (numpy's adds a "
                                          "dim; write None and a where)"))
        elif i is None or i is Ellipsis or isinstance(i, slice | int | np.integer):
            parts.append(i)
        elif (a := _index_array(i)) is not None:
            parts.append(a)
        else:
            raise IndexError(at_user_line(f"tapeml cannot index with a {type(i).__name__}: "
                                          "ints, slices, ..., None, integer arrays and "
                                          "boolean masks only"))
    ellipses = [k for k, i in enumerate(parts) if i is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError(at_user_line("an index can only have a single ellipsis ('...')"))
    used = builtins.sum(_dims_covered(i) for i in parts)
    if used > x.ndim:
        raise IndexError(at_user_line(f"too many indices for an array of shape {tuple(x.shape)}"))
    at_ = ellipses[0] if ellipses else len(parts)
    return _mask_positions(x, [*parts[:at_], *(_FULL,) * (x.ndim - used), *parts[at_ + 1:]],
                           name)


def _is_mask(i: Any) -> bool:
    return isinstance(i, np.ndarray) and i.dtype == np.bool_


def _dims_covered(i: Any) -> int:
    """How many dims of x an index part indexes: a mask its rank, None and `...` none."""
    return i.ndim if _is_mask(i) else int(i is not None and i is not Ellipsis)


def _mask_positions(x: Array, parts: list[Any], name: str) -> list[Any]:
    """`parts` with each boolean mask as its positions, one index array per dim it covers.
    A mask's shape must be the shape of those dims (numpy's IndexError, and JAX's): its
    positions alone would silently pick other elements or repeat some."""
    out: list[Any] = []
    dim = 0
    for i in parts:
        if _is_mask(i):
            covered = tuple(x.shape[dim:dim + i.ndim])
            for k, (size, length) in enumerate(zip(covered, i.shape, strict=True)):
                if size != length:
                    raise IndexError(at_user_line(
                        f"{name}: boolean index did not match indexed array along axis "
                        f"{dim + k}; size of axis is {size} but size of corresponding boolean "
                        f"axis is {length} (a mask of shape {i.shape} indexing x of shape "
                        f"{tuple(x.shape)})"))
            out += [lift(p) for p in np.nonzero(i)]
        else:
            out.append(i)
        dim += _dims_covered(i)
    return out


def _checked_int(i: Any, size: int, dim: int) -> int:
    if not -size <= i < size:
        raise IndexError(at_user_line(f"index {i} is out of bounds for axis {dim} with size "
                                      f"{size}"))
    return int(i) % size


def _is_array(i: Any) -> bool:
    return isinstance(i, Tracer | np.ndarray)


@dataclass
class _Plan:
    """Where each indexed dim of x lands in the result: the result's shape without the Nones
    (`shape`), each dim's index (a range for slices and ints, an array for the advanced ones),
    the position of the advanced block and its shape, and the shape with the Nones."""

    dims: list[Any]
    positions: list[int]
    shape: list[int]
    advanced: tuple[int, ...]
    advanced_at: int
    with_nones: list[int]


def _plan(x: Array, parts: list[Any]) -> _Plan:
    """numpy's advanced indexing layout: ints count as advanced indices beside arrays."""
    has_arrays = any(_is_array(i) for i in parts)
    dims, kinds = [], []  # per x dim: its index, and "slice" or "advanced"
    d = 0
    for i in parts:
        if i is None:
            continue
        size = x.shape[d]
        if isinstance(i, slice):
            dims.append(range(*i.indices(size)))
            kinds.append("slice")
        elif _is_array(i):
            dims.append(i)
            kinds.append("advanced")
        else:
            k = _checked_int(i, size, d)
            dims.append(np.asarray(k, np.int64) if has_arrays else range(k, k + 1))
            kinds.append("advanced" if has_arrays else "int")
        d += 1
    flags = [("none" if i is None else kinds[builtins.sum(j is not None for j in parts[:k])])
             for k, i in enumerate(parts)]
    where_advanced = [k for k, f in enumerate(flags) if f == "advanced"]
    adjacent = bool(where_advanced) and where_advanced[-1] - where_advanced[0] + 1 == \
        len(where_advanced)
    try:
        block = tuple(np.broadcast_shapes(*(tuple(np.shape(v) if isinstance(v, np.ndarray)
                                                  else v.shape) for v, kind in
                                            zip(dims, kinds, strict=True)
                                            if kind == "advanced")))
    except ValueError:
        shapes = ", ".join(str(tuple(v.shape)) for v, k in zip(dims, kinds, strict=True)
                           if k == "advanced")
        raise IndexError(at_user_line(f"index arrays of shapes {shapes} cannot be broadcast "
                                      "together")) from None
    shape, positions, with_nones = [], [], []
    placed = not where_advanced or not adjacent
    if where_advanced and not adjacent:
        shape += block
        with_nones += block
    advanced_at = 0
    for k, f in enumerate(flags):
        if f == "none":
            with_nones.append(1)
        elif f == "slice":
            d = builtins.sum(flags[j] != "none" for j in range(k))
            positions.append(len(shape))
            shape.append(len(dims[d]))
            with_nones.append(len(dims[d]))
        elif f == "int":
            positions.append(-1)
        else:
            if not placed:
                advanced_at = len(shape)
                shape += block
                with_nones += block
                placed = True
            positions.append(-2)
    return _Plan(dims, positions, shape, block, advanced_at, with_nones)


def _flat_positions(x: Array, plan: _Plan, mode: str) -> tuple[Array, Array | None]:
    """The flat position in x of each element of the result (int64, of plan.shape), and for
    mode "drop" whether each is in range (None when all are, by construction)."""
    steps = np.cumprod((1, *x.shape[::-1][:-1]), dtype=np.int64)[::-1]
    rank = len(plan.shape)
    flat: Array = np.zeros((), np.int64)
    ok: Array | None = None
    for d, (index, pos) in enumerate(zip(plan.dims, plan.positions, strict=True)):
        if isinstance(index, range | list):  # static positions
            values = np.asarray(index, np.int64)
            shape = [1] * rank
            if pos >= 0:
                shape[pos] = len(values)
            term: Array = values.reshape(shape)
        else:
            n = x.shape[d]
            i = astype(broadcast_to(index, plan.advanced), np.int64)
            i = where(less(i, 0), add(i, n), i)
            if mode == "clamp":
                i = clip(i, 0, n - 1)
            else:
                inside = bitwise_and(less(-1, i), less(i, n))
                ok = inside if ok is None else bitwise_and(ok, inside)
            a = plan.advanced_at
            term = reshape(i, [1] * a + list(plan.advanced) + [1] * (rank - a - len(plan.advanced)))
        flat = add(flat, multiply(term, int(steps[d])))
    return broadcast_to(flat, plan.shape), None if ok is None else broadcast_to(
        reshape(ok, [1] * plan.advanced_at + list(plan.advanced) +
                [1] * (rank - plan.advanced_at - len(plan.advanced))), plan.shape)


def _single_axis(parts: list[Any]) -> int | None:
    """The axis of the one index array when every other part is `:`; else None."""
    arrays = [k for k, i in enumerate(parts) if _is_array(i)]
    if len(arrays) != 1 or any(i != _FULL for k, i in enumerate(parts) if k != arrays[0]):
        return None
    return arrays[0]


_BASIC = frozenset((int, slice, type(None), type(Ellipsis)))


def getitem(x: Any, index: Any) -> Array:
    """numpy's x[index] (see the module doc)."""
    if plain(x) and (type(index) in _BASIC or type(index) is tuple
                     and all(type(i) in _BASIC for i in index)):
        try:  # eager, ints, slices and None: numpy's basic indexing is the semantics
            return np.asarray(x[index])
        except (IndexError, TypeError, ValueError):  # said below, with the user's line
            pass
    x = lift(x)
    parts = _parts(x, index, "getitem")
    if (axis := _single_axis(parts)) is not None:
        return weakened(bind(tape.TakeOp, x, parts[axis], axis=axis), is_weak(x))
    if not any(_is_array(i) for i in parts):
        return _basic(x, parts)
    plan = _plan(x, parts)
    flat, _ = _flat_positions(x, plan, "clamp")
    out = bind(tape.TakeOp, reshape(x, (-1,)), flat, axis=0)
    return weakened(reshape(out, plan.with_nones), is_weak(x))


def _basic(x: Array, parts: list[Any]) -> Array:
    """Ints, slices and None: a tape.slice, a take per negative-step slice, a reshape."""
    start, stop, step, shape, reversed_dims = [], [], [], [], []
    dim = 0
    for i in parts:
        if i is None:
            shape.append(1)
            continue
        size = x.shape[dim]
        if isinstance(i, slice):
            positions = range(*i.indices(size))
            if positions.step < 0:
                reversed_dims.append(dim)
                positions = positions[::-1]
            start.append(positions.start if positions else 0)
            stop.append(positions[-1] + 1 if positions else 0)
            step.append(positions.step)
            shape.append(len(positions))
        else:
            k = _checked_int(i, size, dim)
            start.append(k), stop.append(k + 1), step.append(1)
        dim += 1
    weak = is_weak(x)
    if (tuple(start), tuple(stop), tuple(step)) != ((0,) * x.ndim, tuple(x.shape), (1,) * x.ndim):
        x = bind(tape.SliceOp, x, start=tuple(start), stop=tuple(stop), step=tuple(step))
    for d in reversed_dims:
        n = x.shape[d]
        x = bind(tape.TakeOp, x, np.arange(n - 1, -1, -1, dtype=np.int64), axis=d)
    return weakened(reshape(x, shape), weak)


def take(x: Any, indices: Any, axis: int | None = None) -> Array:
    """numpy.take (x flattened when `axis` is None); out-of-range indices are clamped."""
    x = lift(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    axis = axis_index("take", axis, x.ndim, lambda: f"x of shape {tuple(x.shape)}")
    i = _index_array(indices) if not isinstance(indices, int | np.integer) else lift(
        np.asarray(indices, np.int64))
    if i is None:
        raise IndexError(at_user_line("take: indices must be integers"))
    return weakened(bind(tape.TakeOp, x, i, axis=axis), is_weak(x))


def take_along_axis(x: Any, indices: Any, axis: int) -> Array:
    """numpy.take_along_axis: out[..., j, ...] = x[..., indices[..., j, ...], ...] along `axis`,
    `indices` broadcast against x elsewhere; out-of-range indices are clamped."""
    x, indices = lift(x), _index_array(indices)
    if indices is None or indices.ndim != x.ndim:
        raise ValueError(at_user_line(f"take_along_axis: indices must be an integer array of "
                                      f"x's rank {x.ndim}"))
    axis = axis_index("take_along_axis", axis, x.ndim, lambda: f"x of shape {tuple(x.shape)}")
    off_axis = [1 if d == axis else n for d, n in enumerate(x.shape)]
    try:
        shape = list(np.broadcast_shapes(tuple(off_axis), tuple(indices.shape)))
    except ValueError:
        raise ValueError(at_user_line(f"take_along_axis: indices of shape "
                                      f"{tuple(indices.shape)} do not broadcast against x of "
                                      f"shape {tuple(x.shape)} off axis {axis}")) from None
    shape[axis] = indices.shape[axis]
    # every other dim d indexes itself (0 where x is broadcast along it)
    dims = [indices if d == axis else range(n) if x.shape[d] == n else [0] * n
            for d, n in enumerate(shape)]
    plan = _Plan(dims, [-2 if d == axis else d for d in range(x.ndim)], shape, tuple(shape), 0,
                 shape)
    flat, _ = _flat_positions(x, plan, "clamp")
    return weakened(bind(tape.TakeOp, reshape(x, (-1,)), flat, axis=0), is_weak(x))


class _Update:
    """`at(x)[index]`: the ops of JAX's `x.at[index]`."""

    def __init__(self, x: Array, index: Any) -> None:
        self.x, self.index = lift(x), index

    def get(self) -> Array:
        return getitem(self.x, self.index)

    def set(self, values: Any) -> Array:
        return self._scatter("set", values)

    def add(self, values: Any) -> Array:
        return self._scatter("add", values)

    def max(self, values: Any) -> Array:  # noqa: A003 - JAX's name
        return self._scatter("max", values)

    def min(self, values: Any) -> Array:  # noqa: A003 - JAX's name
        return self._scatter("min", values)

    def _scatter(self, kind: str, values: Any) -> Array:
        x = self.x
        parts = _parts(x, self.index, "at[...]")
        # a Python number as x's dtype, an int that does not fit an OverflowError (as x + it);
        # arrays cast, as JAX's
        values = to_dtype("at[...]", values, np.dtype(x.dtype)) if is_weak_scalar(values) \
            else astype(values, x.dtype)
        if (axis := _single_axis(parts)) is not None:
            shape = (*x.shape[:axis], *parts[axis].shape, *x.shape[axis + 1:])
            return weakened(bind(tape.ScatterOp, x, parts[axis], _updates(values, shape),
                                 kind=kind, axis=axis), is_weak(x))
        plan = _plan(x, parts)
        flat, ok = _flat_positions(x, plan, "drop")
        if ok is not None:
            flat = where(ok, flat, int(np.prod(x.shape, dtype=np.int64)))
        updates = reshape(_updates(values, plan.with_nones), plan.shape)
        out = bind(tape.ScatterOp, reshape(x, (-1,)), flat, updates, kind=kind, axis=0)
        return weakened(reshape(out, x.shape), is_weak(x))


def _updates(values: Array, shape: Any) -> Array:
    try:
        return broadcast_to(values, tuple(shape))
    except Exception:
        raise ValueError(at_user_line(f"at[...]: updates of shape {tuple(values.shape)} do "
                                      f"not broadcast to the indexed shape {tuple(shape)}")
                         ) from None


class _At:
    def __init__(self, x: Array) -> None:
        self.x = x

    def __getitem__(self, index: Any) -> _Update:
        return _Update(self.x, index)


def at(x: Any) -> _At:
    """JAX's `x.at`: `at(x)[index].set(v)` returns x with x[index] set to v (and .add, .max,
    .min, .get); tracers have it as `x.at[index]`."""
    return _At(x)


def flip(x: Any, axis: int | Sequence[int] | None = None) -> Array:
    """numpy.flip: the elements of each axis given (every axis: None) in reverse order."""
    x = lift(x)
    axes = range(x.ndim) if axis is None else axis if isinstance(axis, tuple | list) else [axis]
    listed = [axis_index("flip", a, x.ndim) for a in axes]
    flipped = set(listed)
    if len(flipped) != len(listed):
        raise ValueError(at_user_line(f"flip: repeated axis in {axis!r}"))
    return getitem(x, tuple(slice(None, None, -1) if a in flipped else slice(None)
                            for a in range(x.ndim)))


def split(x: Any, indices_or_sections: int | Sequence[int], axis: int = 0) -> list[Array]:
    """numpy.split: `x` cut along `axis` into that many equal parts (an int that does not
    divide the axis is numpy's ValueError), or before each of the sorted indices given."""
    x = lift(x)
    axis = axis_index("split", axis, x.ndim)
    size = x.shape[axis]
    if isinstance(indices_or_sections, int | np.integer):
        parts = int(indices_or_sections)
        if parts < 1 or size % parts:
            raise ValueError(at_user_line(f"split: {parts} parts do not divide axis {axis} of "
                                          f"{size} equally (numpy's rule)"))
        cuts = [size * i // parts for i in range(1, parts)]
    else:
        cuts = [int(i) for i in indices_or_sections]
    bounds = [0, *cuts, size]
    head = (slice(None),) * axis
    return [getitem(x, (*head, slice(lo, hi))) for lo, hi in zip(bounds, bounds[1:], strict=False)]
