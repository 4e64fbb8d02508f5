"""`convert-loops-to-llvm`: the loop form that `tape-to-loops` and `convert-scf-to-cf` leave
(func, cf, memref, arith, math on flat buffers) becomes the `llvm` dialect, which xDSL's
`convert_module` turns into LLVM IR. xDSL 0.75 has none of these conversions.

One pass converts all six dialects at once, so the IR is valid before and after it: first every
`index` value becomes an i64 and every buffer an `!llvm.ptr`, then each op is replaced by its
llvm counterpart. MLIR's own conversions are the semantics followed:

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
from collections.abc import Sequence
from dataclasses import dataclass, replace

from xdsl.context import Context
from xdsl.dialects import arith, cf, func, llvm, memref
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    f32,
    f64,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    RewritePattern,
)
from xdsl.rewriter import Rewriter

from tapeml.dialects import kernel
from tapeml.dialects.kernel import GemmSpec
from tapeml.transforms.arena import element_bytes
from tapeml.transforms.merge_nests import MAY_ALIAS_ATTR
from tapeml.transforms.to_loops import LoweringError

PTR = llvm.LLVMPointerType()


def _llvm_type(t: Attribute) -> Attribute:
    if isinstance(t, IndexType):
        return i64
    if isinstance(t, MemRefType):
        return PTR
    return t


def convert_types(module: ModuleOp) -> None:
    """index -> i64 and memref -> !llvm.ptr for every result and block argument, in place."""
    for op in module.walk():
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


class ArithMathToLLVM(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        kind = type(op)
        if kind is arith.ConstantOp:
            value = op.value
            t = op.result.type
            if isinstance(value, IntegerAttr):
                value = IntegerAttr(value.value.data, t)
            rewriter.replace(op, llvm.ConstantOp(value, t))
        elif kind in _BINARY:
            rewriter.replace(op, _BINARY[kind](*op.operands))
        elif kind in UNARY_INTRINSICS:
            t = op.result.type
            name = f"llvm.{UNARY_INTRINSICS[kind]}.{_suffix(t)}"
            rewriter.replace(op, llvm.CallIntrinsicOp(name, [op.operands[0]], [t]))
        elif kind in LIBM_CALLS:
            t = op.result.type
            rewriter.replace(op, llvm.CallOp(libm_name(op), op.operands[0], return_type=t))
        elif kind in BINARY_INTRINSICS:
            t = op.result.type
            name = f"llvm.{BINARY_INTRINSICS[kind]}.{_suffix(t)}"
            rewriter.replace(op, llvm.CallIntrinsicOp(name, list(op.operands), [t]))
        elif kind in _SIGNED_PICK:
            a, b = op.operands
            pick = llvm.ICmpOp(a, b, IntegerAttr(_ICMP[_SIGNED_PICK[kind]], 64))
            rewriter.replace(op, [pick, llvm.SelectOp(pick, a, b)])
        elif kind is arith.NegfOp:
            rewriter.replace(op, llvm.FNegOp(op.operand))
        elif kind is arith.CmpiOp:
            predicate = IntegerAttr(op.predicate.value.data, 64)
            rewriter.replace(op, llvm.ICmpOp(op.lhs, op.rhs, predicate))
        elif kind is arith.CmpfOp:
            predicate = IntegerAttr(op.predicate.value.data, 64)
            rewriter.replace(op, llvm.FCmpOp(op.lhs, op.rhs, predicate))
        elif kind is arith.SelectOp:
            rewriter.replace(op, llvm.SelectOp(op.cond, op.lhs, op.rhs))
        elif kind is arith.ExtFOp:
            rewriter.replace(op, llvm.FPExtOp(op.input, op.result.type))
        elif kind is arith.TruncFOp:
            rewriter.replace(op, llvm.FPTruncOp(op.input, op.result.type))
        elif kind is arith.SIToFPOp:
            rewriter.replace(op, llvm.SIToFPOp(op.input, op.result.type))
        elif kind is arith.ExtSIOp:
            rewriter.replace(op, llvm.SExtOp(op.input, op.result.type))
        elif kind is arith.ExtUIOp:
            rewriter.replace(op, llvm.ZExtOp(op.input, op.result.type))
        elif kind is arith.TruncIOp:
            rewriter.replace(op, llvm.TruncOp(op.input, op.result.type))
        elif kind is arith.FPToSIOp:  # the saturating form: no poison out of range
            t, source = op.result.type, op.input.type
            name = f"llvm.fptosi.sat.i{t.bitwidth}.{_suffix(source)}"
            rewriter.replace(op, llvm.CallIntrinsicOp(name, [op.input], [t]))
        elif kind is arith.BitcastOp:
            rewriter.replace(op, llvm.BitcastOp(op.input, op.result.type))
        elif kind is arith.IndexCastOp:
            rewriter.replace(op, [], [op.input])  # index is i64 already


_ICMP = {"eq": 0, "ne": 1, "slt": 2, "sle": 3, "sgt": 4, "sge": 5}


class ControlFlowToLLVM(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, cf.BranchOp):
            rewriter.replace(op, llvm.BrOp(op.successor, *op.arguments))
        elif isinstance(op, cf.ConditionalBranchOp):
            rewriter.replace(op, llvm.CondBrOp(op.cond, op.then_block, op.then_arguments,
                                               op.else_block, op.else_arguments))


@functools.cache
def _template(kind: str, element: Attribute) -> dict[str, Attribute]:
    """The properties xDSL's constructor gives an llvm.getelementptr inbounds (base + one
    index) or an llvm.load of `element`, read off one built so, once per process: the ops of
    every load and store are then made with `create` (the constructor checks its arguments
    and builds these attributes each time: a fifth of this pass)."""
    block = Block(arg_types=[PTR, i64])
    if kind == "gep":
        op = llvm.GEPOp(block.args[0], [llvm.GEP_USE_SSA_VAL], element,
                        ssa_indices=[block.args[1]], inbounds=True)
    else:
        op = llvm.LoadOp(block.args[0], element)
    return dict(op.properties)


def _gep(base: SSAValue, index: SSAValue, element: Attribute) -> llvm.GEPOp:
    """llvm.GEPOp(base, [GEP_USE_SSA_VAL], element, ssa_indices=[index], inbounds=True)."""
    return llvm.GEPOp.create(operands=[base, index], result_types=[PTR],
                             properties=_template("gep", element))


@dataclass
class MemrefToLLVM(RewritePattern):
    """Buffers are flat and contiguous: element i of a buffer is at ptr + i."""

    sizes: dict[Operation, int]
    """Bytes of each memref.alloc's buffer (read before the types become pointers)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, memref.LoadOp):
            (index,) = op.indices
            t = op.res.type
            gep = _gep(op.memref, index, t)
            load = llvm.LoadOp.create(operands=[gep.result], result_types=[t],
                                      properties=_template("load", t))
            rewriter.replace(op, [gep, load])
        elif isinstance(op, memref.StoreOp):
            (index,) = op.indices
            gep = _gep(op.memref, index, op.value.type)
            rewriter.replace(op, [gep, llvm.StoreOp(op.value, gep)])
        elif isinstance(op, memref.AllocOp):
            size = llvm.ConstantOp(IntegerAttr(self.sizes[op], i64), i64)
            call = llvm.CallOp("malloc", size, return_type=PTR)
            rewriter.replace(op, [size, call])
        elif isinstance(op, memref.DeallocOp):
            rewriter.replace(op, llvm.CallOp("free", op.memref))
        elif isinstance(op, memref.ViewOp):  # plan-arena's: the arena's address plus a shift
            rewriter.replace(op, _gep(op.source, op.byte_shift, IntegerType(8)))
        elif isinstance(op, memref.GetGlobalOp):
            rewriter.replace(op, llvm.AddressOfOp(op.name_.root_reference, PTR))
        elif isinstance(op, memref.GlobalOp):
            t = op.type
            value = op.initial_value
            assert isinstance(value, DenseIntOrFPElementsAttr)
            array = llvm.LLVMArrayType(math.prod(t.get_shape()), t.element_type)
            rewriter.replace(op, llvm.GlobalOp(array, op.sym_name, "internal", constant=True,
                                               value=value, alignment=64))


