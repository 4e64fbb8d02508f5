"""What outlining a loop into a function of its own needs, shared by convert-loops-to-gpu
(kernels) and outline-parallel-loops (the CPU's thread pool): the values a run of ops takes
from outside it, the constants that can be cloned in instead of passed."""

from __future__ import annotations

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
