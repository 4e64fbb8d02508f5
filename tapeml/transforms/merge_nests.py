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

Then a run of ops that repeats back to back (each layer's forward, each layer's backward: the
calls, GEMMs and nests between one layer's views and the next's) becomes one function of the
values it takes from outside, called where each copy was (`runs=false` keeps them apart):

    func.call @f_nest0(%v1, %v2)      (layer 1)       func.call @f_run0(%v1, %v2, %v3, %w1)
    kernel.gemm ... %v3, %w1 ...                ->    func.call @f_run0(%v4, %v5, %v6, %w2)
    func.call @f_nest0(%v4, %v5)      (layer 2)
    kernel.gemm ... %v6, %w2 ...

Runs are found among the function's ops, its constants, views and allocations set aside (they
stay, and each call follows the views it takes): each op is keyed by what it does, its
constants and how far back the results it reads were made; a stretch whose keys repeat with
one period (at least MIN_RUN ops, at least twice) is a candidate, the ones saving the most ops
first. Each copy is then checked whole, as nests are (the same ops over its outside values in
the same order of first use, none of its results read after it), and the copies that agree
become calls. A dealloc is in no run (a call after the copy would read a buffer freed in the
middle of it). The buffers a run takes may share bytes of the arena (one dead before the other
is made): the function is marked `tapeml.may_alias`, and the backend does not take its
arguments for distinct.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import MemRefType, ModuleOp, UnitAttr
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tapeml.dialects import kernel
from tapeml.transforms.new_ops import call
from tapeml.transforms.outlining import constant_op, external_values


def attribute_key(attribute: Attribute) -> Hashable:
    """`attribute` itself where it hashes, else its text: a part of a structural key."""
    try:
        hash(attribute)
        return attribute
    except TypeError:
        return str(attribute)


def structure(ops: list[Operation], external: list[SSAValue], any_type: bool = False
              ) -> tuple | None:
    """A key equal for two runs of ops exactly when they are the same computation over their
    external buffers, in order (see the module doc); None if they use an outside value that is
    not a buffer or a constant (`any_type`: every value of `external` counts as a buffer)."""
    position = {v: ("buffer", i) for i, v in enumerate(external)
                if any_type or isinstance(v.type, MemRefType)}
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
             buffers: list[SSAValue], external: list[SSAValue], move: bool = False
             ) -> func.FuncOp:
    """A function of `buffers` running a clone of `nest` (its constants cloned in); `move`:
    the nest itself, taken out of `function` (the nest of no other copy: no clone needed)."""
    entry = Block(arg_types=[b.type for b in buffers])
    mapping: dict[SSAValue, SSAValue] = dict(zip(buffers, entry.args, strict=True))
    for value in external:
        if value not in mapping:
            clone = constant_op(value).clone()
            entry.add_op(clone)
            mapping[value] = clone.result
    if move:
        nest.detach()
        for old, new in mapping.items():
            old.replace_uses_with_if(new, lambda use: nest.is_ancestor(use.operation))
        entry.add_op(nest)
    else:
        entry.add_op(nest.clone(value_mapper=mapping))
    entry.add_op(func.ReturnOp())
    outlined = func.FuncOp(name, ([b.type for b in buffers], []), Region(entry))
    module.body.block.insert_op_after(outlined, function)
    return outlined


def _repeated(keyed: Iterable[tuple[Hashable | None, T]], least: int = 2) -> list[list[T]]:
    """The items that share a key with `least` - 1 others or more (None: no key), grouped, in
    order of first appearance."""
    groups: defaultdict[Hashable, list[T]] = defaultdict(list)
    for key, item in keyed:
        if key is not None:
            groups[key].append(item)
    return [members for members in groups.values() if len(members) >= least]


MAY_ALIAS_ATTR = "tapeml.may_alias"
"""On a function whose buffer arguments may share bytes (merge-loop-nests' runs take buffers
of the arena that live at different times): a backend must not take them for distinct."""

T = TypeVar("T")

MIN_RUN = 8
"""The fewest ops a repeated run must hold to become a function (a call and its arguments
cost about what a short run does)."""

FREE = (arith.ConstantOp, memref.ViewOp, memref.AllocOp)
"""Ops a run leaves where they are: they make values (buffers, constants) and touch no memory,
so the run's call can follow them."""