@dataclass
class KernelToLLVM(RewritePattern):
    """kernel.gemm -> a call to the generated kernel its parameters name (declared here, defined
    by the CPU backend: tapeml/codegen/gemm/). kernel.parallel_for -> its buffers' addresses in
    a stack array, and a call to the thread pool (tapeml/codegen/pool.py) with the address of
    the callee's entry, which reads them back. kernel.mark -> a call of the profiling clock
    (MARK, with its entry's index). kernel.view -> the buffer's address plus the offset."""

    symbols: dict[Operation, str]
    """Each kernel op's callee (read before the buffer types become pointers)."""
    views: dict[Operation, Attribute]
    """Each kernel.view's element type (the same)."""
    threads: int
    prefix: str
    """Before the names of the functions the parallel_for's call (FuncToLLVM's)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, kernel.GemmOp):
            buffers = [op.a, op.b, op.c, *op.extra]
            rewriter.replace(op, llvm.CallOp(self.symbols[op], *buffers))
        elif isinstance(op, kernel.ViewOp):  # the buffer's address plus the offset
            rewriter.replace(op, _gep(op.source, op.offset, self.views[op]))
        elif isinstance(op, kernel.ParallelForOp):
            count = llvm.ConstantOp(IntegerAttr(max(1, len(op.buffers)), i64), i64)
            context = llvm.AllocaOp(count, PTR, alignment=8)
            ops: list[Operation] = [count, context]
            for i, buffer in enumerate(op.buffers):
                slot = llvm.GEPOp(context, [i], PTR)
                ops += [slot, llvm.StoreOp(buffer, slot)]
            entry = llvm.AddressOfOp(_entry_name(self.prefix + op.callee.root_reference.data),
                                     PTR)
            total = llvm.ConstantOp(IntegerAttr(op.iterations.value.data, i64), i64)
            threads = llvm.ConstantOp(IntegerAttr(self.threads, i64), i64)
            call = llvm.CallOp("tapeml_parallel_for", entry, context, total, threads)
            rewriter.replace(op, [*ops, entry, total, threads, call])
        elif isinstance(op, kernel.MarkOp):
            index = llvm.ConstantOp(IntegerAttr(op.index.value.data, i64), i64)
            rewriter.replace(op, [index, llvm.CallOp(MARK, index)])


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


@dataclass
class FuncToLLVM(RewritePattern):
    prefix: str
    """Put before every defined function's name (SYMBOL_PREFIX on the CPU)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, func.ReturnOp):
            if op.arguments:
                raise LoweringError("convert-loops-to-llvm: functions write their results to "
                                    "output buffers and return nothing (run tape-to-loops)")
            rewriter.replace(op, llvm.ReturnOp())
        elif isinstance(op, func.CallOp):  # a function of buffers (merge-loop-nests')
            rewriter.replace(op, llvm.CallOp(self.prefix + op.callee.root_reference.data,
                                             *op.arguments))
        elif isinstance(op, func.FuncOp) and not op.is_declaration:
            inputs = [_llvm_type(t) for t in op.function_type.inputs]
            fty = llvm.LLVMFunctionType(inputs, None)
            converted = llvm.FuncOp(self.prefix + op.sym_name.data, fty,
                                    linkage=llvm.LinkageAttr("external"),
                                    body=op.detach_region(op.body))
            if MAY_ALIAS_ATTR in op.attributes:  # (merge-loop-nests' runs)
                converted.attributes[MAY_ALIAS_ATTR] = op.attributes[MAY_ALIAS_ATTR]
            rewriter.replace(op, converted)


