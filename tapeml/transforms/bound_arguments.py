"""`loop-bounds-as-arguments`: each function tape-to-loops lowered an op's loops into (its
`share`: LOWERED_ONCE_ATTR) takes the upper bounds of its top-level loops as index arguments,
which its calls pass as constants; it is then marked SHARED_CODE_ATTR. A top-level
kernel.parallel_for (outline-parallel-loops' part, on more than one thread) takes its count
so (`count`): the part reads only the inner dimensions' counts, which the outer one's leaves
alone.

    func.func @f_op3(%x, %y) {                      func.func @f_op3(%x, %y, %n: index) {
      %c1024 = arith.constant 1024 : index            scf.for %i = %c0 to %n step %c1 { ... }
      scf.for %i = %c0 to %c1024 step %c1 { ... }  }
    }                                         ->    ...
    func.call @f_op3(%a, %b)                        %c1024 = arith.constant 1024 : index
                                                    func.call @f_op3(%a, %b, %c1024)

An op over a batch lowers to loops whose outermost bound is the batch (or the rows it makes)
and whose inner loops are the rest of its shape: at another batch size the same op lowers to
the same function but for that bound. With the bound an argument the two functions are the
same text, so a backend can compile such a function once per process and call it from every
program that has it (the CPU backend's shared code: a new batch size of a model compiles its
layers' ops no more). Nothing is assumed of which bounds the batch makes: a function whose
text differs at another size in anything else is simply another function.

The program computes what it did: each call passes the bound the loop had.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from xdsl.builder import InsertPoint
from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import FunctionType, IndexType, ModuleOp, UnitAttr
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tapeml.dialects import kernel
from tapeml.transforms.new_ops import call
from tapeml.transforms.outlining import constant_index

LOWERED_ONCE_ATTR = "tapeml.lowered_once"
"""On a function tape-to-loops lowered once for every op of a key (its `share`)."""

SHARED_CODE_ATTR = "tapeml.shared_code"
"""On a function whose top-level loop bounds are its arguments (this pass): its code is the
same in every program that has its text, so a backend may compile it once for all of them."""


MULTIPLE = 64
"""A loop with no loop inside it (a flat elementwise loop, which LLVM vectorizes) takes its
bound as an argument only where the bound is a multiple of this, passed as the bound divided
by it and multiplied back inside, so that LLVM still knows its trip count a whole number of
vectors (with a bound it knows nothing of, its vectorized loop gets a remainder loop and the
checks around it)."""


def _bound(op: Operation) -> tuple[int, int] | None:
    """Where `op`'s outermost upper bound is among its operands, and the multiple it is
    passed as a number of (1, or MULTIPLE for a loop with no loop inside it), if `op` is a
    loop whose bound becomes an argument; None if it is not."""
    if isinstance(op, scf.ParallelOp):
        rank = len(op.lowerBound)
        nested = rank > 1
        position = rank
    elif isinstance(op, scf.ForOp):
        nested, position = False, 1
    else:
        return None
    if nested or any(isinstance(inner, scf.ForOp | scf.ParallelOp)
                     for region in op.regions for inner in region.walk()):
        return position, 1
    bound = constant_index(op.operands[position])
    return (position, MULTIPLE) if bound is not None and bound % MULTIPLE == 0 else None


def bounds_as_arguments(module: ModuleOp) -> int:
    """Make the upper bounds of the top-level loops of every LOWERED_ONCE_ATTR function of
    `module` its arguments (see the module doc); how many bounds became arguments."""
    functions = {op.sym_name.data: op for op in module.ops
                 if isinstance(op, func.FuncOp) and LOWERED_ONCE_ATTR in op.attributes
                 and not op.is_declaration}
    if not functions:
        return 0
    calls: defaultdict[str, list[func.CallOp]] = defaultdict(list)  # (tape-to-loops calls
    for f in module.ops:  # them from its functions' blocks; a walk of the module was 10 ms)
        if isinstance(f, func.FuncOp) and f.sym_name.data not in functions and f.body.blocks:
            for op in f.body.block.ops:
                if isinstance(op, func.CallOp) and op.callee.root_reference.data in functions:
                    calls[op.callee.root_reference.data].append(op)
    made = 0
    for name, f in functions.items():
        block = f.body.block
        passed: list[int] = []  # each new argument's value at this program's size
        for op in list(block.ops):
            if isinstance(op, kernel.ParallelForOp) and op.count is None:
                argument = block.insert_arg(IndexType(), len(block.args))
                Rewriter.replace_op(op, kernel.ParallelForOp(
                    op.callee.root_reference.data, list(op.buffers), op.iterations.value.data,
                    argument))
                passed.append(op.iterations.value.data)
                continue
            found = _bound(op)
            if found is None or (bound := constant_index(op.operands[found[0]])) is None:
                continue
            position, multiple = found
            constant = op.operands[position].owner
            argument = block.insert_arg(IndexType(), len(block.args))
            if multiple > 1:
                factor = arith.ConstantOp.from_int_and_width(multiple, IndexType())
                product = arith.MuliOp(argument, factor.result)
                Rewriter.insert_op([factor, product], InsertPoint.before(op))
                argument = product.result
            op.operands[position] = argument
            passed.append(bound // multiple)
            if not constant.results[0].uses:
                Rewriter.erase_op(constant)
        for op in list(block.ops):  # (outline-parallel-loops leaves its loops' constants)
            if isinstance(op, arith.ConstantOp) and not op.result.uses:
                Rewriter.erase_op(op)
        del f.attributes[LOWERED_ONCE_ATTR]
        f.attributes[SHARED_CODE_ATTR] = UnitAttr()
        if not passed:
            continue
        f.function_type = FunctionType.from_lists([a.type for a in block.args], [])
        for site in calls[name]:
            values: list[SSAValue] = []
            for bound in passed:
                constant = arith.ConstantOp.from_int_and_width(bound, IndexType())
                Rewriter.insert_op(constant, InsertPoint.before(site))
                values.append(constant.result)
            Rewriter.replace_op(site, call(name, [*site.operands, *values]))
        made += len(passed)
    return made


@dataclass(frozen=True)
class Bounded:
    """What loop-bounds-as-arguments did."""

    bounds: int

    def __str__(self) -> str:
        return f"{self.bounds} loop bounds became arguments"


@dataclass(frozen=True)
class LoopBoundsAsArgumentsPass(ModulePass):
    """The functions tape-to-loops lowered ops' loops into take their top-level loops' upper
    bounds (a thread-pool part's count) as arguments, and are marked as code a backend may
    share among programs (see the module doc)."""

    name = "loop-bounds-as-arguments"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.run(op)

    def run(self, module: ModuleOp) -> Bounded:
        return Bounded(bounds_as_arguments(module))
