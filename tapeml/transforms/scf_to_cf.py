"""`convert-scf-to-cf` as MLIR has it: xDSL's pass, which lowers scf.for and scf.if, plus
scf.parallel, which xDSL's leaves alone. A parallel loop without reductions (the kind
`tape-to-loops` writes) becomes the nest of scf.for it stands for, in row-major order, before
xDSL's patterns run. tapeml-opt registers this pass under xDSL's name.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, get_all_dialects, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block
from xdsl.passes import PassPipeline
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.rewriter import Rewriter
from xdsl.transforms import get_all_passes
from xdsl.transforms.convert_scf_to_cf import (
    ConvertScfToCf,
    ForLowering,
    IfLowering,
    SwitchLowering,
)
from xdsl.utils.exceptions import DiagnosticException


def parallel_to_for(module: ModuleOp) -> None:
    """Every scf.parallel (no reductions) -> nested scf.for, the first dimension outermost."""
    for op in [op for op in module.walk() if isinstance(op, scf.ParallelOp)]:
        if op.initVals:
            raise DiagnosticException(
                "convert-scf-to-cf: an scf.parallel with reductions is not lowered")
        body = op.body.block
        loops = [scf.ForOp(lower, upper, step, [], Block(arg_types=[lower.type]))
                 for lower, upper, step in zip(op.lowerBound, op.upperBound, op.step,
                                               strict=True)]
        for parent, child in zip(loops, loops[1:], strict=False):
            parent.body.block.add_op(child)
        body.erase_op(body.last_op)  # the scf.reduce terminator
        for old, loop in zip(body.args, loops, strict=True):
            old.replace_all_uses_with(loop.body.block.args[0])
        innermost = loops[-1].body.block
        for moved in list(body.ops):
            moved.detach()
            innermost.add_op(moved)
        for loop in loops:
            loop.body.block.add_op(scf.YieldOp())
        Rewriter.replace_op(op, loops[0], [])


@dataclass(frozen=True)
class ConvertScfToCfPass(ConvertScfToCf):
    """Lower scf.parallel, scf.for and scf.if to cf branches (MLIR's convert-scf-to-cf)."""

    name = "convert-scf-to-cf"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        parallel_to_for(op)
        # xDSL's patterns, last loop first: lowering a loop moves the ops after it into a new
        # block, and after it there are then only branches to blocks already made. First loop
        # first, a program of n top-level loops moves O(n^2) ops (the 4-layer GPT step: 3.5 s
        # -> 1.5 s, the same IR). Each op once, without the greedy walker's worklist and
        # dead-code checks over every op (the CNN step's pass 0.15 -> 0.1 s): a lowering makes
        # branches and blocks, which no pattern matches again.
        patterns = {scf.IndexSwitchOp: SwitchLowering(), scf.IfOp: IfLowering(),
                    scf.ForOp: ForLowering()}
        for loop in reversed([o for o in op.walk() if type(o) in patterns]):
            patterns[type(loop)].match_and_rewrite(loop, PatternRewriter(loop))
        for constant in [o for o in op.walk() if isinstance(o, arith.ConstantOp)]:
            if not constant.result.uses:  # (the walker erased these: bounds of outlined loops)
                Rewriter.erase_op(constant)


def loops_to_cf(module: ModuleOp, ctx: Context | None = None, tidy: bool = True) -> None:
    """The loop form to branches: convert-scf-to-cf, then (`tidy`) canonicalize and cse, for
    a reader; LLVM does the same work again (the CPU backend leaves it to LLVM)."""
    if ctx is None:  # canonicalize's folder looks the ops' dialects up (arith.select's)
        ctx = Context()
        for name, factory in get_all_dialects().items():
            ctx.register_dialect(name, factory)
    ConvertScfToCfPass().apply(ctx, module)
    if tidy:
        PassPipeline.parse_spec(get_all_passes(), "canonicalize,cse").apply(ctx, module)