def _convert_once(module: ModuleOp, patterns: list[RewritePattern]) -> None:
    """Each op of `module` as it is now, in order, rewritten by the first of `patterns` that
    matches it: every pattern here replaces one op by ops of the llvm dialect, which no pattern
    matches again, so one pass over a snapshot does what xDSL's greedy walker did, without its
    worklist and its dead-code checks (the CNN step's pass 0.27 -> 0.21 s)."""
    for op in list(module.walk()):
        if op.parent is None:  # the module, or an op a rewrite took away with another
            continue
        rewriter = PatternRewriter(op)
        for pattern in patterns:
            pattern.match_and_rewrite(op, rewriter)
            if rewriter.has_done_action:
                break


def convert_to_llvm(module: ModuleOp, extra: Sequence[RewritePattern] = (),
                    threads: int = 1, prefix: str = SYMBOL_PREFIX) -> None:
    """Convert a loop-form module (after convert-scf-to-cf) to the llvm dialect, in place.
    `extra` patterns run first (the GPU's: gpu_to_nvvm.py); `threads`: how many threads each
    kernel.parallel_for is shared by (the CPU backend passes the host's); `prefix`: before
    each function's symbol (SYMBOL_PREFIX; the GPU keeps its kernels' names)."""
    leftover: set[str] = set()
    sizes: dict[memref.AllocOp, int] = {}
    symbols: dict[kernel.GemmOp, str] = {}
    views: dict[kernel.ViewOp, Attribute] = {}
    entries: dict[str, int] = {}
    for op in module.walk():  # once: what the patterns and the declarations need
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
    convert_types(module)
    _convert_once(module, [*extra, ArithMathToLLVM(), ControlFlowToLLVM(), MemrefToLLVM(sizes),
                           FuncToLLVM(prefix), KernelToLLVM(symbols, views, threads, prefix)])
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
        counts = Counter(type(op) for op in module.walk())
        loops, kernels = counts[kernel.ParallelForOp], counts[kernel.GemmOp]
        convert_to_llvm(module, threads=self.threads)
        shared = f"{loops} outlined loops shared by {self.threads} threads" if loops else ""
        called = f"{kernels} calls of generated kernels" if kernels else ""
        return ", ".join(filter(None, (shared, called))) or None
