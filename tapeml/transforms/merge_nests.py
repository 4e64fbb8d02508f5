"""`merge-loop-nests`: a loop nest that occurs more than once in a lowered function becomes one
function, called where each copy was; and functions outlined for the thread pool that are the
same become one. A model's repeated layers lower to the same nests over other buffers, so the
passes after this one (convert-scf-to-cf, convert-loops-to-llvm, LLVM) see each distinct nest
once: compile time grows with the distinct layer shapes, not with depth.

    scf.parallel ... { body over %a, %b }            func.call @f_nest0(%a, %b)
    ...                                       ->     ...
    scf.parallel ... { the same body over %c, %d }   func.call @f_nest0(%c, %d)

    func.func @f_nest0(%a, %b) { scf.parallel ... { body } ; func.return }

Two nests are the same when their ops, attributes, types and regions are, and each operand is
the same local value, the same constant, or the same position among the buffers the nest takes
from outside (in order of first use). A nest that uses another outside value (not a buffer or a
constant), or occurs once, stays where it is: out of line, a nest loses what its caller knows
(LLVM's view of its buffers), and the CNN step ran 15% slower with every nest outlined. Run it
after plan-arena: the buffers are then views of the arena, and no copy allocates.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, scf
from xdsl.dialects.builtin import MemRefType, ModuleOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tapeml.dialects import kernel
from tapeml.transforms.outlining import constant_op, external_values


def attribute_key(attribute: Attribute) -> Hashable:
    """`attribute` itself where it hashes, else its text: a part of a structural key."""
    try:
        hash(attribute)
        return attribute
    except TypeError:
        return str(attribute)


def structure(ops: list[Operation], external: list[SSAValue]) -> tuple | None:
    """A key equal for two runs of ops exactly when they are the same computation over their
    external buffers, in order (see the module doc); None if they use an outside value that is
    not a buffer or a constant."""
    position = {v: ("buffer", i) for i, v in enumerate(external)
                if isinstance(v.type, MemRefType)}
    local: dict[SSAValue, int] = {}
    key: list[Hashable] = []
    for top in ops:
        for op in top.walk():
            operands = []
            for operand in op.operands:
                if operand in local:
                    operands.append(local[operand])
                elif operand in position:
                    operands.append(position[operand])
                elif (constant := constant_op(operand)) is not None:
                    operands.append(("constant", constant.value, operand.type))
                else:
                    return None
            shape = tuple((tuple(b.arg_types) for b in r.blocks) for r in op.regions)
            key.append((op.name, tuple(operands), tuple(r.type for r in op.results),
                        tuple((k, attribute_key(v)) for k, v in op.properties.items()),
                        tuple((k, attribute_key(v)) for k, v in op.attributes.items()),
                        tuple(len(list(b.ops)) for r in op.regions for b in r.blocks),
                        tuple(tuple(t) for t in shape)))
            for value in op.results:
                local[value] = len(local)
            for region in op.regions:
                for block in region.blocks:
                    for arg in block.args:
                        local[arg] = len(local)
    return tuple(key)


def _outline(module: ModuleOp, function: func.FuncOp, name: str, nest: Operation,
             buffers: list[SSAValue], external: list[SSAValue]) -> func.FuncOp:
    """A function of `buffers` running a clone of `nest` (its constants cloned in)."""
    entry = Block(arg_types=[b.type for b in buffers])
    mapping: dict[SSAValue, SSAValue] = dict(zip(buffers, entry.args, strict=True))
    for value in external:
        if value not in mapping:
            clone = constant_op(value).clone()
            entry.add_op(clone)
            mapping[value] = clone.result
    entry.add_op(nest.clone(value_mapper=mapping))
    entry.add_op(func.ReturnOp())
    outlined = func.FuncOp(name, ([b.type for b in buffers], []), Region(entry))
    module.body.block.insert_op_after(outlined, function)
    return outlined


def merge_loop_nests(module: ModuleOp) -> tuple[int, int, int]:
    """Merge the repeated loop nests and outlined functions of `module`'s functions: how many
    nests became calls, of how many functions, and how many thread-pool parts were dropped
    for another the same."""
    functions = [op for op in module.ops if isinstance(op, func.FuncOp) and not op.is_declaration]
    merged_parts = _merge_functions(module, functions)
    called = _called(module)
    calls = outlined = 0
    for function in functions:
        if function.parent is not None and function.sym_name.data not in called:
            groups: defaultdict[tuple, list[tuple[Operation, list[SSAValue]]]] = \
                defaultdict(list)
            for op in function.body.block.ops:
                if not isinstance(op, scf.ParallelOp | scf.ForOp) or op.results:
                    continue
                external = external_values([op])
                key = structure([op], external)
                if key is not None:
                    groups[key].append((op, external))
            for members in groups.values():
                if len(members) < 2:
                    continue
                name = f"{function.sym_name.data}_nest{outlined}"
                first, external = members[0]
                buffers = [v for v in external if isinstance(v.type, MemRefType)]
                _outline(module, function, name, first, buffers, external)
                outlined += 1
                for op, ext in members:
                    Rewriter.replace_op(op, func.CallOp(
                        name, [v for v in ext if isinstance(v.type, MemRefType)], []))
                    calls += 1
                    for value in ext:  # its bounds and constants, now used by nothing
                        if (constant := constant_op(value)) is not None and not value.uses:
                            Rewriter.erase_op(constant)
    return calls, outlined, merged_parts


def _called(module: ModuleOp) -> set[str]:
    """The functions kernel.parallel_for calls (the thread pool's parts)."""
    return {op.callee.root_reference.data for op in module.walk()
            if isinstance(op, kernel.ParallelForOp)}


def _merge_functions(module: ModuleOp, functions: list[func.FuncOp]) -> int:
    """Point every kernel.parallel_for at the first of the parts that are the same function;
    drop the others; how many were dropped."""
    called = _called(module)
    parts = {f.sym_name.data: f for f in functions if f.sym_name.data in called}
    first: dict[tuple, str] = {}
    same: dict[str, str] = {}
    for name, f in parts.items():
        key = structure([f], [])
        if key is None:
            continue
        key = (tuple(f.function_type.inputs), key[1:])  # the name aside
        if key in first:
            same[name] = first[key]
        else:
            first[key] = name
    for op in [op for op in module.walk() if isinstance(op, kernel.ParallelForOp)]:
        target = same.get(op.callee.root_reference.data)
        if target is not None:
            Rewriter.replace_op(op, kernel.ParallelForOp(target, list(op.buffers),
                                                         op.iterations.value.data))
    for name in same:
        parts[name].detach()
        parts[name].erase()
    return len(same)


@dataclass(frozen=True)
class MergeLoopNestsPass(ModulePass):
    """Merge the loop nests that occur more than once (see the module doc)."""

    name = "merge-loop-nests"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.run(op)

    def run(self, module: ModuleOp) -> str:
        calls, outlined, parts = merge_loop_nests(module)
        return (f"{calls} loop nests became calls of {outlined} functions; {parts} "
                "thread-pool parts were the same as another")

