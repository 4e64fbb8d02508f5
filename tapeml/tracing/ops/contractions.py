"""Contractions: numpy's matmul (batch dims broadcast) and dot, as tape.matmul."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.errors import ShapeError
from tapeml.tracing.ops.elementwise import multiply
from tapeml.tracing.ops.layout import reshape
from tapeml.tracing.ops.promotion import Array, broadcast_to, lift, promote
from tapeml.tracing.trace import at_user_line, bind

__all__ = ["dot", "matmul"]


def matmul(a: Any, b: Any) -> Array:
    """numpy.matmul: vectors are promoted and squeezed, batch dims broadcast."""
    a, b = lift(a), lift(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(at_user_line("matmul: operands must have at least one dim, got shapes "
                                      f"{tuple(a.shape)} and {tuple(b.shape)}"))
    (a, b), _ = promote("matmul", a, b)
    a2 = reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
    b2 = reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
    out = _matmul_nd(a2, b2)
    shape = list(tuple(out.shape))
    if b.ndim == 1:
        shape.pop(-1)
    if a.ndim == 1:
        shape.pop(-2 if b.ndim != 1 else -1)
    return reshape(out, shape)


def _matmul_nd(a: Array, b: Array) -> Array:
    if a.ndim == 2 and b.ndim == 2:
        return bind(tape.MatmulOp, a, b)
    if b.ndim == 2 and a.shape[-1] == b.shape[0]:
        # (..., m, k) @ (k, n): one rank-2 matmul over all rows
        rows = reshape(a, (-1, a.shape[-1]))
        return reshape(bind(tape.MatmulOp, rows, b), (*tuple(a.shape)[:-1], b.shape[1]))
    try:
        batch = np.broadcast_shapes(tuple(a.shape)[:-2], tuple(b.shape)[:-2])
    except ValueError:
        raise ShapeError(at_user_line(f"matmul: batch dims of {tuple(a.shape)} and "
                                      f"{tuple(b.shape)} cannot be broadcast together")) from None
    a = broadcast_to(a, (*batch, *tuple(a.shape)[-2:]))
    b = broadcast_to(b, (*batch, *tuple(b.shape)[-2:]))
    count = int(np.prod(batch, dtype=np.int64))
    out = bind(tape.MatmulOp, reshape(a, (count, *tuple(a.shape)[-2:])),
               reshape(b, (count, *tuple(b.shape)[-2:])))
    return reshape(out, (*batch, *tuple(out.shape)[-2:]))


def dot(a: Any, b: Any) -> Array:
    """numpy.dot for vectors and matrices (use matmul for batches)."""
    a, b = lift(a), lift(b)
    if a.ndim > 2 or b.ndim > 2:
        raise ShapeError(at_user_line(f"dot: operands must be rank 1 or 2, got shapes "
                                      f"{tuple(a.shape)} and {tuple(b.shape)} (use matmul for "
                                      "batches)"))
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    return matmul(a, b)


