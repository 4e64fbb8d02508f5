"""`tape-to-loops`: tape ops on tensors become loops over buffers (scf + memref + arith + math).

Every tensor lives in a flat, row-major buffer `memref<N x T>` (a rank-0 tensor in one of one
element), so a reshape is free: the same buffer read with other strides. A function

    func.func @f(%x: tensor<...>, ...) -> (tensor<...>, ...)

becomes, in destination-passing style,

    func.func @f(%x: memref<N x T>, ..., %out0: memref<M x T>, ...)

reading its inputs and writing its results into the caller's buffers (computed there directly
when nothing else shares them). Intermediates are allocated (memref.alloc) and freed right after
their last use (memref.dealloc), so at most the live ones are held; the plan's report states the
peak against keeping them all. Every op of the
lowered function still runs on xDSL's interpreter (with tapeml's arith/math/scf additions) and
computes what the tape ops compute; reductions sum in order (numpy sums pairwise), so sums agree
within rounding and the rest bit for bit.

Every tape op is lowered: the elementwise ops and `tape.fused` groups, constant, cast, the layout
ops, sum, max, matmul, and the window ops (unfold, fold, conv2d, the pools and their backward
ops, which read the padded input through a bounds check), take and scatter (their indices
clamped before they address a buffer). Each op's loops are found by its class in `LOWERINGS`,
written by its family's module under tapeml/transforms/loops/ (emitter: the loop builder;
elementwise, layout, indexing, reductions, contractions, convolutions, windows; buffers: the
liveness plan). This module is the pass: the function's signature, buffers and order.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context as PassContext
from xdsl.dialects import func, memref, scf
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    MemRefType,
    ModuleOp,
    ShapedType,
    StringAttr,
    TensorType,
    UnitAttr,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from tapeml.dialects import kernel, tape
from tapeml.dialects.base import one_of
from tapeml.dialects.names import ssa_name, value_names
from tapeml.transforms.bound_arguments import LOWERED_ONCE_ATTR

# each family's module registers its ops' lowerings in LOWERINGS on import
from tapeml.transforms.loops import (  # noqa: F401
    contractions,
    convolutions,
    elementwise,
    epilogues,
    indexing,
    normalization,
    reductions,
    scans,
    windows,
)
from tapeml.transforms.loops.buffers import PlanReport, free_after_last_use
from tapeml.transforms.loops.contractions import transposes_read_in_place
from tapeml.transforms.loops.elementwise import LOOPED
from tapeml.transforms.loops.emitter import Emitter, LoweringError, alloc, buffer_type, dealloc
from tapeml.transforms.loops.layout import alias
from tapeml.transforms.loops.registry import LOWERINGS, Context
from tapeml.transforms.merge_nests import attribute_key
from tapeml.transforms.new_ops import call

SHAREABLE: tuple[type[Operation], ...] = (
    *LOOPED, tape.FusedOp, tape.BroadcastOp, tape.PermuteOp, tape.SliceOp, tape.PadOp,
    tape.ConcatOp, tape.UnfoldOp, tape.FoldOp, tape.MaxPool2dOp, tape.AvgPool2dOp,
    tape.MaxPool2dBackwardOp, tape.AvgPool2dBackwardOp, tape.TakeOp, tape.ScatterOp,
    tape.ArgMaxOp, tape.ArgMinOp, tape.CumsumOp, tape.IotaOp, tape.SumOp, tape.MaxOp,
    tape.LayerNormOp, tape.LayerNormBackwardOp, tape.SoftmaxOp, tape.SoftmaxBackwardOp)
"""The ops whose loops `share` may lower once into a function: their lowering is loops over
their operands' and result's buffers, and scratch buffers of their own (a reduction's row of
accumulators: the function takes it as an argument, allocated where it is called, so the
arena holds it); not constants (globals) nor contractions and convolutions (GEMM kernel calls
already, and merge-loop-nests still merges the loops around them)."""
_shareable = one_of(*SHAREABLE)


def _lowering_key(op: Operation, views: dict[SSAValue, list[int]]) -> Hashable:
    """Equal for two ops exactly when their lowerings are the same loops over their buffers:
    the op and everything in its regions (op names, properties, attributes, types, operands
    numbered as they are defined), its operands' types, which of them are the same value and
    which are transposes read in place (and how)."""
    local: dict[SSAValue, int] = {}
    inner = []
    for nested in op.walk():
        if nested is not op:
            inner.append((nested.name, tuple(local.get(o, -1) for o in nested.operands),
                          tuple(r.type for r in nested.results)))
        inner.append((tuple((k, attribute_key(v)) for k, v in sorted(nested.properties.items())),
                      tuple((k, attribute_key(v)) for k, v in sorted(nested.attributes.items()))))
        for value in nested.results:
            local[value] = len(local)
        for region in nested.regions:
            for block in region.blocks:
                inner.append(tuple(a.type for a in block.args))
                for arg in block.args:
                    local[arg] = len(local)
    first: dict[SSAValue, int] = {}
    return (type(op), tuple(o.type for o in op.operands), op.results[0].type,
            tuple(first.setdefault(o, i) for i, o in enumerate(op.operands)),
            tuple(tuple(views[o]) if o in views else None for o in op.operands), tuple(inner))


EVERY_OP_FUNCTIONS = 64
"""A function of at least this many ops `share` can lower into functions lowers each into
one, ops that occur once too; of fewer, only the ops whose loops another op has too. With
loop-bounds-as-arguments after, each such function is code that another batch size of the
program shares: the 2-layer GPT step (120 such ops) at batch 8 after 16 compiles 10 of its
50 functions, 0.42 of its first call, against 0.53 with only repeated ops as functions. But
each function costs LLVM about a millisecond on the first call, which a small program feels:
W3's step (20 such ops) took 0.374 s against 0.352 s with every op a function (medians of
five alternating processes, one core), 1.06x jax.jit's first call; its new batch size is
mostly its GEMM callers. Either way the program runs at the same speed (W3, W4 and the GPT
step, one and two threads, both jitted in one process, alternating: 0.976-1.006 of the
time)."""


def _shared(block: Block, views: dict[SSAValue, list[int]],
            folded: dict[Operation, Any], repeated: bool = False) -> dict[Operation, Hashable]:
    """The ops of `block` that `share` lowers into functions (SHAREABLE ones, but a view and
    one `folded` into its product), each one's key: ops of one key call one function. Every
    one where there are EVERY_OP_FUNCTIONS of them or more, unless `repeated` (any_batch's:
    batch_argnums compiles one program for every batch size its own way); else only those
    whose key another op has too."""
    keys = {op: _lowering_key(op, views) for op in block.ops
            if _shareable(op) and op.results[0] not in views and op not in folded}
    if not repeated and len(keys) >= EVERY_OP_FUNCTIONS:
        return keys
    counts = Counter(keys.values())
    return {op: key for op, key in keys.items() if counts[key] > 1}


MAX_ELEMENTS = 2**63 - 1
"""The most elements a buffer holds: its loops count them in an index, a signed 64-bit integer
once lowered to LLVM."""


class LoweringErrorAt(LoweringError):
    """A LoweringError about one op of the input (a function, for its argument), which a tool
    that knows where the op came from (tapeml-opt) prints at its source line."""

    def __init__(self, message: str, op: Operation) -> None:
        super().__init__(message)
        self.op = op


class TooManyElements(LoweringErrorAt, MemoryError):
    """A tensor no index counts the elements of: a located error to tapeml-opt, and to a
    compiled call what any allocation past this machine's memory is, a MemoryError."""


