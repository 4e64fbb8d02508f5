"""Indexing: numpy's basic indexing (ints, slices, `...`, None) as tape.slice and reshape."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.tracing.ops.layout import reshape
from tapeml.tracing.ops.promotion import Array, is_weak, lift, weakened
from tapeml.tracing.trace import at_user_line, bind

__all__ = ["getitem"]


def getitem(x: Array, index: Any) -> Array:
    """Basic numpy indexing: ints, slices with a positive step, `...` and None."""
    index = index if isinstance(index, tuple) else (index,)
    for i in index:
        ok = i is None or i is Ellipsis or isinstance(i, slice) or (
            isinstance(i, int | np.integer) and not isinstance(i, bool | np.bool_))
        if not ok:
            raise IndexError(at_user_line(
                f"tapeml supports int, slice, ... and None indices, not {type(i).__name__} "
                "(no boolean masks or integer-array gathers; use tapeml.where)"))
    ellipses = [k for k, i in enumerate(index) if i is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError(at_user_line("an index can only have a single ellipsis ('...')"))
    used = builtins.sum(1 for i in index if i is not None and i is not Ellipsis)
    if used > x.ndim:
        raise IndexError(at_user_line(f"too many indices for an array of shape {tuple(x.shape)}"))
    at = ellipses[0] if ellipses else len(index)
    index = (*index[:at], *(slice(None),) * (x.ndim - used), *index[at + 1:])
    start, stop, step, shape = [], [], [], []
    dim = 0
    for i in index:
        if i is None:
            shape.append(1)
            continue
        size = x.shape[dim]
        if isinstance(i, slice):
            a, b, s = i.indices(size)
            if s < 1:
                raise IndexError(at_user_line("tapeml supports slices with a positive step only"))
            b = builtins.max(a, b)
            start.append(a), stop.append(b), step.append(s)
            shape.append(len(range(a, b, s)))
        else:
            if not -size <= i < size:
                raise IndexError(at_user_line(f"index {i} is out of bounds for axis {dim} with "
                                              f"size {size}"))
            i = int(i) % size
            start.append(i), stop.append(i + 1), step.append(1)
        dim += 1
    x = lift(x)
    if (tuple(start), tuple(stop), tuple(step)) != ((0,) * x.ndim, tuple(x.shape), (1,) * x.ndim):
        x = weakened(bind(tape.SliceOp, x, start=tuple(start), stop=tuple(stop),
                          step=tuple(step)), is_weak(x))
    return reshape(x, shape)


