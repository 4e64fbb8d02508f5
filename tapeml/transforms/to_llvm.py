"""`convert-loops-to-llvm`: the loop form that `tape-to-loops` and `convert-scf-to-cf` leave
(func, cf, memref, arith, math on flat buffers) becomes the `llvm` dialect, which xDSL's
`convert_module` turns into LLVM IR. xDSL 0.75 has none of these conversions.

One pass converts all six dialects at once, so the IR is valid before and after it: first every
`index` value becomes an i64 and every buffer an `!llvm.ptr`, then each op is replaced by its
llvm counterpart, made by the converter its kind has in the tables below (ARITH_AND_MATH,
CONTROL_FLOW, `_memref`, `_kernel`, `_func`; the GPU adds its own), with `new_op` for the ops
made by the thousand. MLIR's own conversions are the semantics followed:

  arith   integer ops on i64, float ops, cmpi/cmpf (same predicate numbering), select, extf/truncf,
          maximumf/minimumf as llvm.maximum/llvm.minimum (IEEE 754-2019: NaN propagating,
          -0 < +0), max/minsi
  math    exp, log, sqrt, tanh, powf as LLVM intrinsics (libm on the CPU)
  cf      br, cond_br
  memref  load/store as a getelementptr (not inttoptr: LLVM vectorizes GEP loops) and load/store;
          alloc/dealloc as malloc/free; view (plan-arena's) as a byte offset;
          get_global/global as llvm globals
  func    func.func as an external llvm.func returning void, func.return as llvm.return,
          func.call (of such a function) as llvm.call
  kernel  kernel.gemm as a call to the generated kernel its parameters name (declared here;
          the CPU backend links in its definition from tapeml/codegen/gemm/);
          kernel.parallel_for as a call to the thread pool (tapeml/codegen/pool.py), with
          `callee.entry` reading the buffers back from the context it passes

No fast-math flags are set: float semantics stay IEEE, as the interpreter's.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from xdsl.context import Context
from xdsl.dialects import arith, cf, func, llvm, memref
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    f32,
    f64,
    i1,
    i8,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tapeml.dialects import kernel
from tapeml.dialects.kernel import GemmSpec
from tapeml.transforms.arena import element_bytes
from tapeml.transforms.bound_arguments import SHARED_CODE_ATTR
from tapeml.transforms.merge_nests import MAY_ALIAS_ATTR
from tapeml.transforms.new_ops import new_op
from tapeml.transforms.to_loops import LoweringError

PTR = llvm.LLVMPointerType()


def _llvm_type(t: Attribute) -> Attribute:
    if isinstance(t, IndexType):
        return i64
    if isinstance(t, MemRefType):
        return PTR
    return t


def convert_types(ops: Iterable[Operation]) -> None:
    """index -> i64 and memref -> !llvm.ptr for every result and block argument of `ops` (a
    module's, walked), in place."""
    for op in ops:
        for result in op.results:
            if (new := _llvm_type(result.type)) is not result.type:
                Rewriter.replace_value_with_new_type(result, new)
        for region in op.regions:
            for block in region.blocks:
                for arg in block.args:
                    if (new := _llvm_type(arg.type)) is not arg.type:
                        Rewriter.replace_value_with_new_type(arg, new)


_BINARY = {
    arith.AddiOp: llvm.AddOp, arith.SubiOp: llvm.SubOp, arith.MuliOp: llvm.MulOp,
    arith.DivSIOp: llvm.SDivOp, arith.RemSIOp: llvm.SRemOp, arith.AndIOp: llvm.AndOp,
    arith.OrIOp: llvm.OrOp, arith.XOrIOp: llvm.XOrOp,
    arith.AddfOp: llvm.FAddOp, arith.SubfOp: llvm.FSubOp, arith.MulfOp: llvm.FMulOp,
    arith.DivfOp: llvm.FDivOp, arith.ShLIOp: llvm.ShlOp, arith.ShRSIOp: llvm.AShrOp,
}
UNARY_INTRINSICS = {xmath.ExpOp: "exp", xmath.LogOp: "log", xmath.SqrtOp: "sqrt",
                    xmath.TanhOp: "tanh", xmath.SinOp: "sin", xmath.CosOp: "cos",
                    xmath.AbsFOp: "fabs", xmath.FloorOp: "floor", xmath.CeilOp: "ceil",
                    xmath.RoundEvenOp: "roundeven"}
LIBM_CALLS = {xmath.ErfOp: "erf"}
"""Math ops with no LLVM intrinsic: a call of libm's <name> (f64) or <name>f (f32)."""
BINARY_INTRINSICS = {arith.MaximumfOp: "maximum", arith.MinimumfOp: "minimum",
                     xmath.PowFOp: "pow", xmath.FmaOp: "fma"}
"""(math.fma, a * b + c rounded once, takes three operands: the intrinsic takes them all.)"""
_SIGNED_PICK = {arith.MaxSIOp: "sgt", arith.MinSIOp: "slt"}


def _suffix(t: Attribute) -> str:
    return {32: "f32", 64: "f64"}[t.bitwidth]


def libm_name(op: Operation) -> str:
    t = op.results[0].type
    return f"{LIBM_CALLS[type(op)]}{'f' if t.bitwidth == 32 else ''}"


Converted = tuple[Sequence[Operation], Sequence[SSAValue]]
"""What replaces an op: the ops to put where it was, and the values that stand for its results
(one of those ops' results, or a value already there)."""
Converter = Callable[[Operation], Converted | None]
"""None: the op stays as it is."""


def one_op(op: Operation) -> Converted:
    return [op], op.results


@functools.cache
def _integer(value: int, t: Attribute) -> IntegerAttr:
    return IntegerAttr(value, t)


def _constant(value: Attribute, t: Attribute) -> Operation:
    return llvm.ConstantOp.create(result_types=[t], properties={"value": value})


def _i64(value: int) -> Operation:
    return _constant(_integer(value, i64), i64)


def _call(callee: str, operands: Sequence[SSAValue], result: Attribute | None = None
          ) -> Operation:
    """llvm.CallOp(callee, *operands, return_type=result)."""
    return new_op(llvm.CallOp, operands, [] if result is None else [result],
                  (callee, len(operands), result),
                  lambda p: llvm.CallOp(callee, *[p.args[0]] * len(operands),
                                        return_type=result))


def _intrinsic(name: str, operands: Sequence[SSAValue], result: Attribute | None) -> Operation:
    """llvm.CallIntrinsicOp(name, operands, [result] or [])."""
    results = [] if result is None else [result]
    return new_op(llvm.CallIntrinsicOp, operands, results, (name, len(operands)),
                  lambda p: llvm.CallIntrinsicOp(name, [p.args[0]] * len(operands), results))


def _binary(kind: type[Operation]) -> Converter:
    def convert(op: Operation) -> Converted:
        return one_op(new_op(kind, op.operands, [op.results[0].type], None,
                             lambda p: kind(p.args[0], p.args[0])))
    return convert


def _cast(kind: type[Operation]) -> Converter:
    def convert(op: Operation) -> Converted:
        t = op.results[0].type
        return one_op(new_op(kind, op.operands, [t], t, lambda p: kind(p.args[0], t)))
    return convert


def _unary_intrinsic(op: Operation) -> Converted:
    t = op.results[0].type
    return one_op(_intrinsic(f"llvm.{UNARY_INTRINSICS[type(op)]}.{_suffix(t)}", op.operands, t))


def _binary_intrinsic(op: Operation) -> Converted:
    t = op.results[0].type
    return one_op(_intrinsic(f"llvm.{BINARY_INTRINSICS[type(op)]}.{_suffix(t)}", op.operands, t))


def _libm(op: Operation) -> Converted:
    return one_op(_call(libm_name(op), op.operands, op.results[0].type))


def _arith_constant(op: Operation) -> Converted:
    value, t = op.value, op.result.type
    if isinstance(value, IntegerAttr):
        value = _integer(value.value.data, t)
    return one_op(_constant(value, t))


def _compare(kind: type[Operation], predicate: int, lhs: SSAValue, rhs: SSAValue
             ) -> Operation:
    return new_op(kind, [lhs, rhs], [i1], predicate,
                  lambda p: kind(p.args[0], p.args[0], IntegerAttr(predicate, 64)))


def _cmpi(op: Operation) -> Converted:
    return one_op(_compare(llvm.ICmpOp, op.predicate.value.data, op.lhs, op.rhs))


def _cmpf(op: Operation) -> Converted:
    return one_op(_compare(llvm.FCmpOp, op.predicate.value.data, op.lhs, op.rhs))


def _select(cond: SSAValue, lhs: SSAValue, rhs: SSAValue) -> Operation:
    return new_op(llvm.SelectOp, [cond, lhs, rhs], [lhs.type], None,
                  lambda p: llvm.SelectOp(p.args[3], p.args[0], p.args[0]))


def _signed_pick(op: Operation) -> Converted:
    a, b = op.operands
    pick = _compare(llvm.ICmpOp, _ICMP[_SIGNED_PICK[type(op)]], a, b)
    select = _select(pick.results[0], a, b)
    return [pick, select], select.results


def _fptosi(op: Operation) -> Converted:  # the saturating form: no poison out of range
    t, source = op.result.type, op.input.type
    return one_op(_intrinsic(f"llvm.fptosi.sat.i{t.bitwidth}.{_suffix(source)}", [op.input], t))


_ICMP = {"eq": 0, "ne": 1, "slt": 2, "sle": 3, "sgt": 4, "sge": 5}

ARITH_AND_MATH: dict[type[Operation], Converter] = {
    arith.ConstantOp: _arith_constant,
    **{kind: _binary(to) for kind, to in _BINARY.items()},
    **dict.fromkeys(UNARY_INTRINSICS, _unary_intrinsic),
    **dict.fromkeys(LIBM_CALLS, _libm),
    **dict.fromkeys(BINARY_INTRINSICS, _binary_intrinsic),
    **dict.fromkeys(_SIGNED_PICK, _signed_pick),
    arith.NegfOp: lambda op: one_op(new_op(llvm.FNegOp, op.operands, [op.result.type], None,
                                           lambda p: llvm.FNegOp(p.args[1]))),
    arith.CmpiOp: _cmpi,
    arith.CmpfOp: _cmpf,
    arith.SelectOp: lambda op: one_op(_select(op.cond, op.lhs, op.rhs)),
    arith.ExtFOp: _cast(llvm.FPExtOp),
    arith.TruncFOp: _cast(llvm.FPTruncOp),
    arith.SIToFPOp: _cast(llvm.SIToFPOp),
    arith.ExtSIOp: _cast(llvm.SExtOp),
    arith.ExtUIOp: _cast(llvm.ZExtOp),
    arith.TruncIOp: _cast(llvm.TruncOp),
    arith.FPToSIOp: _fptosi,
    arith.BitcastOp: _cast(llvm.BitcastOp),
    arith.IndexCastOp: lambda op: ([], [op.input]),  # index is i64 already
}


def _branch(op: Operation) -> Converted:
    n = len(op.operands)
    return one_op(new_op(llvm.BrOp, op.operands, [], n,
                         lambda p: llvm.BrOp(p, *[p.args[0]] * n), [op.successor]))


def _conditional_branch(op: Operation) -> Converted:
    then, other = len(op.then_arguments), len(op.else_arguments)
    return one_op(new_op(llvm.CondBrOp, op.operands, [], (then, other),
                         lambda p: llvm.CondBrOp(p.args[3], p, [p.args[0]] * then, p,
                                                 [p.args[0]] * other),
                         [op.then_block, op.else_block]))


CONTROL_FLOW: dict[type[Operation], Converter] = {
    cf.BranchOp: _branch, cf.ConditionalBranchOp: _conditional_branch}


def _gep(base: SSAValue, index: SSAValue, element: Attribute) -> Operation:
    """llvm.GEPOp(base, [GEP_USE_SSA_VAL], element, ssa_indices=[index], inbounds=True)."""
    return new_op(llvm.GEPOp, [base, index], [PTR], element,
                  lambda p: llvm.GEPOp(p.args[2], [llvm.GEP_USE_SSA_VAL], element,
                                       ssa_indices=[p.args[0]], inbounds=True))


def _store(value: SSAValue, pointer: SSAValue) -> Operation:
    return new_op(llvm.StoreOp, [value, pointer], [], None,
                  lambda p: llvm.StoreOp(p.args[0], p.args[2]))


def _load(op: memref.LoadOp) -> Converted:
    (index,) = op.indices
    t = op.res.type
    gep = _gep(op.memref, index, t)
    load = new_op(llvm.LoadOp, gep.results, [t], t,
                  lambda p: llvm.LoadOp(p.args[2], t))
    return [gep, load], load.results


def _memref_store(op: memref.StoreOp) -> Converted:
    (index,) = op.indices
    gep = _gep(op.memref, index, op.value.type)
    return [gep, _store(op.value, gep.results[0])], []


def _global(op: memref.GlobalOp) -> Converted:
    t = op.type
    value = op.initial_value
    assert isinstance(value, DenseIntOrFPElementsAttr)
    array = llvm.LLVMArrayType(math.prod(t.get_shape()), t.element_type)
    return one_op(llvm.GlobalOp(array, op.sym_name, "internal", constant=True, value=value,
                                alignment=64))


def _memref(sizes: dict[Operation, int]) -> dict[type[Operation], Converter]:
    """Buffers are flat and contiguous: element i of a buffer is at ptr + i. `sizes`: bytes of
    each memref.alloc's buffer (read before the types become pointers)."""
    def alloc(op: Operation) -> Converted:
        size = _i64(sizes[op])
        call = _call("malloc", size.results, PTR)
        return [size, call], call.results

    return {
        memref.LoadOp: _load,
        memref.StoreOp: _memref_store,
        memref.AllocOp: alloc,
        memref.DeallocOp: lambda op: one_op(_call("free", [op.memref])),
        # plan-arena's: the arena's address plus a shift
        memref.ViewOp: lambda op: one_op(_gep(op.source, op.byte_shift, i8)),
        memref.GetGlobalOp: lambda op: one_op(llvm.AddressOfOp(op.name_.root_reference, PTR)),
        memref.GlobalOp: _global,
    }


def _kernel(symbols: dict[Operation, str], views: dict[Operation, Attribute], threads: int,
            prefix: str) -> dict[type[Operation], Converter]:
    """kernel.gemm -> a call to the generated kernel its parameters name (declared here, defined
    by the CPU backend: tapeml/codegen/gemm/). kernel.parallel_for -> its buffers' addresses in
    a stack array, and a call to the thread pool (tapeml/codegen/pool.py) with the address of
    the callee's entry, which reads them back. kernel.mark -> a call of the profiling clock
    (MARK, with its entry's index). kernel.view -> the buffer's address plus the offset.
    `symbols`: each kernel op's callee, `views`: each kernel.view's element type (both read
    before the buffer types become pointers); `prefix`: before the names of the functions the
    parallel_for's call (the functions' own)."""
    def parallel_for(op: kernel.ParallelForOp) -> Converted:
        count = llvm.ConstantOp(IntegerAttr(max(1, len(op.buffers)), i64), i64)
        context = llvm.AllocaOp(count, PTR, alignment=8)
        ops: list[Operation] = [count, context]
        for i, buffer in enumerate(op.buffers):
            slot = llvm.GEPOp(context, [i], PTR)
            ops += [slot, llvm.StoreOp(buffer, slot)]
        entry = llvm.AddressOfOp(_entry_name(prefix + op.callee.root_reference.data), PTR)
        total = [] if op.count is not None else [_i64(op.iterations.value.data)]
        iterations = op.count if op.count is not None else total[0].results[0]  # (the former:
        count_threads = _i64(threads)  # loop-bounds-as-arguments', the function's argument)
        call = llvm.CallOp("tapeml_parallel_for", entry, context, iterations, count_threads)
        return [*ops, entry, *total, count_threads, call], []

    def mark(op: kernel.MarkOp) -> Converted:
        index = _i64(op.index.value.data)
        return [index, _call(MARK, index.results)], []

    return {
        kernel.GemmOp: lambda op: one_op(_call(symbols[op], [op.a, op.b, op.c, *op.extra])),
        kernel.ViewOp: lambda op: one_op(_gep(op.source, op.offset, views[op])),
        kernel.ParallelForOp: parallel_for,
        kernel.MarkOp: mark,
    }


def _called_spec(op: kernel.GemmOp) -> GemmSpec:
    """kernel.gemm's spec, with each operand that is a constant of the program, the same for
    every batch, named (GemmSpec.a_constant): a global, which tapeml never writes."""
    spec = op.spec

    def constant(operand: SSAValue, batch_stride: int) -> str:
        owner = operand.owner
        if isinstance(owner, memref.GetGlobalOp) and batch_stride == 0:
            return owner.name_.root_reference.data
        return ""

    return replace(spec, a_constant=constant(op.a, spec.a[0]),
                   b_constant=constant(op.b, spec.b[0]))


MARK = "tapeml_profile_mark"
"""What kernel.mark calls: the CPU backend's profiling clock (tapeml/codegen/marks.py)."""

SYMBOL_PREFIX = "tapeml."
"""Prefixed to the LLVM symbol of every function of a CPU program: no C symbol has a dot, so a
program named exp, memset or malloc never stands in for the library function its code calls
(it called itself)."""


def _entry_name(callee: str) -> str:
    return f"{callee}.entry"


def _entry(callee: str, buffers: int) -> llvm.FuncOp:
    """`callee.entry(context, start, end)`: callee(context[0], ..., start, end)."""
    block = Block(arg_types=[PTR, i64, i64])
    context, start, end = block.args
    ops: list[Operation] = []
    pointers = []
    for i in range(buffers):
        slot = llvm.GEPOp(context, [i], PTR)
        load = llvm.LoadOp(slot, PTR)
        ops += [slot, load]
        pointers.append(load.dereferenced_value)
    block.add_ops([*ops, llvm.CallOp(callee, *pointers, start, end), llvm.ReturnOp()])
    return llvm.FuncOp(_entry_name(callee), llvm.LLVMFunctionType([PTR, i64, i64], None),
                       linkage=llvm.LinkageAttr("external"), body=Region(block))


def _func(prefix: str) -> dict[type[Operation], Converter]:
    """func.func -> llvm.func returning void, named `prefix` + its name (a declaration: another
    module's, the CPU backend's shared code); func.return -> llvm.return; func.call (of a
    function of buffers, merge-loop-nests') -> llvm.call."""
    def function(op: func.FuncOp) -> Converted | None:
        inputs = [_llvm_type(t) for t in op.function_type.inputs]
        if op.is_declaration:
            return one_op(llvm.FuncOp(prefix + op.sym_name.data,
                                      llvm.LLVMFunctionType(inputs, None),
                                      linkage=llvm.LinkageAttr("external")))
        converted = llvm.FuncOp(prefix + op.sym_name.data, llvm.LLVMFunctionType(inputs, None),
                                linkage=llvm.LinkageAttr("external"),
                                body=op.detach_region(op.body))
        for mark in (MAY_ALIAS_ATTR, SHARED_CODE_ATTR):  # (merge-loop-nests' runs; the
            if mark in op.attributes:  # functions loop-bounds-as-arguments made sharable)
                converted.attributes[mark] = op.attributes[mark]
        return one_op(converted)

    def return_(op: func.ReturnOp) -> Converted:
        if op.arguments:
            raise LoweringError("convert-loops-to-llvm: functions write their results to "
                                "output buffers and return nothing (run tape-to-loops)")
        return one_op(llvm.ReturnOp())

    return {func.FuncOp: function, func.ReturnOp: return_,
            func.CallOp: lambda op: one_op(_call(prefix + op.callee.root_reference.data,
                                               op.arguments))}


def _convert_once(ops: list[Operation], converters: Mapping[type[Operation], Converter]
                  ) -> None:
    """Each of `ops` (a module's, walked before), in order, replaced by what the converter of
    its type makes: every converter makes ops of the llvm dialect, which none converts again,
    so one pass over the module's ops as they were does it (no worklist, no rewriter: the CNN
    step's pass 0.27 s with xDSL's greedy walker)."""
    for op in ops:
        block = op.parent
        convert = converters.get(type(op))
        if block is None or convert is None:  # (the module, or one taken away with another)
            continue
        converted = convert(op)
        if converted is None:
            continue
        ops, values = converted
        for new in ops:
            block.insert_op_before(new, op)
        for old, value in zip(op.results, values, strict=True):
            old.replace_all_uses_with(value)
        block.erase_op(op)


def convert_to_llvm(module: ModuleOp, extra: Mapping[type[Operation], Converter] = {},
                    threads: int = 1, prefix: str = SYMBOL_PREFIX) -> Counter[type[Operation]]:
    """Convert a loop-form module (after convert-scf-to-cf) to the llvm dialect, in place;
    how many ops of each kind it had. `extra` converters take the place of the CPU's for
    their ops (the GPU's: gpu_to_nvvm.py); `threads`: how many threads each
    kernel.parallel_for is shared by (the CPU backend passes the host's); `prefix`: before
    each function's symbol (SYMBOL_PREFIX; the GPU keeps its kernels' names)."""
    if not isinstance(threads, int) or threads < 1:
        raise LoweringError(f"convert-loops-to-llvm: threads must be 1 or more, got {threads}")
    leftover: set[str] = set()
    sizes: dict[memref.AllocOp, int] = {}
    symbols: dict[kernel.GemmOp, str] = {}
    views: dict[kernel.ViewOp, Attribute] = {}
    entries: dict[str, int] = {}
    ops = list(module.walk())
    for op in ops:  # what the converters and the declarations need
        if op.dialect_name() in ("scf", "tape"):
            leftover.add(op.name)
        elif isinstance(op, memref.AllocOp):
            sizes[op] = op.memref.type.get_shape()[0] * element_bytes(op.memref.type.element_type)
        elif isinstance(op, kernel.GemmOp):
            symbols[op] = _called_spec(op).symbol
        elif isinstance(op, kernel.ViewOp):
            views[op] = op.result.type.get_element_type()
        elif isinstance(op, kernel.ParallelForOp):
            entries[prefix + op.callee.root_reference.data] = len(op.buffers)
    if leftover:
        raise LoweringError(f"convert-loops-to-llvm: {', '.join(sorted(leftover))} must be "
                            "lowered first (tape-to-loops, convert-scf-to-cf)")
    specs = {spec.symbol: spec for spec in map(_called_spec, symbols)}
    convert_types(ops)
    _convert_once(ops, {**ARITH_AND_MATH, **CONTROL_FLOW, **_memref(sizes), **_func(prefix),
                           **_kernel(symbols, views, threads, prefix), **extra})
    uses: set[str] = set()
    bad: set[str] = set()
    for op in module.walk():  # once: what is called, and anything left unconverted
        if isinstance(op, llvm.CallOp):
            uses.add(op.callee.root_reference.data)
        elif op.dialect_name() not in ("llvm", "builtin"):
            bad.add(op.name)
    if bad:
        raise LoweringError(f"convert-loops-to-llvm: no conversion for {', '.join(sorted(bad))}")
    kernels = sorted(set(specs) & uses)
    for callee, buffers in entries.items():
        module.body.block.add_op(_entry(callee, buffers))
    for name, fty in (("malloc", llvm.LLVMFunctionType([i64], PTR)),
                      ("free", llvm.LLVMFunctionType([PTR], None)),
                      ("tapeml_parallel_for", llvm.LLVMFunctionType([PTR, PTR, i64, i64], None)),
                      (MARK, llvm.LLVMFunctionType([i64], None)),
                      *((f"{name}{s}", llvm.LLVMFunctionType([t], t)) for name in
                        LIBM_CALLS.values() for s, t in (("", f64), ("f", f32))),
                      *((name, llvm.LLVMFunctionType(
                          [PTR] * (3 + bool(specs[name].bias) + specs[name].residual), None))
                        for name in kernels)):
        if name in uses:
            declaration = llvm.FuncOp(name, fty, linkage=llvm.LinkageAttr("external"))
            if name in specs:  # the kernel's spec, for the backend that links it
                declaration.attributes[kernel.DECLARATION_ATTR] = \
                    specs[name].declaration_attribute()
            module.body.block.add_op(declaration)
    return Counter(map(type, ops))


@dataclass(frozen=True)
class ConvertLoopsToLLVMPass(ModulePass):
    """func/cf/memref/arith/math on flat buffers -> the llvm dialect (see the module doc)."""

    name = "convert-loops-to-llvm"

    threads: int = 1
    """Threads each kernel.parallel_for is shared by: an option, not the host's count, so the
    output is the same on every machine (the CPU backend passes the host's)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.run(op)

    def run(self, module: ModuleOp) -> str | None:
        counts = convert_to_llvm(module, threads=self.threads)
        loops, kernels = counts[kernel.ParallelForOp], counts[kernel.GemmOp]
        shared = f"{loops} outlined loops shared by {self.threads} threads" if loops else ""
        called = f"{kernels} calls of generated kernels" if kernels else ""
        return ", ".join(filter(None, (shared, called))) or None