def oversized(f: func.FuncOp) -> LoweringErrorAt | None:
    """The error for the first argument or op result of `f` with a dynamic dim (hand-written
    IR: `?` reads as -2^63, and the product's sign decided what followed) or more than
    MAX_ELEMENTS elements (TooManyElements), at the function for an argument, else at the op.
    Verified IR bounds each dim, not their product: such a buffer's size, an index constant,
    failed the LLVM lowering with neither a location nor the tensor."""
    for where, i, value in _values(f):
        if not isinstance(t := value.type, ShapedType):
            continue
        if any(d < 0 for d in t.get_shape()):  # (a dynamic dim: refused as such)
            return LoweringErrorAt(f"tape-to-loops: {_described(f, where, i, value)}, {t}, "
                                   "has a dynamic dim: tape-to-loops lowers static shapes "
                                   "only", where)
        if (count := math.prod(t.get_shape())) > MAX_ELEMENTS:
            return TooManyElements(f"tape-to-loops: {_described(f, where, i, value)}, {t}, "
                                   f"has too many elements: {count}, more than an index "
                                   "counts (2^63 - 1)", where)
    return None


def _values(f: func.FuncOp) -> Iterator[tuple[Operation, int, SSAValue]]:
    """`f`'s arguments, then its ops' results, each with the op it is at and its number."""
    for i, arg in enumerate(f.body.blocks[0].args if f.body.blocks else ()):
        yield f, i, arg
    for op in f.walk():
        for i, result in enumerate(op.results):
            yield op, i, result