def _op_keys(ops: list[Operation]) -> list[Hashable]:
    """A key per op: equal for two ops that do the same to outside values of the same types
    (which ones, a run's own key tells), with the same constants, reading the results of ops
    as far before them."""
    index = {op: i for i, op in enumerate(ops)}
    keys: list[Hashable] = []
    for i, op in enumerate(ops):
        if isinstance(op, memref.DeallocOp | func.ReturnOp):
            keys.append(("barrier", i))  # never in a run: it ends a buffer, or the function
            continue
        described = []
        for value in op.operands:  # (a nest's own: its bounds; what it reads, the run's key)
            owner = value.owner
            if (constant := constant_op(value)) is not None:
                described.append(("constant", constant.value, value.type))
            elif isinstance(owner, Operation) and owner in index:
                described.append(("result", i - index[owner], value.index, value.type))
            else:
                described.append(("outside", value.type))
        keys.append((_shallow(op), tuple(described)))
    return keys


def _shallow(op: Operation) -> Hashable:
    """What `op` is, its regions only counted (a run's own key compares them whole)."""
    return (op.name, tuple((k, attribute_key(v)) for k, v in op.properties.items()),
            tuple((k, attribute_key(v)) for k, v in op.attributes.items()),
            tuple(r.type for r in op.results),
            tuple(len(b.ops) for r in op.regions for b in r.blocks))


