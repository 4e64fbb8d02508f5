"""`outline-parallel-loops`: each parallel loop of a lowered function that is worth threads
becomes a function over a range of its outer iterations, called through `kernel.parallel_for`
(the CPU's thread pool splits the range: tapeml/codegen/pool.py).

    scf.parallel (%i, %j, %k) = (0, 0, 0) to (64, 16, 784) { body }
  ->
    kernel.parallel_for @f_part0(%x, %y) iterations 1024 : ...
    func.func @f_part0(%x, %y, %start: index, %end: index) {
      scf.for %g = %start to %end { %i = %g / 16, %j = %g % 16
        scf.for %k = 0 to 784 { body } }     // the inner dimensions stay loops (vectorized)
    }

The outer dimensions are taken together until there are at least `OUTER` of their iterations
to share out; the rest stay a nest of loops, so the innermost one still vectorizes. A loop is
outlined when its estimated scalar work (its iterations times its body's ops, nested loops
counted by their trip counts) is at least `min_work`: below, the handoff costs more than it
saves. Constants are cloned into the outlined function; buffers are its arguments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context
from xdsl.dialects import func, scf
from xdsl.dialects.builtin import IndexType, MemRefType, ModuleOp
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tapeml.dialects import kernel
from tapeml.transforms.loops.emitter import LoweringError
from tapeml.transforms.outlining import (
    constant_index,
    constant_op,
    delinearize,
    external_values,
    index,
)

INDEX = IndexType()
OUTER = 64
MIN_WORK = 1 << 15


def work(ops: list[Operation]) -> int:
    """Estimated scalar ops: loops with constant bounds count their body per trip."""
    total = 0
    for op in ops:
        if isinstance(op, scf.ForOp | scf.ParallelOp):
            lowers = op.lowerBound if isinstance(op, scf.ParallelOp) else [op.lb]
            uppers = op.upperBound if isinstance(op, scf.ParallelOp) else [op.ub]
            steps = op.step if isinstance(op, scf.ParallelOp) else [op.step]
            trips = 1
            for lo, hi, st in zip(lowers, uppers, steps, strict=True):
                bounds = (constant_index(lo), constant_index(hi), constant_index(st))
                trips *= 1 if None in bounds else max(0, -(-(bounds[1] - bounds[0])
                                                           // bounds[2]))
            total += trips * work(list(op.body.block.ops))
        elif op.regions:
            total += sum(work(list(r.block.ops)) for r in op.regions if r.blocks)
        else:
            total += 1
    return total


@dataclass
class Outliner:
    module: ModuleOp
    function: func.FuncOp
    min_work: int = MIN_WORK
    any_batch: bool = False
    """A program for every batch size: every parallel loop outlined (even of one iteration or
    none), its outer dimensions all but the innermost, whatever its sizes (which a batch
    changes), each iteration's indices computed by the same ops at every size."""
    count: int = 0

    def outline(self, op: scf.ParallelOp) -> None:
        bounds = [tuple(constant_index(v) for v in vs)
                  for vs in zip(op.lowerBound, op.upperBound, op.step, strict=True)]
        if any(None in b for b in bounds) or op.initVals:
            return
        counts = [max(0, -(-(hi - lo) // st)) for lo, hi, st in bounds]
        if not self.any_batch and (math.prod(counts) == 0 or work([op]) < self.min_work
                                   or math.prod(counts) < 2):
            return
        outer = 1
        while outer < len(counts) and math.prod(counts[:outer]) < OUTER:
            outer += 1
        if self.any_batch:
            outer = max(1, len(counts) - 1)
        body_ops = list(op.body.block.ops)[:-1]  # without scf.reduce
        external = [v for v in external_values(body_ops) if v not in op.body.block.args]
        buffers = [v for v in external if isinstance(v.type, MemRefType)]
        if any(v not in buffers and constant_op(v) is None for v in external):
            return
        name = f"{self.function.sym_name.data}_part{self.count}"
        self.count += 1
        entry = Block(arg_types=[*(b.type for b in buffers), INDEX, INDEX])
        for old, new in zip(buffers, entry.args, strict=False):
            new.name_hint = old.name_hint
        b = Builder(InsertPoint.at_end(entry))
        mapping: dict[SSAValue, SSAValue] = dict(zip(buffers, entry.args, strict=False))
        for value in external:
            if value not in mapping:
                clone = constant_op(value).clone()
                b.insert(clone)
                mapping[value] = clone.result
        start, end = entry.args[-2], entry.args[-1]
        loop_block = Block(arg_types=[INDEX])
        loop = b.insert(scf.ForOp(start, end, index(b, 1), [], loop_block))
        loop.attributes.update(op.attributes)  # (tape-to-loops' origin: merge-loop-nests')
        b.insert(func.ReturnOp())
        inner = Builder(InsertPoint.at_end(loop_block))
        ivs = delinearize(inner, loop_block.args[0], bounds[:outer], counts[:outer],
                          wrap_all_inner=True, any_size=self.any_batch)
        mapping.update(zip(op.body.block.args[:outer], ivs, strict=True))
        for k in range(outer, len(counts)):  # the inner dimensions: a nest of loops
            lo, hi, st = bounds[k]
            block = Block(arg_types=[INDEX])
            inner.insert(scf.ForOp(index(inner, lo), index(inner, hi), index(inner, st), [],
                                   block))
            inner.insert(scf.YieldOp())
            inner = Builder(InsertPoint.at_end(block))
            mapping[op.body.block.args[k]] = block.args[0]
        for moved in body_ops:
            inner.insert(moved.clone(value_mapper=mapping))
        inner.insert(scf.YieldOp())
        part = func.FuncOp(name, ([a.type for a in entry.args], []), Region(entry))
        self.module.body.block.insert_op_after(part, self.function)
        Rewriter.replace_op(op, kernel.ParallelForOp(name, buffers,
                                                     math.prod(counts[:outer])))


def _outermost_parallel(block: Block) -> list[scf.ParallelOp]:
    """The parallel loops of a function's body, and those in the body of a loop of it (a
    convolution's loop over images: its im2col, tape-to-loops{image_group}), not those inside
    another parallel loop."""
    found = []
    for op in block.ops:
        if isinstance(op, scf.ParallelOp):
            found.append(op)
        elif isinstance(op, scf.ForOp):
            found += _outermost_parallel(op.body.block)
    return found


def outline_parallel_loops(module: ModuleOp, min_work: int = MIN_WORK,
                           any_batch: bool = False) -> int:
    """Outline the parallel loops worth threads in every function of `module` (`any_batch`:
    Outliner's); how many."""
    if not isinstance(min_work, int) or min_work < 0:
        raise LoweringError(f"outline-parallel-loops: min_work must be 0 or more, got "
                            f"{min_work}")
    outlined = 0
    for f in [op for op in module.ops if isinstance(op, func.FuncOp) and not op.is_declaration]:
        outliner = Outliner(module, f, min_work, any_batch)
        for op in _outermost_parallel(f.body.block):
            outliner.outline(op)
        outlined += outliner.count
    return outlined


@dataclass(frozen=True)
class OutlineParallelLoopsPass(ModulePass):
    """Outline the parallel loops worth threads (see the module doc)."""

    name = "outline-parallel-loops"

    min_work: int = MIN_WORK
    """The least estimated scalar work of a loop worth handing to threads."""
    any_batch: bool = False
    """Every parallel loop outlined, whatever its sizes (Outliner.any_batch)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.run(op)

    def run(self, module: ModuleOp) -> str:
        outlined = outline_parallel_loops(module, self.min_work, self.any_batch)
        return f"{outlined} loop{'s' if outlined != 1 else ''} outlined for the thread pool"
