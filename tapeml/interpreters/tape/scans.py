"""The numpy semantics of the ops along one axis: argmax and argmin (i64, numpy's ties and
NaNs), cumsum (in the input's type, in order) and iota."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.interpreters.tape.registry import semantics


@semantics(tape.ArgMaxOp)
def argmax(x: np.ndarray, *, axis: int, keepdims: bool) -> np.ndarray:
    return np.asarray(np.argmax(x, axis=axis, keepdims=keepdims), np.int64)


@semantics(tape.ArgMinOp)
def argmin(x: np.ndarray, *, axis: int, keepdims: bool) -> np.ndarray:
    return np.asarray(np.argmin(x, axis=axis, keepdims=keepdims), np.int64)


@semantics(tape.CumsumOp)
def cumsum(x: np.ndarray, *, axis: int, reverse: bool) -> np.ndarray:
    # np.cumsum adds one element after another (add.accumulate), in x's own type
    if reverse:
        return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=x.dtype), axis).copy()
    return np.cumsum(x, axis=axis, dtype=x.dtype)


@semantics(tape.IotaOp)
def iota(*, shape: Sequence[int], dtype: Any, axis: int) -> np.ndarray:
    along = [1] * len(shape)
    along[axis] = shape[axis]
    return np.broadcast_to(np.arange(shape[axis], dtype=dtype).reshape(along), shape).copy()
