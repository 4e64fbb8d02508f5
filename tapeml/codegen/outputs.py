"""The arrays a compiled program's call returns (`Outputs.new`): each a new array, but a large
one in memory the program has handed out before and its caller has since let go of.

A fresh large array is fresh pages: the program's first writes into it fault each page in (and
a process that frees and allocates arrays of a few MB between calls gets new pages from the
kernel each time: glibc gives large blocks back to it). W3's step beside numpy's, JAX's and
torch's in one process (bench/peers.py) faulted in its 2.6 MB of weight gradients on two calls
of five, 648 page faults costing 0.5-2 ms of a 6.5 ms call.

So an output of at least RECYCLED_BYTES is a view of a block the program keeps (up to KEPT per
output): a block is free again once no array refers to it, which its reference count tells
(every array made from it, views of views included, holds it: their `base`). A block still in
use is never written: the call takes another or a new one.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

RECYCLED_BYTES = 1 << 17
"""Outputs of at least this many bytes (32 pages) come from recycled blocks; smaller ones are
plain `np.empty` (W6's 16 elements: nothing added to the call)."""

KEPT = 2
"""Blocks kept per output: the arrays of this call and of the one before may both be alive
(a training loop holding last step's gradients) and still neither waits for a new block."""


def _free_references() -> int:
    """A block's reference count where only the local variable `block` refers to it (as
    `_recycled` sees it): measured, not assumed, so the interpreter's own counting is
    whatever it is."""
    pool = [np.empty(1, np.uint8)]
    block = pool.pop()
    return sys.getrefcount(block)


_FREE = _free_references()


class Outputs:
    """What a program's call returns: arrays of `specs`' (shape, dtype), newly made."""

    def __init__(self, specs: Sequence[tuple[tuple[int, ...], np.dtype]]) -> None:
        self.specs = [(shape, dtype, int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
                      for shape, dtype in specs]
        self.pools: list[list[np.ndarray] | None] = [
            [] if nbytes >= RECYCLED_BYTES else None for _, _, nbytes in self.specs]
        self.recycles = any(pool is not None for pool in self.pools)

    def new(self) -> tuple[np.ndarray, ...]:
        try:  # (free where nothing is raised: W6's call)
            if not self.recycles:
                return tuple([np.empty(shape, dtype) for shape, dtype, _ in self.specs])
            return tuple([np.empty(shape, dtype) if pool is None else
                          _recycled(pool, shape, dtype, nbytes) for (shape, dtype, nbytes), pool
                          in zip(self.specs, self.pools, strict=True)])
        except (MemoryError, ValueError):  # (numpy's ValueError past its largest array)
            shape, dtype, nbytes = max(self.specs, key=lambda spec: spec[2])
            raise MemoryError(f"a result of shape {shape} and dtype {np.dtype(dtype)} takes "
                              f"{nbytes:,} bytes, more than can be allocated here") from None


def _recycled(pool: list[np.ndarray], shape: tuple[int, ...], dtype: np.dtype,
              nbytes: int) -> np.ndarray:
    """An array of (shape, dtype) over a block of `pool` no array refers to, else a new block
    (kept in `pool` while it has room). A block is taken out of the pool (list.pop: atomic)
    while it is looked at and put back once an array refers to it, so two threads calling
    the program at once never take the same block."""
    for _ in range(len(pool)):
        try:
            block = pool.pop()
        except IndexError:  # another thread holds them
            break
        if sys.getrefcount(block) == _FREE:
            out = np.ndarray(shape, dtype, buffer=block)
            pool.insert(0, block)
            return out
        pool.insert(0, block)  # (in use: the next one, round the pool)
    block = np.empty(nbytes, np.uint8)
    out = np.ndarray(shape, dtype, buffer=block)
    if len(pool) < KEPT:
        pool.append(block)
    return out
