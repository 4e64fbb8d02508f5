"""Contractions: numpy's matmul (batch dims broadcast), dot and einsum, as tape.matmul, of
floats or integers (wrapping around, as numpy's), and of booleans as numpy's (any of the
products)."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.errors import ShapeError
from tapeml.interpreters.tape import ieee
from tapeml.tracing.ops.elementwise import multiply, not_equal
from tapeml.tracing.ops.layout import reshape, transpose
from tapeml.tracing.ops.promotion import (
    Array,
    astype,
    broadcast_to,
    lift,
    promote,
    weakened,
)
from tapeml.tracing.ops.reductions import sum
from tapeml.tracing.trace import at_user_line, bind

__all__ = ["dot", "einsum", "matmul"]


_FLOATS = frozenset(map(np.dtype, (np.float32, np.float64)))
_eager_matmul = ieee(tape.MatmulOp)


def matmul(a: Any, b: Any) -> Array:
    """numpy.matmul: vectors are promoted and squeezed, batch dims broadcast."""
    if (type(a) is np.ndarray and type(b) is np.ndarray and a.ndim == 2 and b.ndim == 2
            and (dtype := a.dtype) in _FLOATS and dtype == b.dtype and a.shape[1] == b.shape[0]):
        return _eager_matmul(a, b)  # eager, nothing to promote or reshape: at once
    a, b = lift(a), lift(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(at_user_line("matmul: operands must have at least one dim, got shapes "
                                      f"{tuple(a.shape)} and {tuple(b.shape)}"))
    (a, b), weak = promote("matmul", a, b)
    if np.dtype(a.dtype) == np.bool_:
        return _any_of_products(matmul, (a, b), a.shape[-1])
    a2 = reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
    b2 = reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
    out = _matmul_nd(a2, b2)
    shape = list(tuple(out.shape))
    if b.ndim == 1:
        shape.pop(-1)
    if a.ndim == 1:
        shape.pop(-2 if b.ndim != 1 else -1)
    return weakened(reshape(out, shape), weak)


def _any_of_products(product: Any, xs: tuple[Array, ...], terms: int) -> Array:
    """A product of boolean operands as numpy's: True where any of an element's `terms`
    products is (the logical or of ands). The product of the operands as integers, wide
    enough to count the terms, is not 0 there."""
    wide = np.int32 if terms < 2**31 else np.int64
    return not_equal(product(*(astype(x, wide) for x in xs)), 0)


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




def einsum(subscripts: str, *operands: Any) -> Array:
    """numpy.einsum for one or two operands, as transposes, sums and one batched matmul:
    'bqd,bkd->bqk', 'ij,jk', 'bhqk,bhkd->bhqd', 'ii->' is not (no repeated index in an operand).
    Without '->' the output is the indices seen once, in alphabetical order, as numpy's; `...`
    stands for the same leading dims in every operand."""
    if len(operands) not in (1, 2):
        raise ValueError(at_user_line(f"einsum: one or two operands, got {len(operands)} (chain "
                                      "them: einsum of einsum)"))
    xs, weak = promote("einsum", *operands)
    ins, out = _parse_subscripts(subscripts, xs)
    if np.dtype(xs[0].dtype) == np.bool_:
        sizes = dict(zip("".join(ins), (d for x in xs for d in x.shape), strict=True))
        terms = int(np.prod([n for i, n in sizes.items() if i not in out], dtype=np.int64))
        return _any_of_products(lambda *ys: einsum(subscripts, *ys), tuple(xs), terms)
    sizes: dict[str, int] = {}
    for names, x in zip(ins, xs, strict=True):
        for name, size in zip(names, x.shape, strict=True):
            seen = sizes.setdefault(name, size)
            if seen != size and 1 not in (seen, size):
                raise ShapeError(at_user_line(f"einsum: index {name!r} is {seen} in one "
                                              f"operand and {size} in another ({subscripts})"))
            sizes[name] = builtins.max(seen, size)
    # an index of size 1 in one operand is broadcast to its size in the other (numpy's)
    xs = [broadcast_to(x, [sizes[n] for n in names]) for names, x in zip(ins, xs, strict=True)]
    # indices no one else needs are summed out of their operand first
    kept = [_sum_out(x, names, set(out).union(*(ins[:k] + ins[k + 1:])))
            for k, (x, names) in enumerate(zip(xs, ins, strict=True))]
    if len(kept) == 1:
        (x, names), = kept
        return weakened(transpose(x, [names.index(n) for n in out]), weak)
    (a, a_names), (b, b_names) = kept
    batch = [n for n in out if n in a_names and n in b_names]
    contracted = [n for n in a_names if n in b_names and n not in out]
    left = [n for n in a_names if n not in b_names]
    right = [n for n in b_names if n not in a_names]
    a = _grouped(a, a_names, [batch, left, contracted], sizes)
    b = _grouped(b, b_names, [batch, contracted, right], sizes)
    product = reshape(bind(tape.MatmulOp, a, b),
                      [sizes[n] for n in (*batch, *left, *right)])
    order = [*batch, *left, *right]
    return weakened(transpose(product, [order.index(n) for n in out]), weak)


def _parse_subscripts(subscripts: str, xs: list[Array]) -> tuple[list[str], str]:
    text = subscripts.replace(" ", "")
    lhs, arrow, out = text.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(xs):
        raise ValueError(at_user_line(f"einsum: {subscripts!r} names {len(ins)} operands, "
                                      f"got {len(xs)}"))
    spare = iter(c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in text)
    ellipsis = ""
    if "..." in text:  # the leading dims no letter names, one fresh letter each
        extra = max(x.ndim - len(n.replace("...", "")) for n, x in zip(ins, xs, strict=True))
        ellipsis = "".join(next(spare) for _ in range(extra))
    expanded = []
    for names, x in zip(ins, xs, strict=True):
        if "..." in names:
            names = names.replace("...", ellipsis[len(ellipsis) - (x.ndim - len(names) + 3):])
        if not (names.isalpha() or not names) or len(names) != x.ndim or \
                len(set(names)) != len(names):
            raise ValueError(at_user_line(
                f"einsum: {names!r} does not name the {x.ndim} dims of an operand of shape "
                f"{tuple(x.shape)} once each (a repeated index, a diagonal, is not supported)"))
        expanded.append(names)
    if arrow:
        out = out.replace("...", ellipsis)
    else:
        counts = "".join(expanded)
        out = ellipsis + "".join(sorted(c for c in set(counts) - set(ellipsis)
                                        if counts.count(c) == 1))
    unknown = set(out) - set("".join(expanded))
    if unknown or len(set(out)) != len(out):
        raise ValueError(at_user_line(f"einsum: the output {out!r} of {subscripts!r} must name "
                                      "input indices, each once"))
    return expanded, out


def _sum_out(x: Array, names: str, needed: set[str]) -> tuple[Array, str]:
    axes = tuple(i for i, n in enumerate(names) if n not in needed)
    if not axes:
        return x, names
    return sum(x, axis=axes), "".join(n for n in names if n in needed)


def _grouped(x: Array, names: str, groups: list[list[str]], sizes: dict[str, int]) -> Array:
    """x transposed to the order of `groups` and reshaped to one dim per group."""
    order = [n for group in groups for n in group]
    x = transpose(x, [names.index(n) for n in order])
    return reshape(x, [int(np.prod([sizes[n] for n in g], dtype=np.int64)) for g in groups])