def _periodic_runs(keys: list[Hashable]) -> list[tuple[int, int, int]]:
    """Stretches of `keys` that repeat one period at least twice, best first (the most ops
    a merge saves) and not overlapping: (start, period, copies)."""
    ids: dict[Hashable, int] = {}
    codes = np.array([ids.setdefault(k, len(ids)) for k in keys], dtype=np.int64)
    n = len(codes)
    found: list[tuple[int, int, int, int]] = []
    for period in range(MIN_RUN, n // 2 + 1):
        same = np.concatenate(([False], codes[:-period] == codes[period:], [False]))
        edges = np.flatnonzero(np.diff(same.astype(np.int8)))
        for start, end in zip(edges[::2], edges[1::2], strict=True):
            copies = (end - start + period) // period
            if copies >= 2:
                found.append(((copies - 1) * period, int(start), period, int(copies)))
    taken = np.zeros(n, dtype=bool)
    runs = []
    for _, start, period, copies in sorted(found, key=lambda f: (-f[0], f[1])):
        end = start + period * copies
        if not taken[start:end].any():
            taken[start:end] = True
            runs.append((start, period, copies))
    return runs


def _run_structure(ops: list[Operation]) -> tuple[tuple | None, list[SSAValue]]:
    """The key of a run (equal for two runs exactly when they compute the same over their
    outside values, in order of first use) and those values (not its constants); no key if a
    value it makes is used after it (a call of it would not make it)."""
    inside = set(ops)
    for op in ops:
        for result in op.results:
            if any(_top(use.operation, inside) is None for use in result.uses):
                return None, []
    external = [v for v in external_values(ops) if constant_op(v) is None]
    key = structure(ops, external, any_type=True)
    return (None if key is None else (key, tuple(v.type for v in external))), external


def _top(op: Operation | None, inside: set[Operation]) -> Operation | None:
    """The op of `inside` that is `op` or holds it, else None."""
    while op is not None and op not in inside:
        op = op.parent_op()
    return op


def _merge_runs(module: ModuleOp, function: func.FuncOp, first_name: int) -> tuple[int, int]:
    """The runs of ops that repeat in `function`'s body become one function each, called where
    each copy was: how many copies became calls, of how many functions."""
    block = function.body.block
    ops = [op for op in block.ops if not isinstance(op, FREE)]
    calls = outlined = 0
    if len(ops) < 2 * MIN_RUN:
        return calls, outlined
    for start, period, copies in _periodic_runs(_op_keys(ops)):
        copied = (ops[start + k * period:start + (k + 1) * period] for k in range(copies))
        for members in _repeated((key, (run, external)) for run in copied
                                 for key, external in [_run_structure(run)]):
            name = f"{function.sym_name.data}_run{first_name + outlined}"
            _outline_run(module, function, name, *members[0])
            outlined += 1
            for run, external in members:
                block.insert_op_after(call(name, external), run[-1])
                for op in reversed(run):
                    Rewriter.erase_op(op)
                calls += 1
    return calls, outlined


def _outline_run(module: ModuleOp, function: func.FuncOp, name: str, run: list[Operation],
                 external: list[SSAValue]) -> None:
    """A function of `external` running a clone of `run` (its constants cloned in), marked
    MAY_ALIAS_ATTR."""
    entry = Block(arg_types=[v.type for v in external])
    mapping: dict[SSAValue, SSAValue] = dict(zip(external, entry.args, strict=True))
    for value in external_values(run):
        if value not in mapping:
            clone = constant_op(value).clone()
            entry.add_op(clone)
            mapping[value] = clone.result
    for op in run:
        entry.add_op(op.clone(value_mapper=mapping))
    entry.add_op(func.ReturnOp())
    outlined = func.FuncOp(name, ([v.type for v in external], []), Region(entry))
    outlined.attributes[MAY_ALIAS_ATTR] = UnitAttr()
    module.body.block.insert_op_after(outlined, function)


@dataclass(frozen=True)
class Merged:
    """What merge-loop-nests did: nests that became calls, of how many functions; runs of ops
    that became calls, of how many functions; thread-pool parts dropped for another the
    same."""

    nest_calls: int = 0
    nest_functions: int = 0
    run_calls: int = 0
    run_functions: int = 0
    parts: int = 0

    def __str__(self) -> str:
        return (f"{self.nest_calls} loop nests became calls of {self.nest_functions} "
                f"functions, {self.run_calls} runs of ops calls of {self.run_functions}; "
                f"{self.parts} thread-pool parts were the same as another")


def merge_loop_nests(module: ModuleOp, merge_runs: bool = True, every: bool = False
                     ) -> Merged:
    """Merge the repeated loop nests, runs of ops (if `merge_runs`) and outlined functions of
    `module`'s functions (see the module doc); `every`: each nest a function, repeated or
    not."""
    functions = [op for op in module.ops if isinstance(op, func.FuncOp) and not op.is_declaration]
    merged_parts, called = _merge_functions(module, functions)
    calls = outlined = run_calls = runs = 0
    for function in functions:
        if function.parent is not None and function.sym_name.data not in called:
            nests = [op for op in function.body.block.ops
                     if isinstance(op, scf.ParallelOp | scf.ForOp) and not op.results]
            keyed = [(_nest_key(op, external), (op, external)) for op in nests
                     for external in [external_values([op])]]
            for members in _repeated(keyed, least=1 if every else 2):
                name = f"{function.sym_name.data}_nest{outlined}"
                first, external = members[0]
                buffers = [v for v in external if isinstance(v.type, MemRefType)]
                outlined += 1
                if len(members) == 1:  # (`every`'s nest that occurs once: moved, not copied)
                    function.body.block.insert_op_before(call(name, buffers), first)
                    _outline(module, function, name, first, buffers, external, move=True)
                    calls += 1
                    _erase_unused(external)
                    continue
                _outline(module, function, name, first, buffers, external)
                for op, ext in members:
                    Rewriter.replace_op(op, call(
                        name, [v for v in ext if isinstance(v.type, MemRefType)]))
                    calls += 1
                    _erase_unused(ext)
            if merge_runs:
                merged_calls, merged = _merge_runs(module, function, runs)
                run_calls, runs = run_calls + merged_calls, runs + merged
    return Merged(calls, outlined, run_calls, runs, merged_parts)


def _erase_unused(external: list[SSAValue]) -> None:
    """The constants among a nest's outside values (its bounds, ...) that nothing uses now."""
    for value in external:
        if (constant := constant_op(value)) is not None and not value.uses:
            Rewriter.erase_op(constant)


def _nest_key(nest: Operation, external: list[SSAValue]) -> Hashable | None:
    """A nest's structure and the types of the buffers it takes: a function's parameters have
    one type, so two nests over buffers of other sizes stay apart (TAPEML_CHECKS found two
    one-element copies, out of a 2- and a 1-element buffer, merged into one function taking
    the 2-element one)."""
    key = structure([nest], external)
    return None if key is None else (
        key, tuple(v.type for v in external if isinstance(v.type, MemRefType)))


def _merge_functions(module: ModuleOp, functions: list[func.FuncOp]) -> tuple[int, set[str]]:
    """Point every kernel.parallel_for at the first of the parts that are the same function;
    drop the others; how many were dropped, and the functions the parallel_fors call then
    (the thread pool's parts). One walk of the module finds the parallel_fors (three walks
    were a sixth of the pass on the 8-layer GPT step)."""
    parallel = [op for op in module.walk() if type(op) is kernel.ParallelForOp]
    called = {op.callee.root_reference.data for op in parallel}
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
    for op in parallel:
        target = same.get(op.callee.root_reference.data)
        if target is not None:
            Rewriter.replace_op(op, kernel.ParallelForOp(target, list(op.buffers),
                                                         op.iterations.value.data, op.count))
    for name in same:
        parts[name].detach()
        parts[name].erase()
    return len(same), called - set(same)


@dataclass(frozen=True)
class MergeLoopNestsPass(ModulePass):
    """Merge the loop nests that occur more than once, and the runs of ops that repeat back to
    back (see the module doc)."""

    name = "merge-loop-nests"

    runs: bool = True
    """Merge the runs of ops that repeat (a model's layers), not only the loop nests."""
    every: bool = False
    """Every nest a function, even one that occurs once (a program for every batch size,
    jit's batch_argnums: its buffers are views of the arena at offsets read from memory, which
    LLVM cannot tell apart inline, and a function's buffer parameters are noalias)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.run(op)

    def run(self, module: ModuleOp) -> Merged:
        return merge_loop_nests(module, self.runs, self.every)

