"""What outlining a loop into a function of its own needs, shared by convert-loops-to-gpu
(kernels) and outline-parallel-loops (the CPU's thread pool): the values a run of ops takes
from outside it, the constants that can be cloned in instead of passed, and the induction
variables of a loop nest recovered from the number of one iteration (`delinearize`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.builder import Builder
from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType
from xdsl.ir import Operation, SSAValue

INDEX = IndexType()


def constant_index(value: SSAValue) -> int | None:
    """The value of an index constant, else None."""
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(value.type, IndexType):
        return owner.value.value.data
    return None


def constant_op(value: SSAValue) -> arith.ConstantOp | None:
    """The arith.constant that defines `value` (to clone where it is used), else None."""
    owner = value.owner
    return owner if isinstance(owner, arith.ConstantOp) else None


def external_values(ops: Sequence[Operation]) -> list[SSAValue]:
    """The values `ops` (and the ops nested in them) use but do not define, in first-use order."""
    defined: set[SSAValue] = set()
    used: dict[SSAValue, None] = {}
    for top in ops:
        for op in top.walk():
            defined.update(op.results)
            for region in op.regions:
                for block in region.blocks:
                    defined.update(block.args)
            for operand in op.operands:
                used.setdefault(operand)
    return [v for v in used if v not in defined]


def index(b: Builder, value: int) -> SSAValue:
    """An index constant inserted at `b`."""
    return b.insert(arith.ConstantOp.from_int_and_width(value, INDEX)).result


def delinearize(b: Builder, linear: SSAValue, bounds: Sequence[tuple[int, int, int]],
                counts: Sequence[int], wrap_all_inner: bool = False,
                any_size: bool = False) -> list[SSAValue]:
    """The induction variables of iteration `linear` (row-major) of a loop nest with constant
    `bounds` ((lower, upper, step) per dimension, outermost first) and positive trip `counts`,
    built at `b`: each is `linear` divided by the trips of the dimensions inside it, wrapped
    around its own count, times its step, plus its lower bound.

    A dimension is wrapped (remsi) where the dimensions outside it make more than one trip
    (else the quotient is already below its count). `wrap_all_inner` wraps every dimension but
    the outermost, as outline-parallel-loops always has: a redundant remsi after leading size-1
    dimensions, kept so that its IR stays as it was. `any_size` (outline-parallel-loops'
    any_batch, with `wrap_all_inner`): the same ops whatever the sizes, the division of every
    dimension but the innermost, each step and each lower bound written even where it is 1
    or 0, and counts of 0 allowed (a loop of no trips: the divisions by them never run).
    """
    ivs = []
    outside = 1
    for k, (count, (lo, _, step)) in enumerate(zip(counts, bounds, strict=True)):
        stride = math.prod(counts[k + 1:])
        iv = linear
        if stride > 1 or any_size and k < len(counts) - 1:
            iv = b.insert(arith.DivSIOp(iv, index(b, stride))).result
        if outside > 1 or (wrap_all_inner and k > 0):
            iv = b.insert(arith.RemSIOp(iv, index(b, count))).result
        if step != 1 or any_size:
            iv = b.insert(arith.MuliOp(iv, index(b, step))).result
        if lo != 0 or any_size:
            iv = b.insert(arith.AddiOp(iv, index(b, lo))).result
        ivs.append(iv)
        outside *= count
    return ivs