def _described(f: func.FuncOp, where: Operation, i: int, value: SSAValue) -> str:
    """`_values`' value `i` at `where`, for a message: "@f's argument 0 (%a)", "tape.add's
    result"."""
    if where is f:
        return f"@{f.sym_name.data}'s argument {i}" + (
            f" (%{value.name_hint})" if value.name_hint else "")
    return f"{where.name}'s result" + (f" {i}" if len(where.results) > 1 else "")


def lower_function(f: func.FuncOp, module: ModuleOp, report: PlanReport,
                   libm: bool = False, row_reductions: bool = False,
                   share: bool = False, profile: bool = False, weight_runs: bool = True,
                   image_group: int = 0, concat_in_place: bool = False,
                   gemm_epilogues: bool = False, window_convs: bool = False,
                   pixel_rows: bool = False, any_batch: bool = False) -> None:
    if len(f.body.blocks) != 1 or not isinstance(f.body.block.last_op, func.ReturnOp):
        raise LoweringError(f"tape-to-loops: @{f.sym_name.data} must be one block of tape ops "
                            "ending in func.return")
    block = f.body.block
    ret = block.last_op
    unsupported = sorted({op.name for op in block.ops if type(op) not in LOWERINGS
                          and not isinstance(op, func.ReturnOp)})
    if unsupported:
        raise LoweringError(f"tape-to-loops: @{f.sym_name.data} holds {', '.join(unsupported)}, "
                            "which this lowering does not take (a function of tape ops only)")
    for what, values in (("argument", block.args), ("result", ret.arguments)):
        for i, value in enumerate(values):
            if not isinstance(value.type, TensorType):
                raise LoweringError(f"tape-to-loops: @{f.sym_name.data}'s {what} {i} is "
                                    f"{value.type}: a function of tape ops takes and returns "
                                    "tensors")
    if (found := oversized(f)) is not None:
        raise found
    new_block = Block(arg_types=[buffer_type(a.type) for a in block.args]
                      + [buffer_type(r.type) for r in ret.arguments])
    for old, new in zip(block.args, new_block.args, strict=False):
        new.name_hint = old.name_hint
    e = Emitter(Builder(InsertPoint.at_end(new_block)), libm)
    outputs = list(new_block.args)[len(block.args):]
    returned = list(ret.arguments)
    # results returned once, made by an op that writes a buffer of its own (not an alias: a
    # reshape, a stop_gradient; not an argument or a constant), are computed straight into the
    # caller's buffer
    direct = {value: target for value, target in zip(returned, outputs, strict=True)
              if returned.count(value) == 1 and isinstance(value.owner, Operation)
              and not isinstance(value.owner, tape.ReshapeOp | tape.StopGradientOp
                                 | tape.ConstantOp)
              and value.owner.parent_block() is block}
    env: dict[SSAValue, SSAValue] = dict(zip(block.args, new_block.args, strict=False))
    allocated: list[SSAValue] = []
    views = transposes_read_in_place(block)
    counter = iter(range(1 << 30))
    cx = Context(module, report, views, row_reductions,
                 lambda: f"{f.sym_name.data}_constant_{next(counter)}", weight_runs, image_group,
                 window_convs, pixel_rows, any_batch=any_batch)
    folded, firsts = epilogues.gemm_epilogues(block, views, set(direct)) if gemm_epilogues \
        else ({}, {})
    products = {first for first, _ in firsts.values()}  # lowered where the op that folds
    # into them is (and a reshape between)
    for op, (product, _) in folded.items():
        products.add(product)
        products.update(o.owner for o in op.operands if isinstance(o.owner, tape.ReshapeOp)
                        and o.owner.operands[0].owner is product)
    shared = _shared(block, views, folded, repeated=any_batch) if share else {}
    placed = _placed_in_concats(block, views, direct, folded) if concat_in_place else {}
    concat_buffers: dict[Operation, SSAValue] = {}  # a concat -> its buffer, made early
    functions: dict[Hashable, tuple[str, list[MemRefType]]] = {}  # a key -> its function
    labels: list[str] = []  # profile: what each kernel.mark's entry counts
    origins = _Origins(new_block) if any_batch else None

    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            break
        if origins is not None:
            origins.next(profile_label(op))
        result = op.results[0]
        if op in products:  # lowered with the op that folds into it, where that op is
            continue
        lower = LOWERINGS[type(op)]
        if lower is alias or result in views:
            env[result] = env[op.operands[0]]  # flat buffers: the same buffer, other strides
            continue
        if op in concat_buffers:  # its operands were written into its buffer: nothing to copy
            env[result] = concat_buffers[op]
            continue
        cx_op = cx  # with what this op's lowering is told of its `out`
        if profile:
            e.insert(kernel.MarkOp(len(labels)))
            labels.append(profile_label(op) if op not in folded else
                          f"{profile_label(folded[op][0])} + {_op_name(op)}")
        if result in direct:  # a result the caller keeps: computed in its buffer
            out = direct[result]
        elif op in placed:  # the part of a concat's buffer it is (kernel.view)
            concat, offset, apart = placed[op]
            if concat not in concat_buffers:
                concat_buffers[concat] = _concat_buffer(e, concat, direct, allocated)
            size = math.prod(result.type.get_shape())
            if apart:  # image after image, `apart` elements from one to the next
                images = result.type.get_shape()[0]
                size += (images - 1) * (apart - size // images)
                cx_op = replace(cx, out_images=apart)
            out = e.insert(kernel.ViewOp(concat_buffers[concat], e.index(offset),
                                         MemRefType(result.type.get_element_type(), [size])))
        else:
            out = e.insert(alloc(buffer_type(result.type)))
            out.name_hint = result.name_hint
        ins = [env[o] for o in op.operands] if op not in folded else []
        if op in shared:  # its loops in a function, lowered once for every op of its key
            key = shared[op]
            if key not in functions:
                functions[key] = _lowered_once(f, op, [*ins, out], len(functions), lower, cx,
                                               libm)
            name, scratch_types = functions[key]
            scratch = [e.insert(alloc(t)) for t in scratch_types]
            e.insert(call(name, [*ins, out, *scratch]))
            for buffer in scratch:
                e.insert(dealloc(buffer))
            env[result] = out
            if result not in direct and op not in placed:
                allocated.append(out)
            continue
        if op in firsts:  # its first product, with its bias: the second's residual
            first, epilogue = firsts[op]
            made = e.insert(alloc(buffer_type(first.results[0].type)))
            lower = LOWERINGS[type(first)]
            lower(e, first, [env[o] for o in first.operands], made,
                  replace(cx, epilogue=replace(epilogue, bias=env[epilogue.bias])))
            env[first.results[0]] = made
            allocated.append(made)
        if op in folded:  # the product, writing this op's result with its epilogue
            product, epilogue = folded[op]
            buffers = replace(epilogue, **{name: env[value] for name in ("bias", "residual")
                                           if (value := getattr(epilogue, name)) is not None})
            lower = LOWERINGS[type(product)]
            ins = [env[o] for o in product.operands]
            written = lower(e, product, ins, out, replace(cx_op, epilogue=buffers))
        else:
            written = lower(e, op, ins, out, cx_op)
        if written is not None and written is not out:  # held elsewhere (a global)
            new_block.erase_op(out.owner)
            env[result] = written
            continue
        env[result] = out
        if result not in direct and op not in placed:
            allocated.append(out)

    if profile:
        e.insert(kernel.MarkOp(len(labels)))
        labels.append("results copied to the caller's buffers")
    for value, target in zip(ret.arguments, outputs, strict=True):
        source = env[value]
        if source is target:
            continue
        if origins is not None:
            origins.next(f"a result, {value.type}")
        size = buffer_type(value.type).get_shape()[0]
        e.loops([size], lambda e, ivs, source=source, target=target:
                e.store(e.load(source, ivs[0]), target, ivs[0]), parallel=True)
    if origins is not None:
        origins.next("")
    if profile:
        e.insert(kernel.MarkOp(-1))  # the clock stops
        f.attributes[PROFILE_ATTR] = ArrayAttr([StringAttr(label) for label in labels])
    e.insert(func.ReturnOp())
    free_after_last_use(new_block, allocated, report)

    names_in = value_names(f.arg_attrs, block.args, "arg")
    names_out = [f"out.{n}" for n in value_names(f.res_attrs, returned, "result")]
    for arg, name in zip(outputs, names_out, strict=True):
        arg.name_hint = ssa_name(name)
    f.body.add_block(new_block)  # the buffer body takes the tensor body's place
    f.body.erase_block(block, safe_erase=False)
    f.function_type = FunctionType.from_lists([a.type for a in new_block.args], [])
    f.arg_attrs = ArrayAttr([DictionaryAttr({"tapeml.name": StringAttr(n)})
                             for n in [*names_in, *names_out]])
    f.res_attrs = None


IN_PLACE = (*LOOPED, tape.FusedOp, tape.Conv2dOp, tape.MatmulOp, tape.MaxPool2dOp, tape.AvgPool2dOp)
"""The ops `concat_in_place` has write into a concat's buffer: their lowering writes every
element of `out`, and returns no buffer of its own."""


def _placed_in_concats(block: Block, views: dict[SSAValue, list[int]],
                       direct: dict[SSAValue, SSAValue], folded: dict[Operation, Any]
                       ) -> dict[Operation, tuple[Operation, int, int]]:
    """The ops whose results a concat only joins, each written straight into its part of the
    concat's buffer: op -> (the concat, the part's element offset, the elements from one of
    its images to the next, or 0 where the part is one block). Every operand must be its
    only use, of an op in IN_PLACE (once in the concat, not returned, not read in place as a
    transpose). Where nothing comes before the concat's axis but ones (a batch of 1 along
    channels) each part is one contiguous block; a batch of images joined along channels is
    a block per image, which only a convolution writes (its kernel.gemm's batch stride; or
    the op folded into one: `folded`)."""
    placed: dict[Operation, tuple[Operation, int, int]] = {}
    for op in block.ops:
        if not isinstance(op, tape.ConcatOp):
            continue
        axis = op.params["axis"]
        shape = op.results[0].type.get_shape()
        if len(set(op.operands)) != len(op.operands):
            continue
        owners = [value.owner for value in op.operands]
        if not all(isinstance(owner, IN_PLACE) and owner.parent_block() is block
                   and value.has_one_use() and value not in direct and value not in views
                   for value, owner in zip(op.operands, owners, strict=True)):
            continue
        apart = 0
        if math.prod(shape[:axis]) != 1:
            if axis != 1 or not all(_writes_images(owner, folded) for owner in owners):
                continue
            apart = math.prod(shape[1:])
        offset = 0
        for value, owner in zip(op.operands, owners, strict=True):
            placed[owner] = (op, offset, apart)
            offset += math.prod(value.type.get_shape()[axis:])
    return placed


def _writes_images(op: Operation, folded: dict[Operation, Any]) -> bool:
    """`op`'s result is written image by image by a convolution's kernel.gemm, which can put
    the images anywhere apart: a conv2d with groups = 1, or an op folded into one."""
    product = folded[op][0] if op in folded else op
    return isinstance(product, tape.Conv2dOp) and product.params["groups"] == 1


def _concat_buffer(e: Emitter, concat: Operation, direct: dict[SSAValue, SSAValue],
                   allocated: list[SSAValue]) -> SSAValue:
    """The concat's buffer, made before its first operand's op writes its part: the caller's
    where the concat's result is returned, else allocated (and freed after its last use)."""
    result = concat.results[0]
    if result in direct:
        return direct[result]
    buffer = e.insert(alloc(buffer_type(result.type)))
    buffer.name_hint = result.name_hint
    allocated.append(buffer)
    return buffer


def _lowered_once(f: func.FuncOp, op: Operation, buffers: list[SSAValue], number: int,
                  lower: Any, cx: Context, libm: bool) -> tuple[str, list[MemRefType]]:
    """A function of `buffers`' types (the operands', then the result's), then of the scratch
    buffers its loops use, holding `op`'s loops, placed after `f`; its name and the scratch
    buffers' types (each call's own to allocate)."""
    name = f"{f.sym_name.data}_op{number}"
    entry = Block(arg_types=[b.type for b in buffers])
    inner = Emitter(Builder(InsertPoint.at_end(entry)), libm)
    *ins, out = entry.args
    lower(inner, op, list(ins), out, cx)
    scratch: list[MemRefType] = []
    for allocation in [o for o in entry.ops if isinstance(o, memref.AllocOp)]:  # an argument
        buffer = allocation.memref
        for use in list(buffer.uses):
            if isinstance(use.operation, memref.DeallocOp):
                entry.erase_op(use.operation)
        buffer.replace_all_uses_with(entry.insert_arg(buffer.type, len(entry.args)))
        scratch.append(buffer.type)
        entry.erase_op(allocation)
    inner.insert(func.ReturnOp())
    once = func.FuncOp(name, ([a.type for a in entry.args], []), Region(entry))
    once.attributes[LOWERED_ONCE_ATTR] = UnitAttr()
    f.parent_block().insert_op_after(once, f)
    return name, scratch


PROFILE_ATTR = "tapeml.profile"
"""On a function lowered with `profile`: what each entry of its kernel.mark table counts."""

ORIGIN_ATTR = "tapeml.origin"
"""On each loop nest lowered with `any_batch`: the tape op it was lowered from, as a profile
names it (its kind and its operands' and result's shapes; `_Origins`)."""


class _Origins:
    """Under `any_batch`, each top-level loop nest of `block` tagged with the tape op it was
    lowered from (ORIGIN_ATTR: `profile_label`'s kind and shapes), which merge-loop-nests' key
    compares: nests of two ops that are alike at one batch size only stay two functions, as
    at the others, and the lowering stays an instance of the program batch_argnums compiled.
    (The GPT step at batch 2: the copies that begin two scatters, of the loss's gradient
    over the 2 x 64 tokens' 64 logits and of the embedding table's 64 x 128, 8,192 elements
    each, had become one function; at 16 and 33, two.) A repeated layer's ops are
    alike at every size, and so are their nests' tags."""

    def __init__(self, block: Block) -> None:
        self.block, self.last, self.origin = block, block.last_op, ""

    def next(self, origin: str) -> None:
        """The nests added since the last call were lowered from what that call named; those
        added from now on, from `origin`."""
        op = self.block.first_op if self.last is None else self.last.next_op
        while op is not None:
            if self.origin and isinstance(op, scf.ForOp | scf.ParallelOp):
                op.attributes[ORIGIN_ATTR] = StringAttr(self.origin)
            op = op.next_op
        self.last, self.origin = self.block.last_op, origin


def profile_label(op: Operation) -> str:
    """What a profile's row calls `op`: its name (a fused group's ops), its operands' shapes
    and its result's, e.g. `tape.matmul 256x784, 784x512 -> 256x512 f32`."""
    def shape(value: SSAValue) -> str:
        return "x".join(map(str, value.type.get_shape())) or "scalar"

    element = str(op.results[0].type.get_element_type())
    operands = "".join(f" {', '.join(shape(o) for o in op.operands)}" if op.operands else "")
    return f"{_op_name(op)}{operands} -> {shape(op.results[0])} {element}"


def _op_name(op: Operation) -> str:
    """The op's name, with a fused group's ops: `tape.fused(add, relu, yield)`."""
    if not isinstance(op, tape.FusedOp):
        return op.name
    inner = [o.name.removeprefix("tape.") for o in op.body.block.ops
             if o.name.startswith("tape.")]
    return f"{op.name}({', '.join(dict.fromkeys(inner))})"


def lower_module(module: ModuleOp, libm: bool = False, row_reductions: bool = False,
                 share: bool = False, profile: bool = False, weight_runs: bool = True,
                 image_group: int = 0, concat_in_place: bool = False,
                 gemm_epilogues: bool = False, window_convs: bool = False,
                 pixel_rows: bool = False, any_batch: bool = False) -> PlanReport:
    """Lower every function of `module` in place; returns the buffer plan's report. `libm`: call
    libm for exp, log, tanh, sigmoid and f32 erf (default: vectorizable arithmetic, see
    transcendentals.py). `row_reductions`: reductions that keep the input's last axes fold a row
    of accumulators at a time, and a max pool whose windows overlap along a row takes the max
    down each column first (the CPU's choice, see `lower_reduction`, `lower_pool`; a GPU wants
    one thread per output). `share`: ops of SHAREABLE whose loops are the same (a model's repeated
    layers') call one function of their buffers holding them, lowered once, and from
    EVERY_OP_FUNCTIONS such ops on every one is a function (the CPU's choice: later passes see
    each distinct op once, and loop-bounds-as-arguments makes each code a new batch size
    shares). `profile`: a kernel.mark before each op's loops,
    and the function's PROFILE_ATTR naming them (Jitted.profile's rows). `weight_runs`: a wide
    convolution weight gradient as products over runs of images (lower_conv2d_gemm; a machine's
    choice, which the CPU backend makes from its Target). `image_group`: a large convolution's
    im2col and product that many images at a time, in a loop (lower_conv2d_gemm; 0: all at once;
    the CPU's: its thread count, each thread an image's product). `concat_in_place`: a concat
    whose operands are each one contiguous block of it (nothing before its axis but ones: a
    batch of 1 along channels), or, along channels, each made by a convolution (a block per
    image), has their ops write them there (kernel.view), with no copy (`_placed_in_concats`;
    the CPU's). `gemm_epilogues`: an op that adds a bias to a convolution's or a matmul's
    result, or takes its relu, is that product's kernel.gemm epilogue (loops/epilogues.py; the
    CPU's). `window_convs`: a stride-1 convolution of few output channels reads its zero-padded
    input's windows in place (kernel.gemm's a_taps) instead of an im2col matrix
    (lower_conv2d_gemm; the CPU's). `pixel_rows`: a forward convolution whose product pads fewer
    tiles with the pixels as C's rows is that product, stored transposed into the output
    (kernel.gemm's c_transposed; lower_conv2d_gemm; the CPU's). `any_batch`: no choice that
    depends on a size is made where a loop over the batch would make it otherwise at another
    batch size (Context's)."""
    if not isinstance(image_group, int) or image_group < 0:
        raise LoweringError(f"tape-to-loops: image_group must be 0 (all images at once) or "
                            f"more, got {image_group}")
    report = PlanReport()
    for f in [op for op in module.ops if isinstance(op, func.FuncOp) and not op.is_declaration]:
        lower_function(f, module, report, libm, row_reductions, share, profile, weight_runs,
                       image_group, concat_in_place, gemm_epilogues, window_convs, pixel_rows,
                       any_batch)
    return report


@dataclass(frozen=True)
class ToLoopsPass(ModulePass):
    """Lower tape functions to loops over flat buffers (see the module doc)."""

    name = "tape-to-loops"

    libm: bool = False
    """Call libm for exp, log, tanh, sigmoid and f32 erf (default: vectorizable arithmetic)."""
    row_reductions: bool = False
    """Reductions that keep the last axes fold a row of accumulators at a time, and overlapping
    max pools take the max down each column first (the CPU's)."""
    share: bool = False
    """Ops whose loops are the same call one function holding them; from EVERY_OP_FUNCTIONS
    such ops on, every op's loops are a function (the CPU's)."""
    profile: bool = False
    """A kernel.mark before each op's loops: a profiled run times each op."""
    weight_runs: bool = True
    """A wide convolution weight gradient as products over runs of images, not per image."""
    image_group: int = 0
    """A large convolution's im2col and product this many images at a time, in a loop (0: all
    at once; the CPU's: its thread count)."""
    concat_in_place: bool = False
    """A concat of contiguous blocks (a batch of 1 along channels), or of convolutions along
    channels, has its operands' ops write them into its buffer, with no copy (the CPU's)."""
    gemm_epilogues: bool = False
    """An op adding a bias to a product's result or taking its relu is the product's
    kernel.gemm epilogue (the CPU's)."""
    window_convs: bool = False
    """A stride-1 convolution of few output channels reads its zero-padded input's windows in
    place (kernel.gemm's a_taps), not an im2col matrix (the CPU's)."""
    pixel_rows: bool = False
    """A forward convolution whose product pads fewer tiles with the pixels as C's rows is that
    product, stored transposed into the output (kernel.gemm's c_transposed; the CPU's)."""
    any_batch: bool = False
    """Loops whose structure does not depend on the sizes a batch changes, where it would
    (Context.any_batch; jit's batch_argnums)."""

    def apply(self, ctx: PassContext, op: ModuleOp) -> None:
        self.run(op)

    def run(self, module: ModuleOp) -> PlanReport:
        return lower_module(module, self.libm, self.row_reductions, self.share, self.profile,
                            self.weight_runs, self.image_group, self.concat_in_place,
                            self.gemm_epilogues, self.window_convs, self.pixel_rows,
                            self.any_batch)
