"""SSA dominance: every operand must be defined before its use, in a region that encloses it.

xDSL 0.75 verifies ops but not dominance (it has `DominanceInfo` for the blocks of one region,
which this uses), so a value used before its definition, or outside the region that defines it,
verifies and then breaks whatever pass meets it. MLIR checks it as part of verification; so do
tapeml's tools, on every module they load. Every region is treated as an SSA CFG region (MLIR
would accept a use before its definition in a graph region, such as a module's body; tapeml
reads no such IR).
"""

from __future__ import annotations

from collections.abc import Mapping

from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.irdl.dominance import DominanceInfo
from xdsl.utils.exceptions import VerifyException


class Dominance:
    """Answers "does this operand dominate its use?", caching what it computes per block and
    per region (one instance per verification: the IR must not change meanwhile)."""

    def __init__(self) -> None:
        self._order: dict[Block, dict[Operation, int]] = {}
        self._blocks: dict[Region, DominanceInfo] = {}

    def _index(self, op: Operation, block: Block) -> int:
        if block not in self._order:
            self._order[block] = {o: i for i, o in enumerate(block.ops)}
        return self._order[block][op]

    def _block_dominates(self, a: Block, b: Block, region: Region) -> bool:
        if region not in self._blocks:
            self._blocks[region] = DominanceInfo(region)
        return self._blocks[region].dominates(a, b)

    def problem(self, value: SSAValue, user: Operation) -> str | None:
        """Why `value` may not be used by `user`, or None when its definition dominates it."""
        def_block = value.owner if isinstance(value, BlockArgument) else value.owner.parent
        region = None if def_block is None else def_block.parent
        use = user  # the ancestor of `user` (or itself) in the defining region
        while (block := use.parent) is not None and block.parent is not region:
            if (parent := use.parent_op()) is None:
                break
            use = parent
        if region is None or block is None or block.parent is not region:
            return "is defined in a region that does not enclose this op"
        assert def_block is not None
        if block is not def_block:
            if self._block_dominates(def_block, block, region):
                return None
            return "is defined in a block that does not dominate this op"
        if isinstance(value, BlockArgument):
            return None
        if self._index(value.owner, block) < self._index(use, block):
            return None
        return "is used before it is defined"


def _describe(value: SSAValue, names: Mapping[SSAValue, str]) -> str:
    if value in names:
        return names[value]
    if value.name_hint is not None:
        return f"%{value.name_hint}"
    if isinstance(value, BlockArgument):
        return f"argument #{value.index} of a block"
    return f"a result of {value.owner.name}"


def dominance_error(op: Operation, dominance: Dominance,
                    names: Mapping[SSAValue, str]) -> str | None:
    """The message for `op`'s first operand whose definition does not dominate `op`, if any;
    `names` gives source names (`%1`) to say which value it is."""
    for i, operand in enumerate(op.operands):
        if (problem := dominance.problem(operand, op)) is not None:
            return f"{op.name}: operand #{i} ({_describe(operand, names)}) {problem}"
    return None


def verify_dominance(root: Operation) -> None:
    """Raise a VerifyException naming the first op (in walk order) with an operand whose
    definition does not dominate it."""
    dominance = Dominance()
    for op in root.walk():
        if (message := dominance_error(op, dominance, {})) is not None:
            raise VerifyException(message)
