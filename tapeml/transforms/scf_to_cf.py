"""`convert-scf-to-cf` as MLIR has it: scf.for, scf.if and scf.index_switch as xDSL's pass
lowers them (scf.for by our own code, the same blocks and branches, its ops made by new_op),
plus scf.parallel, which xDSL's leaves alone. A parallel loop without reductions (the kind
`tape-to-loops` writes) becomes the nest of scf.for it stands for, in row-major order, before
the loops are lowered. tapeml-opt registers this pass under xDSL's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, cf, get_all_dialects, scf
from xdsl.dialects.builtin import ModuleOp, i1
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import PassPipeline
from xdsl.pattern_rewriter import PatternRewriter
from xdsl.transforms import get_all_passes
from xdsl.transforms.convert_scf_to_cf import (
    ConvertScfToCf,
    IfLowering,
    SwitchLowering,
)
from xdsl.utils.exceptions import DiagnosticException

from tapeml.transforms.new_ops import for_op, new_op, yield_op


def _for(lower: SSAValue, upper: SSAValue, step: SSAValue) -> scf.ForOp:
    """scf.for lower to upper by step, no loop-carried values, its body empty."""
    return for_op(lower, upper, step, [], Block(arg_types=[lower.type]))


def _parallel_to_for(op: scf.ParallelOp) -> list[scf.ForOp]:
    """An scf.parallel (no reductions) -> nested scf.for, the first dimension outermost: the
    loops, outermost first."""
    if op.initVals:
        raise DiagnosticException(
            "convert-scf-to-cf: an scf.parallel with reductions is not lowered")
    body = op.body.block
    loops = [_for(lower, upper, step)
             for lower, upper, step in zip(op.lowerBound, op.upperBound, op.step, strict=True)]
    for parent, child in zip(loops, loops[1:], strict=False):
        parent.body.block.add_op(child)
    body.erase_op(body.last_op)  # the scf.reduce terminator
    for old, loop in zip(body.args, loops, strict=True):
        old.replace_all_uses_with(loop.body.block.args[0])
    innermost = loops[-1].body.block
    for moved in list(body.ops):
        body.detach_op(moved)
        innermost.add_op(moved)
    for loop in loops:
        loop.body.block.add_op(yield_op())
    block = op.parent
    block.insert_op_before(loops[0], op)
    block.erase_op(op)
    return loops


def _branch(to: Block, operands: Sequence[SSAValue]) -> cf.BranchOp:
    return new_op(cf.BranchOp, operands, [], len(operands),
                  lambda p: cf.BranchOp(p, *[p.args[4]] * len(operands)), successors=[to])


def _lower_for(loop: scf.ForOp) -> None:
    """scf.for -> blocks and branches, as xDSL's ForLowering (MLIR's) does it: the block
    holding the loop is split before it; the body's first block becomes the condition block
    (its arguments the induction variable and the loop-carried values), the body's ops move
    to a block of their own, which steps the induction variable and branches back; the loop's
    results are the condition block's arguments after the induction variable."""
    init_block = loop.parent
    end_block = init_block.split_before(loop)
    condition_block = loop.body.first_block
    first_body_block = condition_block.split_before(condition_block.first_op)
    last_body_block = loop.body.last_block
    loop.body.move_blocks_before(end_block)
    iv = condition_block.args[0]
    terminator = last_body_block.last_op
    stepped = new_op(arith.AddiOp, [iv, loop.step], [iv.type], None,
                     lambda p: arith.AddiOp(p.args[4], p.args[4]))
    last_body_block.insert_op_before(stepped, terminator)
    last_body_block.insert_op_before(
        _branch(condition_block, [stepped.results[0], *terminator.operands]), terminator)
    last_body_block.erase_op(terminator)
    init_block.add_op(_branch(condition_block, [loop.lb, *loop.iter_args]))
    comparison = new_op(arith.CmpiOp, [iv, loop.ub], [i1], None,
                        lambda p: arith.CmpiOp(p.args[4], p.args[4], "slt"))
    condition_block.add_op(comparison)
    condition_block.add_op(new_op(
        cf.ConditionalBranchOp, comparison.results, [], None,
        lambda p: cf.ConditionalBranchOp(p.args[3], p, (), p, ()),
        successors=[first_body_block, end_block]))
    for result, value in zip(loop.results, condition_block.args[1:], strict=True):
        result.replace_all_uses_with(value)
    end_block.erase_op(loop)


@dataclass(frozen=True)
class ConvertScfToCfPass(ConvertScfToCf):
    """Lower scf.parallel, scf.for and scf.if to cf branches (MLIR's convert-scf-to-cf)."""

    name = "convert-scf-to-cf"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        # One walk. Every scf.parallel (without reductions, the kind tape-to-loops writes)
        # first becomes the nest of scf.for it stands for, in row-major order, where it was
        # in the walk's order. Then the loops, last first: lowering a loop moves the ops
        # after it into a new block, and after it there are then only branches to blocks
        # already made (first loop first, a program of n top-level loops moves O(n^2) ops:
        # the 4-layer GPT step 3.5 s -> 1.5 s, the same IR). Each op once, without xDSL's
        # greedy walker and its worklist: a lowering makes branches and blocks, which no
        # lowering matches again.
        loops: list[Operation] = []
        constants: list[arith.ConstantOp] = []
        for o in op.walk():
            kind = type(o)
            if kind is arith.ConstantOp:
                constants.append(o)
            elif kind in _LOOPS:
                loops.append(o)
        loops = [lowered for o in loops for lowered in
                 (_parallel_to_for(o) if isinstance(o, scf.ParallelOp) else (o,))]
        for loop in reversed(loops):
            if isinstance(loop, scf.ForOp):
                _lower_for(loop)
            else:
                _LOWERINGS[type(loop)].match_and_rewrite(loop, PatternRewriter(loop))
        for constant in constants:
            if not constant.result.uses:  # (the walker erased these: bounds of outlined loops)
                constant.parent.erase_op(constant)


_LOWERINGS = {scf.IndexSwitchOp: SwitchLowering(), scf.IfOp: IfLowering()}
_LOOPS = (scf.ParallelOp, scf.ForOp, *_LOWERINGS)


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
