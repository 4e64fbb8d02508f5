"""The numpy semantics of the indexing tape ops: take (out-of-range indices clamped) and
scatter (out-of-range updates dropped; set: the last update in row-major order wins)."""

from __future__ import annotations

import numpy as np

from tapeml.dialects import tape
from tapeml.interpreters.tape.elementwise import maximum, minimum
from tapeml.interpreters.tape.registry import semantics


def normalized(indices: np.ndarray, n: int) -> np.ndarray:
    """Each index as a position along an axis of length n: i + n for -n <= i < 0, i for
    0 <= i < n (outside [-n, n) as it comes: the caller clamps or drops those), as int64."""
    i = indices.astype(np.int64)
    return np.where(i < 0, i + n, i)


def in_range(indices: np.ndarray, n: int) -> np.ndarray:
    """-n <= i < n: the indices a scatter applies."""
    i = indices.astype(np.int64)
    return (i >= -n) & (i < n)


@semantics(tape.TakeOp)
def take(x: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    n = x.shape[axis]
    shape = (*x.shape[:axis], *indices.shape, *x.shape[axis + 1:])
    if n == 0:  # the verifier allows this only for an empty result
        return np.zeros(shape, x.dtype)
    return np.take(x, np.clip(normalized(indices, n), 0, n - 1), axis=axis)


_COMBINE = {
    "set": lambda old, new: new,
    "add": np.add,  # integers wrap (numpy's, its warnings off: see evaluate)
    "max": maximum,  # IEEE: NaN wins, -0 < +0
    "min": minimum,
}


@semantics(tape.ScatterOp)
def scatter(x: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, kind: str,
            axis: int) -> np.ndarray:
    n = x.shape[axis]
    out = x.copy()
    flat = indices.reshape(-1)
    # the updates with their index dims as one: (*before, positions, *after)
    rows = updates.reshape((*x.shape[:axis], flat.size, *x.shape[axis + 1:]))
    combine = _COMBINE[kind]
    before = (slice(None),) * axis
    # one index position after another, in row-major order: a later set overwrites an
    # earlier one, and adds accumulate in this order
    for p, (i, ok) in enumerate(zip(normalized(flat, n), in_range(flat, n), strict=True)):
        if not ok:
            continue  # out of range: dropped
        target = (*before, int(i))
        out[target] = combine(np.asarray(out[target]), np.asarray(rows[(*before, p)]))
    return out
