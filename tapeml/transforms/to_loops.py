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
ops, which read the padded input through a bounds check). These are plain loops, correct first:
blocking, vectorization and threads are the CPU performance work's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    FloatAttr,
    FunctionType,
    IndexType,
    MemRefType,
    ModuleOp,
    StringAttr,
    TensorType,
    f32,
    f64,
    i1,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException

from tapeml.codegen.gemm import GemmSpec
from tapeml.dialects import kernel, tape
from tapeml.dialects.tape import numpy_to_dense
from tapeml.transforms.transcendentals import Math

INDEX = IndexType()


class LoweringError(DiagnosticException):
    """An op this lowering does not handle (yet)."""


def buffer_type(t: TensorType) -> MemRefType:
    """The flat buffer holding a tensor of type `t`."""
    return MemRefType(t.get_element_type(), [math.prod(t.get_shape())])  # rank 0: one element


def strides(shape: Sequence[int]) -> list[int]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return out[::-1]


# ----------------------------------------------------------------------------------------------
# Emitting loops and scalar code


@dataclass
class Emitter:
    """Builds loops, index arithmetic and scalar code at an insertion point (the constants it
    repeats are left to cse and canonicalize)."""

    builder: Builder
    libm: bool = False
    """Call libm for exp, log, tanh and sigmoid instead of the vectorizable arithmetic."""

    def insert(self, op: Operation) -> SSAValue:
        self.builder.insert(op)
        return op.results[0] if op.results else None

    def index(self, value: int) -> SSAValue:
        return self.insert(arith.ConstantOp.from_int_and_width(value, INDEX))

    def scalar(self, value: float, t: Attribute) -> SSAValue:
        if t == i1:
            return self.insert(arith.ConstantOp.from_int_and_width(int(bool(value)), i1))
        return self.insert(arith.ConstantOp(FloatAttr(float(value), t)))

    def linear(self, ivs: Sequence[SSAValue | int], steps: Sequence[int],
               offset: int = 0) -> SSAValue:
        """offset + sum(iv * step), skipping zero steps."""
        total: SSAValue | None = None
        constant = offset
        for iv, step in zip(ivs, steps, strict=True):
            if step == 0:
                continue
            if isinstance(iv, int):
                constant += iv * step
                continue
            term = iv if step == 1 else self.insert(arith.MuliOp(iv, self.index(step)))
            total = term if total is None else self.insert(arith.AddiOp(total, term))
        if total is None:
            return self.index(constant)
        return total if constant == 0 else self.insert(arith.AddiOp(total, self.index(constant)))

    def loops(self, shape: Sequence[int], body: Callable[[Emitter, list[SSAValue]], None],
              parallel: bool = False) -> None:
        """A nest of scf.for over `shape`, `body` emitted innermost with the induction vars.
        `parallel`: the iterations write disjoint elements and read nothing another iteration
        writes, so they may run in any order or at once: one scf.parallel over all of `shape`
        (a GPU kernel's threads, or the CPU's loop nest again)."""
        if not shape:
            body(self, [])
            return
        if parallel:
            block = Block(arg_types=[INDEX] * len(shape))
            inner = Emitter(Builder(InsertPoint.at_end(block)), self.libm)
            body(inner, list(block.args))
            inner.insert(scf.ReduceOp())
            zero, one = self.index(0), self.index(1)
            self.insert(scf.ParallelOp([zero] * len(shape), [self.index(d) for d in shape],
                                       [one] * len(shape), Region(block)))
            return
        zero, one = self.index(0), self.index(1)
        block = Block(arg_types=[INDEX])
        loop = scf.ForOp(zero, self.index(shape[0]), one, [], block)
        self.insert(loop)
        inner = Emitter(Builder(InsertPoint.at_end(block)), self.libm)
        inner.loops(shape[1:], lambda e, ivs: body(e, [block.args[0], *ivs]))
        inner.insert(scf.YieldOp())

    def reduce(self, shape: Sequence[int], init: SSAValue,
               step: Callable[[Emitter, list[SSAValue], SSAValue], SSAValue]) -> SSAValue:
        """Fold `step(ivs, acc)` over `shape` in row-major order, from `init`."""
        if not shape:
            return step(self, [], init)
        block = Block(arg_types=[INDEX, init.type])
        loop = scf.ForOp(self.index(0), self.index(shape[0]), self.index(1), [init], block)
        self.insert(loop)
        inner = Emitter(Builder(InsertPoint.at_end(block)), self.libm)
        acc = inner.reduce(shape[1:], block.args[1],
                           lambda e, ivs, a: step(e, [block.args[0], *ivs], a))
        inner.insert(scf.YieldOp(acc))
        return loop.results[0]

    def if_(self, cond: SSAValue, body: Callable[[Emitter], None]) -> None:
        """scf.if without results: `body` runs where `cond` holds."""
        block = Block()
        inner = Emitter(Builder(InsertPoint.at_end(block)), self.libm)
        body(inner)
        inner.insert(scf.YieldOp())
        self.insert(scf.IfOp(cond, [], [block]))

    def in_range(self, value: SSAValue, size: int) -> SSAValue:
        """0 <= value < size."""
        return self.insert(arith.AndIOp(
            self.insert(arith.CmpiOp(value, self.index(0), "sge")),
            self.insert(arith.CmpiOp(value, self.index(size), "slt"))))

    def clamp(self, value: SSAValue, size: int) -> SSAValue:
        """value clamped into [0, size): an address that is always in bounds."""
        return self.insert(arith.MinSIOp(self.insert(arith.MaxSIOp(value, self.index(0))),
                                         self.index(max(size - 1, 0))))

    def load(self, buffer: SSAValue, index: SSAValue) -> SSAValue:
        return self.insert(memref.LoadOp.get(buffer, [index]))

    def store(self, value: SSAValue, buffer: SSAValue, index: SSAValue) -> None:
        self.insert(memref.StoreOp.get(value, buffer, [index]))


_CMP = {"lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge", "eq": "oeq", "ne": "une"}


def scalar_op(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """The scalar computation of one elementwise tape op on one element of each operand, as
    numpy computes it (tapeml/interpreters/tape.py)."""
    t = op.results[0].type.get_element_type()
    binary = {tape.AddOp: arith.AddfOp, tape.SubOp: arith.SubfOp, tape.MulOp: arith.MulfOp,
              tape.DivOp: arith.DivfOp, tape.MaximumOp: arith.MaximumfOp,
              tape.MinimumOp: arith.MinimumfOp, tape.PowOp: xmath.PowFOp}
    unary = {tape.ExpOp: xmath.ExpOp, tape.LogOp: xmath.LogOp, tape.TanhOp: xmath.TanhOp,
             tape.SqrtOp: xmath.SqrtOp, tape.NegOp: arith.NegfOp}
    kind = type(op)
    if kind in binary:
        return e.insert(binary[kind](*args))
    if not e.libm and kind in (tape.ExpOp, tape.LogOp, tape.TanhOp, tape.SigmoidOp):
        approximate = Math(e, t)
        return {tape.ExpOp: approximate.exp, tape.LogOp: approximate.log,
                tape.TanhOp: approximate.tanh, tape.SigmoidOp: approximate.sigmoid}[kind](args[0])
    if kind in unary:
        return e.insert(unary[kind](*args))
    if kind is tape.SigmoidOp:  # 1 / (1 + exp(-x))
        one = e.scalar(1.0, t)
        denominator = e.insert(arith.AddfOp(one, e.insert(xmath.ExpOp(e.insert(
            arith.NegfOp(args[0]))))))
        return e.insert(arith.DivfOp(one, denominator))
    if kind is tape.ReluOp:  # maximum(x, 0), NaN propagating
        return e.insert(arith.MaximumfOp(args[0], e.scalar(0.0, t)))
    if kind is tape.CmpOp:
        return e.insert(arith.CmpfOp(args[0], args[1], _CMP[op.params["predicate"]]))
    if kind is tape.SelectOp:
        return e.insert(arith.SelectOp(*args))
    if kind is tape.CastOp:
        source = op.operands[0].type.get_element_type()
        if source == t:
            return args[0]
        wider = source.bitwidth < t.bitwidth
        return e.insert((arith.ExtFOp if wider else arith.TruncFOp)(args[0], t))
    if kind is tape.ConstantOp:
        return e.scalar(float(op.params["value"].reshape(-1)[0]), t)
    raise LoweringError(f"tape-to-loops: {op.name} is not elementwise")


# ----------------------------------------------------------------------------------------------
# Per-op lowerings: each writes op's result into `out` (a fresh buffer) from `ins` (buffers)


def _shape(v: SSAValue) -> tuple[int, ...]:
    return v.type.get_shape()


def _broadcast_steps(source: Sequence[int], target: Sequence[int]) -> list[int]:
    """Strides reading a row-major `source` broadcast (numpy rules) to `target`."""
    lead = len(target) - len(source)
    src = strides(source)
    return [0 if i < lead or source[i - lead] == 1 else src[i - lead]
            for i in range(len(target))]


def lower_elementwise(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue) -> None:
    shape = _shape(op.results[0])
    steps = [_broadcast_steps(_shape(v), shape) for v in op.operands]

    def body(e: Emitter, ivs: list[SSAValue]) -> None:
        elements = [e.load(buf, e.linear(ivs, s)) for buf, s in zip(ins, steps, strict=True)]
        if isinstance(op, tape.FusedOp):
            value = _fused_body(e, op.body.block, elements)
        else:
            value = scalar_op(e, op, elements)
        e.store(value, out, e.linear(ivs, strides(shape)))

    e.loops(shape, body, parallel=True)


def _fused_body(e: Emitter, block: Block, elements: list[SSAValue]) -> SSAValue:
    env: dict[SSAValue, SSAValue] = dict(zip(block.args, elements, strict=True))
    for inner in block.ops:
        if isinstance(inner, tape.YieldOp):
            return env[inner.value]
        env[inner.results[0]] = scalar_op(e, inner, [env[o] for o in inner.operands])
    raise AssertionError("a tape.fused body ends in tape.yield")


def lower_copy(e: Emitter, out_shape: Sequence[int], source: SSAValue, out: SSAValue,
               read: Callable[[Emitter, list[SSAValue]], SSAValue]) -> None:
    """out[i] = read(i) for every index i of `out_shape`."""
    def body(e: Emitter, ivs: list[SSAValue]) -> None:
        e.store(read(e, ivs), out, e.linear(ivs, strides(out_shape)))

    e.loops(out_shape, body, parallel=True)


def lower_layout(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue) -> None:
    shape = _shape(op.results[0])
    p = op.params
    if isinstance(op, tape.BroadcastOp):
        steps = _broadcast_steps(_shape(op.input), shape)
        lower_copy(e, shape, ins[0], out, lambda e, ivs: e.load(ins[0], e.linear(ivs, steps)))
    elif isinstance(op, tape.PermuteOp):
        src = strides(_shape(op.input))
        steps = [src[axis] for axis in p["perm"]]
        lower_copy(e, shape, ins[0], out, lambda e, ivs: e.load(ins[0], e.linear(ivs, steps)))
    elif isinstance(op, tape.SliceOp):
        src = strides(_shape(op.input))
        offset = sum(a * s for a, s in zip(p["start"], src, strict=True))
        steps = [st * s for st, s in zip(p["step"], src, strict=True)]
        lower_copy(e, shape, ins[0], out,
                   lambda e, ivs: e.load(ins[0], e.linear(ivs, steps, offset)))
    elif isinstance(op, tape.PadOp):
        lower_copy(e, shape, ins[0], out, lambda e, ivs: _padded_read(e, op, ins[0], ivs))
    elif isinstance(op, tape.ConcatOp):
        _lower_concat(e, op, ins, out)
    else:
        raise LoweringError(f"tape-to-loops: {op.name} is not a layout op")


def _padded_read(e: Emitter, op: tape.PadOp, source: SSAValue, ivs: list[SSAValue]) -> SSAValue:
    """source[ivs - low] where that is inside the source, else the pad value (the index is
    clamped in bounds first, so nothing is read outside the buffer)."""
    shape = _shape(op.input)
    t = op.result.type.get_element_type()
    inside: SSAValue | None = None
    clamped = []
    for iv, low, d in zip(ivs, op.params["low"], shape, strict=True):
        src = e.insert(arith.SubiOp(iv, e.index(low))) if low else iv
        ok = e.insert(arith.AndIOp(
            e.insert(arith.CmpiOp(src, e.index(0), "sge")),
            e.insert(arith.CmpiOp(src, e.index(d), "slt"))))
        inside = ok if inside is None else e.insert(arith.AndIOp(inside, ok))
        clamped.append(e.insert(arith.MinSIOp(e.insert(arith.MaxSIOp(src, e.index(0))),
                                              e.index(max(d - 1, 0)))))
    value = e.load(source, e.linear(clamped, strides(shape)))
    if inside is None:
        return value
    return e.insert(arith.SelectOp(inside, value, e.scalar(op.params["value"], t)))


def _lower_concat(e: Emitter, op: tape.ConcatOp, ins: list[SSAValue], out: SSAValue) -> None:
    axis = op.params["axis"]
    out_steps = strides(_shape(op.result))
    offset = 0
    for value, buf in zip(op.inputs, ins, strict=True):
        shape = _shape(value)
        here = offset * out_steps[axis]

        def body(e: Emitter, ivs: list[SSAValue], buf=buf, shape=shape, here=here) -> None:
            e.store(e.load(buf, e.linear(ivs, strides(shape))), out,
                    e.linear(ivs, out_steps, here))

        e.loops(shape, body, parallel=True)
        offset += shape[axis]


ROW_WIDTH = 8
"""The least number of contiguous kept elements for which `row_reductions` keeps a row of
accumulators (fewer would not fill a vector)."""


def lower_reduction(e: Emitter, op: tape.SumOp | tape.MaxOp, ins: list[SSAValue],
                    out: SSAValue, rows: PlanReport | None = None) -> None:
    """One accumulator per output, folded over the reduced axes in row-major order. With
    `rows` (the CPU's row_reductions; the report takes the scratch), when the input's last
    axes are kept (a bias gradient: a sum over the batch), a whole row of accumulators is
    folded at a time instead, so the innermost loop runs along contiguous memory and
    vectorizes. Every output still adds the same terms in the same order."""
    shape = _shape(op.input)
    axes = op.params["axes"]
    kept = [i for i in range(len(shape)) if i not in axes]
    src = strides(shape)
    t = op.result.type.get_element_type()
    out_shape = [shape[i] for i in kept]

    # an f32 sum accumulates in f64: summed one after another, f32 would lose the small terms
    # of a long sum (numpy sums pairwise); the result is rounded to f32 once, at the end
    wide = f64 if isinstance(op, tape.SumOp) and t == f32 else t
    combine = arith.AddfOp if isinstance(op, tape.SumOp) else arith.MaximumfOp
    last = max(axes, default=len(shape))
    width = math.prod(shape[last + 1:])
    if rows is not None and axes and width >= ROW_WIDTH:
        _row_reduction(e, op, ins[0], out, rows, wide, combine)
        return

    def body(e: Emitter, ivs: list[SSAValue]) -> None:
        init = e.scalar(0.0 if isinstance(op, tape.SumOp) else -np.inf, wide)

        def step(e: Emitter, inner: list[SSAValue], acc: SSAValue) -> SSAValue:
            index: list[SSAValue] = [None] * len(shape)
            for i, iv in zip(kept, ivs, strict=True):
                index[i] = iv
            for i, iv in zip(axes, inner, strict=True):
                index[i] = iv
            x = e.load(ins[0], e.linear(index, src))
            if wide != t:
                x = e.insert(arith.ExtFOp(x, wide))
            return e.insert(combine(acc, x))

        total = e.reduce([shape[a] for a in axes], init, step)
        if wide != t:
            total = e.insert(arith.TruncFOp(total, t))
        e.store(total, out, e.linear(ivs, strides(out_shape)))

    e.loops(out_shape, body, parallel=True)


def _row_reduction(e: Emitter, op: tape.SumOp | tape.MaxOp, x: SSAValue, out: SSAValue,
                   report: PlanReport, wide: Attribute, combine: type[Operation]) -> None:
    """`lower_reduction` with rows: for each index of the kept axes before the last reduced
    one (in parallel), a row of accumulators over the trailing kept axes (contiguous in x and
    in out), folded over the reduced indices in row-major order, then stored."""
    shape = _shape(op.input)
    axes = op.params["axes"]
    last = max(axes)
    width = math.prod(shape[last + 1:])
    outer = [i for i in range(last) if i not in axes]
    t = op.result.type.get_element_type()
    size = math.prod(shape[i] for i in outer) * width
    acc = e.insert(memref.AllocOp.get(wide, shape=[size]))
    report.scratch_bytes = max(report.scratch_bytes, size * (wide.bitwidth // 8))
    src = strides(shape)
    init = 0.0 if isinstance(op, tape.SumOp) else -np.inf

    def row(e: Emitter, outer_ivs: list[SSAValue]) -> None:
        start = e.linear(outer_ivs, [s * width for s in strides([shape[i] for i in outer])])

        def fold(e: Emitter, reduced: list[SSAValue]) -> None:
            index: list[SSAValue | int] = [0] * (last + 1)
            for i, iv in zip(outer, outer_ivs, strict=True):
                index[i] = iv
            for i, iv in zip(axes, reduced, strict=True):
                index[i] = iv
            base = e.linear(index, src[:last + 1])

            def one(e: Emitter, w: list[SSAValue]) -> None:
                at = e.insert(arith.AddiOp(start, w[0]))
                value = e.load(x, e.insert(arith.AddiOp(base, w[0])))
                if wide != t:
                    value = e.insert(arith.ExtFOp(value, wide))
                e.store(e.insert(combine(e.load(acc, at), value)), acc, at)

            e.loops([width], one)

        e.loops([width], lambda e, w: e.store(e.scalar(init, wide), acc,
                                              e.insert(arith.AddiOp(start, w[0]))))
        e.loops([shape[a] for a in axes], fold)

        def store(e: Emitter, w: list[SSAValue]) -> None:
            at = e.insert(arith.AddiOp(start, w[0]))
            value = e.load(acc, at)
            e.store(e.insert(arith.TruncFOp(value, t)) if wide != t else value, out, at)

        e.loops([width], store)

    e.loops([shape[i] for i in outer], row, parallel=True)
    e.insert(memref.DeallocOp.get(acc))


def lower_matmul(e: Emitter, op: tape.MatmulOp, ins: list[SSAValue], out: SSAValue,
                 views: dict[SSAValue, list[int]]) -> None:
    """One `kernel.gemm` (the generated BLIS-style kernel on the CPU). An operand that is a
    transpose of its last two axes (in `views`: the strides of its unpermuted buffer) is read
    in place through its strides."""
    out_shape = _shape(op.result)
    batch = math.prod(out_shape[:-2])
    a_shape, b_shape = _shape(op.lhs), _shape(op.rhs)
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]

    def steps(value: SSAValue, shape: Sequence[int]) -> tuple[int, int, int]:
        s = views.get(value) or strides(shape)
        return (s[0] if len(shape) == 3 else 0, s[-2], s[-1])

    spec = GemmSpec("f32" if op.result.type.get_element_type() == f32 else "f64", batch, m, n,
                    k, steps(op.lhs, a_shape), steps(op.rhs, b_shape), m * n, False)
    e.insert(kernel.GemmOp(ins[0], ins[1], out, spec))


def transposes_read_in_place(block: Block) -> dict[SSAValue, list[int]]:
    """Permutes that swap the last two axes and are only read by matmuls: those read their
    input in place, with swapped strides (result -> its strides in the input buffer)."""
    views = {}
    for op in block.ops:
        if not isinstance(op, tape.PermuteOp):
            continue
        perm = list(op.params["perm"])
        rank = len(perm)
        if rank not in (2, 3) or perm != [*range(rank - 2), rank - 1, rank - 2]:
            continue
        if op.result.uses and all(isinstance(u.operation, tape.MatmulOp)
                                  for u in op.result.uses):
            source = strides(_shape(op.input))
            views[op.result] = [source[p] for p in perm]
    return views


def lower_constant(e: Emitter, op: tape.ConstantOp, module: ModuleOp, out: SSAValue,
                   names: Callable[[], str]) -> SSAValue:
    """A splat fills `out`; any other constant becomes a memref.global read in place."""
    value = op.params["value"]
    flat = value.reshape(-1)
    t = op.result.type.get_element_type()
    if flat.size == 0:
        return out  # nothing to hold
    if np.unique(flat.view(np.uint8).reshape(flat.size, -1), axis=0).shape[0] == 1:
        element = e.scalar(float(flat[0]), t)
        e.loops([flat.size], lambda e, ivs: e.store(element, out, ivs[0]), parallel=True)
        return out
    name = names()
    kind = buffer_type(op.result.type)
    module.body.block.add_op(memref.GlobalOp.get(StringAttr(name), kind,
                                                 numpy_to_dense_flat(value, kind)))
    return e.insert(memref.GetGlobalOp(name, kind))


def numpy_to_dense_flat(value: np.ndarray, kind: MemRefType) -> DenseIntOrFPElementsAttr:
    attr = numpy_to_dense(np.ascontiguousarray(value).reshape(-1))
    return DenseIntOrFPElementsAttr(TensorType(kind.element_type, kind.get_shape()), attr.data)


# ----------------------------------------------------------------------------------------------
# Window ops: unfold and fold index linearly; the convolutions and the pools read (or write) the
# padded input through a bounds check, so nothing outside a buffer is ever addressed.


def lower_unfold(e: Emitter, op: tape.UnfoldOp, ins: list[SSAValue], out: SSAValue) -> None:
    shape = _shape(op.input)
    k = len(op.params["kernel"])
    src = strides(shape)
    batch = len(shape) - k
    steps = (src[:batch] + [s * st for s, st in zip(op.params["stride"], src[batch:],
                                                    strict=True)]
             + [d * st for d, st in zip(op.params["dilation"], src[batch:], strict=True)])
    out_shape = _shape(op.result)
    lower_copy(e, out_shape, ins[0], out,
               lambda e, ivs: e.load(ins[0], e.linear(ivs, steps)))


def _zero(e: Emitter, out: SSAValue, size: int, t: Attribute) -> None:
    zero = e.scalar(0.0, t)
    e.loops([size], lambda e, ivs: e.store(zero, out, ivs[0]), parallel=True)


def _accumulate(e: Emitter, out: SSAValue, index: SSAValue, value: SSAValue) -> None:
    e.store(e.insert(arith.AddfOp(e.load(out, index), value)), out, index)


def lower_fold(e: Emitter, op: tape.FoldOp, ins: list[SSAValue], out: SSAValue) -> None:
    """out[window position + tap] += in[window, tap], for every window and tap in order."""
    in_shape, out_shape = _shape(op.input), _shape(op.result)
    k = len(op.params["kernel"])
    dst = strides(out_shape)
    batch = len(out_shape) - k
    steps = (dst[:batch] + [s * st for s, st in zip(op.params["stride"], dst[batch:],
                                                    strict=True)]
             + [d * st for d, st in zip(op.params["dilation"], dst[batch:], strict=True)])
    _zero(e, out, math.prod(out_shape), op.result.type.get_element_type())
    # windows that do not overlap (stride >= dilated kernel) add into disjoint elements
    disjoint = all(s >= (kk - 1) * d + 1 for s, kk, d in zip(
        op.params["stride"], op.params["kernel"], op.params["dilation"], strict=True))
    e.loops(in_shape, lambda e, ivs: _accumulate(
        e, out, e.linear(ivs, steps), e.load(ins[0], e.linear(ivs, strides(in_shape)))),
        parallel=disjoint)


def _tap(e: Emitter, position: SSAValue, stride: int, tap: SSAValue, dilation: int,
         pad: int) -> SSAValue:
    """position * stride + tap * dilation - pad: the input row (or column) a tap reads."""
    return e.linear([position, tap], [stride, dilation], -pad)


def _valid(count: int, size: int, stride: int, offset: int) -> tuple[int, int]:
    """The output positions o in [0, count) whose input o * stride + offset is in [0, size)."""
    low = max(0, -(offset // stride))  # ceil(-offset / stride)
    high = min(count, (size - 1 - offset) // stride + 1) if size - 1 - offset >= 0 else 0
    return low, max(low, high)


@dataclass
class _ConvGeometry:
    """conv2d's shapes and, per kernel tap, the output rows and columns it reads inside the
    input: loops over exactly those need no bounds checks."""

    n: int
    c: int
    h: int
    w: int
    o: int
    cg: int
    kh: int
    kw: int
    oh: int
    ow: int
    groups: int
    params: dict[str, Any]

    @classmethod
    def of(cls, x_shape: Sequence[int], w_shape: Sequence[int], y_shape: Sequence[int],
           params: dict[str, Any]) -> _ConvGeometry:
        n, c, h, w = x_shape
        o, cg, kh, kw = w_shape
        return cls(n, c, h, w, o, cg, kh, kw, y_shape[2], y_shape[3], params["groups"], params)

    def _ranges(self):
        """(i, j, rows, columns) per tap: the output rows and columns it reads inside."""
        (sh, sw), (dh, dw) = self.params["stride"], self.params["dilation"]
        top, left = self.params["padding"][:2]
        for i in range(self.kh):
            for j in range(self.kw):
                yield (i, j, _valid(self.oh, self.h, sh, i * dh - top),
                       _valid(self.ow, self.w, sw, j * dw - left))

    def taps(self):
        """(i, j, rows, columns, input offset of the first position) per tap reading input."""
        (sh, sw), (dh, dw) = self.params["stride"], self.params["dilation"]
        top, left = self.params["padding"][:2]
        for i, j, (y0, y1), (x0, x1) in self._ranges():
            if y0 < y1 and x0 < x1:
                first = (y0 * sh + i * dh - top) * self.w + x0 * sw + j * dw - left
                yield i, j, (y0, y1), (x0, x1), first

    def padding_reads(self):
        """(i, j, rectangles) per tap reading the padding somewhere: the rectangles
        ((row from, to), (column from, to)) of output positions whose tap is padding. The
        direct loops skip those taps, so what they add (0 * w, NaN where w is not finite) is
        added from here."""
        for i, j, (y0, y1), (x0, x1) in self._ranges():
            if y0 >= y1 or x0 >= x1:
                y0, y1, x0, x1 = 0, 0, 0, 0  # every position reads padding
            rectangles = [((0, y0), (0, self.ow)), ((y1, self.oh), (0, self.ow)),
                          ((y0, y1), (0, x0)), ((y0, y1), (x1, self.ow))]
            rectangles = [(r, c) for r, c in rectangles if r[0] < r[1] and c[0] < c[1]]
            if rectangles:
                yield i, j, rectangles

    def x_steps(self) -> list[int]:  # over (b, group, channel in group, row, column)
        sh, sw = self.params["stride"]
        return [self.c * self.h * self.w, self.cg * self.h * self.w, self.h * self.w,
                sh * self.w, sw]

    def y_steps(self) -> list[int]:  # over (b, group, output channel in group, row, column)
        og = self.o // self.groups
        return [self.o * self.oh * self.ow, og * self.oh * self.ow, self.oh * self.ow,
                self.ow, 1]

    def w_steps(self) -> list[int]:  # over (group, output channel in group, channel in group)
        og = self.o // self.groups
        return [og * self.cg * self.kh * self.kw, self.cg * self.kh * self.kw,
                self.kh * self.kw]


def lower_conv2d(e: Emitter, op: tape.Conv2dOp, ins: list[SSAValue], out: SSAValue) -> None:
    """out[b, o, y, :] += in[...] * w[o, c, i, j]: per output row, the taps that read inside
    the input (the padding contributes nothing) and their channels; the innermost loop runs
    along the row, which stays in cache, and LLVM vectorizes it."""
    geo = _ConvGeometry.of(_shape(op.input), _shape(op.weight), _shape(op.result), op.params)
    og = geo.o // geo.groups
    t = op.result.type.get_element_type()
    _zero(e, out, math.prod(_shape(op.result)), t)

    def row(e: Emitter, ivs: list[SSAValue]) -> None:
        b, gi, oi, y = ivs
        for i, j, (y0, y1), (x0, x1), first in geo.taps():
            def tap(e: Emitter, i=i, j=j, y0=y0, x0=x0, x1=x1, first=first) -> None:
                def body(e: Emitter, inner: list[SSAValue]) -> None:
                    ci, xx = inner
                    x = e.load(ins[0], e.linear([b, gi, ci, y, xx], geo.x_steps(),
                                                first - y0 * geo.x_steps()[3]))
                    weight = e.load(ins[1], e.linear([gi, oi, ci], geo.w_steps(),
                                                     i * geo.kw + j))
                    index = e.linear([b, gi, oi, y, xx], geo.y_steps(), x0)
                    _accumulate(e, out, index, e.insert(arith.MulfOp(x, weight)))

                e.loops([geo.cg, x1 - x0], body)

            e.if_(e.in_range(e.linear([y], [1], -y0), y1 - y0), tap)
        for i, j, rectangles in geo.padding_reads():
            zero = e.scalar(0.0, t)
            def weight_times_zero(e: Emitter, inner: list[SSAValue], acc: SSAValue,
                                  i=i, j=j, zero=zero) -> SSAValue:
                weight = e.load(ins[1], e.linear([gi, oi, inner[0]], geo.w_steps(),
                                                 i * geo.kw + j))
                return e.insert(arith.AddfOp(acc, e.insert(arith.MulfOp(zero, weight))))

            padding = e.reduce([geo.cg], zero, weight_times_zero)
            for (r0, r1), (c0, c1) in rectangles:
                def add(e: Emitter, c0=c0, c1=c1, padding=padding) -> None:
                    e.loops([c1 - c0], lambda e, inner: _accumulate(
                        e, out, e.linear([b, gi, oi, y, inner[0]], geo.y_steps(), c0), padding))

                e.if_(e.in_range(e.linear([y], [1], -r0), r1 - r0), add)

    e.loops([geo.n, geo.groups, og, geo.oh], row, parallel=True)  # each writes its own row


def lower_conv2d_backward(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue) -> None:
    """conv2d's cotangents, tap by tap over the positions whose tap is inside the input: per
    output row, dx[tap row] += ct * w along the row (vectorized); or dw[o, c, i, j] as the sum
    of ct * x over the positions."""
    weight_grad = isinstance(op, tape.Conv2dBackwardWeightOp)
    if weight_grad:
        x_shape, w_shape = _shape(op.input), _shape(op.result)
    else:
        x_shape, w_shape = _shape(op.result), _shape(op.weight)
    geo = _ConvGeometry.of(x_shape, w_shape, _shape(op.cotangent), op.params)
    og = geo.o // geo.groups
    t = op.result.type.get_element_type()
    if not weight_grad:
        ct_buf, w_buf = ins
        _zero(e, out, math.prod(x_shape), t)

        def row(e: Emitter, ivs: list[SSAValue]) -> None:
            b, gi, ci, y = ivs
            for i, j, (y0, y1), (x0, x1), first in geo.taps():
                def tap(e: Emitter, i=i, j=j, y0=y0, x0=x0, x1=x1, first=first) -> None:
                    def body(e: Emitter, inner: list[SSAValue]) -> None:
                        oi, xx = inner
                        ct = e.load(ct_buf, e.linear([b, gi, oi, y, xx], geo.y_steps(), x0))
                        weight = e.load(w_buf, e.linear([gi, oi, ci], geo.w_steps(),
                                                        i * geo.kw + j))
                        index = e.linear([b, gi, ci, y, xx], geo.x_steps(),
                                         first - y0 * geo.x_steps()[3])
                        _accumulate(e, out, index, e.insert(arith.MulfOp(ct, weight)))

                    e.loops([og, x1 - x0], body)

                e.if_(e.in_range(e.linear([y], [1], -y0), y1 - y0), tap)

        e.loops([geo.n, geo.groups, geo.cg, geo.oh], row)
        return
    x_buf, ct_buf = ins
    _zero(e, out, math.prod(w_shape), t)
    for i, j, (y0, y1), (x0, x1), first in geo.taps():
        def body(e: Emitter, ivs: list[SSAValue], i=i, j=j, y0=y0, y1=y1, x0=x0, x1=x1,
                 first=first) -> None:
            gi, oi, ci = ivs

            def step(e: Emitter, inner: list[SSAValue], acc: SSAValue) -> SSAValue:
                b, y, xx = inner
                ct = e.load(ct_buf, e.linear([b, gi, oi, y, xx], geo.y_steps(),
                                             y0 * geo.ow + x0))
                x = e.load(x_buf, e.linear([b, gi, ci, y, xx], geo.x_steps(), first))
                return e.insert(arith.AddfOp(acc, e.insert(arith.MulfOp(ct, x))))

            total = e.reduce([geo.n, y1 - y0, x1 - x0], e.scalar(0.0, t), step)
            _accumulate(e, out, e.linear([gi, oi, ci], geo.w_steps(), i * geo.kw + j), total)

        e.loops([geo.groups, og, geo.cg], body, parallel=True)
    for i, j, rectangles in geo.padding_reads():
        def padding(e: Emitter, ivs: list[SSAValue], i=i, j=j, rectangles=rectangles) -> None:
            gi, oi, ci = ivs
            zero = e.scalar(0.0, t)
            for (r0, r1), (c0, c1) in rectangles:
                def step(e: Emitter, inner: list[SSAValue], acc: SSAValue,
                         r0=r0, c0=c0) -> SSAValue:
                    b, y, xx = inner
                    ct = e.load(ct_buf, e.linear([b, gi, oi, y, xx], geo.y_steps(),
                                                 r0 * geo.ow + c0))
                    return e.insert(arith.AddfOp(acc, e.insert(arith.MulfOp(ct, zero))))

                total = e.reduce([geo.n, r1 - r0, c1 - c0], zero, step)
                _accumulate(e, out, e.linear([gi, oi, ci], geo.w_steps(), i * geo.kw + j),
                            total)

        e.loops([geo.groups, og, geo.cg], padding, parallel=True)


def lower_conv2d_gemm(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue,
                      report: PlanReport) -> None:
    """conv2d (groups = 1) and its two cotangents as GEMMs over the im2col matrix
    cols[b, c, i, j, y, x] = x[b, c, y*sh + i*dh - top, x*sw + j*dw - left] (0 in the padding),
    a scratch buffer of N*C*kh*kw*OH*OW elements freed after the op:

        forward   out[b] = W[o, (c,i,j)] @ cols[b]                     per image, one kernel.gemm
        input     dcols[b] = W^T @ ct[b], then dx += dcols scattered back (col2im)
        weight    dW = sum_b ct[b] @ cols[b]^T                         batches summed in the kernel
    """
    kind = type(op)
    if kind is tape.Conv2dOp:
        x_shape, w_shape = _shape(op.input), _shape(op.weight)
    elif kind is tape.Conv2dBackwardInputOp:
        x_shape, w_shape = _shape(op.result), _shape(op.weight)
    else:
        x_shape, w_shape = _shape(op.input), _shape(op.result)
    y_shape = _shape(op.result if kind is tape.Conv2dOp else op.cotangent)
    geo = _ConvGeometry.of(x_shape, w_shape, y_shape, op.params)
    t = op.result.type.get_element_type()
    dtype = "f32" if t == f32 else "f64"
    ckk, ohw = geo.c * geo.kh * geo.kw, geo.oh * geo.ow
    size = geo.n * ckk * ohw
    cols = e.insert(memref.AllocOp.get(t, shape=[size]))
    report.scratch_bytes = max(report.scratch_bytes, size * (t.bitwidth // 8))
    (sh, sw), (dh, dw) = op.params["stride"], op.params["dilation"]
    top, left = op.params["padding"][:2]
    col_steps = [ckk * ohw, geo.kh * geo.kw * ohw, ohw, geo.ow, 1]  # over (b, c, tap, y, x)

    def taps(move: Callable[[Emitter, SSAValue, SSAValue], None]) -> None:
        """move(x index, cols index) for every (b, c, tap, y, x) that reads inside the input."""
        for i, j, (y0, y1), (x0, x1), _ in geo.taps():
            def body(e: Emitter, ivs: list[SSAValue], i=i, j=j, y0=y0, x0=x0) -> None:
                b, c, y, xx = ivs
                row = e.linear([y], [1], y0)
                column = e.linear([xx], [1], x0)
                source = e.linear([b, c, row, column], [geo.c * geo.h * geo.w, geo.h * geo.w,
                                                        sh * geo.w, sw],
                                  (i * dh - top) * geo.w + j * dw - left)
                move(e, source, e.linear([b, c, row, column], [col_steps[0], col_steps[1],
                                                               col_steps[3], 1],
                                         (i * geo.kw + j) * ohw))

            # one tap's positions are distinct in both x and cols: im2col and col2im alike
            e.loops([geo.n, geo.c, y1 - y0, x1 - x0], body, parallel=True)

    covered = sum((y1 - y0) * (x1 - x0) for _, _, (y0, y1), (x0, x1), _ in geo.taps())
    if kind is not tape.Conv2dBackwardInputOp:  # im2col
        if covered < geo.kh * geo.kw * ohw:
            _zero(e, cols, size, t)
        taps(lambda e, source, target: e.store(e.load(ins[0], source), cols, target))
    if kind is tape.Conv2dOp:
        e.insert(kernel.GemmOp(ins[1], cols, out, GemmSpec(
            dtype, geo.n, geo.o, ohw, ckk, (0, ckk, 1), (ckk * ohw, ohw, 1), geo.o * ohw,
            False)))
    elif kind is tape.Conv2dBackwardInputOp:
        ct, weight = ins
        e.insert(kernel.GemmOp(weight, ct, cols, GemmSpec(
            dtype, geo.n, ckk, ohw, geo.o, (0, 1, ckk), (geo.o * ohw, ohw, 1), ckk * ohw,
            False)))
        _zero(e, out, math.prod(x_shape), t)  # col2im
        taps(lambda e, source, target: _accumulate(e, out, source, e.load(cols, target)))
    else:
        ct = ins[1]
        e.insert(kernel.GemmOp(ct, cols, out, GemmSpec(
            dtype, geo.n, geo.o, ckk, ohw, (geo.o * ohw, ohw, 1), (ckk * ohw, 1, ohw), 0,
            False)))
    e.insert(memref.DeallocOp.get(cols))


def _window(e: Emitter, op: Operation, x_buf: SSAValue, x_shape: Sequence[int],
            ivs: Sequence[SSAValue], taps: Sequence[SSAValue]) -> tuple[SSAValue, SSAValue]:
    """Whether a pool window's tap is inside the input, and its (clamped) input index."""
    b, ch, y, xx = ivs
    i, j = taps
    (sh, sw), (top, left, _, _) = op.params["stride"], op.params["padding"]
    _, _, h, w = x_shape
    iy, ix = _tap(e, y, sh, i, 1, top), _tap(e, xx, sw, j, 1, left)
    inside = e.insert(arith.AndIOp(e.in_range(iy, h), e.in_range(ix, w)))
    index = e.linear([b, ch, e.clamp(iy, h), e.clamp(ix, w)], strides(x_shape))
    return inside, index


def _one_where(e: Emitter, condition: SSAValue, t: Attribute) -> SSAValue:
    return e.insert(arith.SelectOp(condition, e.scalar(1.0, t), e.scalar(0.0, t)))


def _window_max(e: Emitter, op: Operation, x_buf: SSAValue, x_shape: Sequence[int],
                ivs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    def step(e: Emitter, taps: list[SSAValue], acc: SSAValue) -> SSAValue:
        inside, index = _window(e, op, x_buf, x_shape, ivs, taps)
        value = e.insert(arith.SelectOp(inside, e.load(x_buf, index), e.scalar(-np.inf, t)))
        return e.insert(arith.MaximumfOp(acc, value))

    return e.reduce(op.params["kernel"], e.scalar(-np.inf, t), step)


def lower_pool(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue) -> None:
    x_shape, out_shape = _shape(op.input), _shape(op.result)
    t = op.result.type.get_element_type()
    kh, kw = op.params["kernel"]

    def body(e: Emitter, ivs: list[SSAValue]) -> None:
        if isinstance(op, tape.MaxPool2dOp):
            value = _window_max(e, op, ins[0], x_shape, ivs, t)
        else:
            def step(e: Emitter, taps: list[SSAValue], acc: SSAValue) -> SSAValue:
                inside, index = _window(e, op, ins[0], x_shape, ivs, taps)
                x = e.insert(arith.SelectOp(inside, e.load(ins[0], index), e.scalar(0.0, t)))
                return e.insert(arith.AddfOp(acc, x))

            total = e.reduce([kh, kw], e.scalar(0.0, t), step)
            value = e.insert(arith.DivfOp(total, e.scalar(kh * kw, t)))
        e.store(value, out, e.linear(ivs, strides(out_shape)))

    e.loops(out_shape, body, parallel=True)


def lower_pool_backward(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue) -> None:
    x_shape = _shape(op.result)
    ct_shape = _shape(op.cotangent)
    t = op.result.type.get_element_type()
    kh, kw = op.params["kernel"]
    (sh, sw) = op.params["stride"]
    ct_buf = ins[1] if isinstance(op, tape.MaxPool2dBackwardOp) else ins[0]
    if sh >= kh and sw >= kw and not any(op.params["padding"]):
        _pool_backward_tiled(e, op, ins, out, ct_buf)
        return
    _zero(e, out, math.prod(x_shape), t)

    def body(e: Emitter, ivs: list[SSAValue]) -> None:
        ct = e.load(ct_buf, e.linear(ivs, strides(ct_shape)))
        if isinstance(op, tape.MaxPool2dBackwardOp):  # ct split evenly among the maxima
            x_buf = ins[0]
            top = _window_max(e, op, x_buf, x_shape, ivs, t)

            def mask(e: Emitter, taps: list[SSAValue]) -> tuple[SSAValue, SSAValue, SSAValue]:
                """1 where the tap holds the window's max (padding counts as -inf), else 0."""
                inside, index = _window(e, op, x_buf, x_shape, ivs, taps)
                value = e.insert(arith.SelectOp(inside, e.load(x_buf, index),
                                                e.scalar(-np.inf, t)))
                return inside, index, _one_where(e, e.insert(arith.CmpfOp(value, top, "oeq")), t)

            share = e.insert(arith.DivfOp(ct, e.reduce([kh, kw], e.scalar(0.0, t), (
                lambda e, taps, acc: e.insert(arith.AddfOp(acc, mask(e, taps)[2]))))))
        else:
            share = e.insert(arith.DivfOp(ct, e.scalar(kh * kw, t)))

        def scatter(e: Emitter, taps: list[SSAValue]) -> None:
            if isinstance(op, tape.MaxPool2dBackwardOp):
                # mask * share, as the semantics: 0 * share is NaN where the window holds a NaN
                # (no tap is its max, so share is ct / 0) or ct is not finite
                inside, index, hit = mask(e, taps)
                value = e.insert(arith.MulfOp(hit, share))
            else:
                (inside, index), value = _window(e, op, ins[0], x_shape, ivs, taps), share
            e.if_(inside, lambda e: _accumulate(e, out, index, value))

        e.loops([kh, kw], scatter)

    # windows that do not overlap (stride >= kernel) scatter into disjoint elements
    e.loops(ct_shape, body, parallel=sh >= kh and sw >= kw)


def _pool_backward_tiled(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue,
                         ct_buf: SSAValue) -> None:
    """Pool windows side by side (stride >= kernel, no padding): every tap is inside the input
    and every input element in one window at most, so each window writes its taps (no bounds
    check, no read-modify-write) and only the elements no window covers are zeroed first."""
    x_shape, ct_shape = _shape(op.result), _shape(op.cotangent)
    t = op.result.type.get_element_type()
    (kh, kw), (sh, sw) = op.params["kernel"], op.params["stride"]
    if (sh, sw) != (kh, kw) or ct_shape[2] * sh != x_shape[2] or ct_shape[3] * sw != x_shape[3]:
        _zero(e, out, math.prod(x_shape), t)
    maximum = isinstance(op, tape.MaxPool2dBackwardOp)

    def body(e: Emitter, ivs: list[SSAValue]) -> None:
        b, ch, y, xx = ivs

        def at(e: Emitter, taps: list[SSAValue]) -> SSAValue:
            return e.linear([b, ch, e.linear([y, taps[0]], [sh, 1]),
                             e.linear([xx, taps[1]], [sw, 1])], strides(x_shape))

        ct = e.load(ct_buf, e.linear(ivs, strides(ct_shape)))
        if not maximum:
            share = e.insert(arith.DivfOp(ct, e.scalar(kh * kw, t)))
            e.loops([kh, kw], lambda e, taps: e.store(share, out, at(e, taps)))
            return
        x_buf = ins[0]
        top = e.reduce([kh, kw], e.scalar(-np.inf, t), lambda e, taps, acc: e.insert(
            arith.MaximumfOp(acc, e.load(x_buf, at(e, taps)))))

        def hit(e: Emitter, taps: list[SSAValue]) -> SSAValue:
            return _one_where(e, e.insert(arith.CmpfOp(e.load(x_buf, at(e, taps)), top, "oeq")),
                              t)

        count = e.reduce([kh, kw], e.scalar(0.0, t), lambda e, taps, acc: e.insert(
            arith.AddfOp(acc, hit(e, taps))))
        share = e.insert(arith.DivfOp(ct, count))  # ct split evenly among the maxima
        # 0 + mask * share, as the semantics sums into zeros: NaN for every tap of a window
        # holding a NaN, +0 (not -0) where a tap takes none of a negative share
        e.loops([kh, kw], lambda e, taps: e.store(e.insert(arith.AddfOp(
            e.insert(arith.MulfOp(hit(e, taps), share)), e.scalar(0.0, t))), out, at(e, taps)))

    e.loops(ct_shape, body, parallel=True)


WINDOW = {
    tape.UnfoldOp: lower_unfold, tape.FoldOp: lower_fold, tape.Conv2dOp: lower_conv2d,
    tape.Conv2dBackwardInputOp: lower_conv2d_backward,
    tape.Conv2dBackwardWeightOp: lower_conv2d_backward,
    tape.MaxPool2dOp: lower_pool, tape.AvgPool2dOp: lower_pool,
    tape.MaxPool2dBackwardOp: lower_pool_backward, tape.AvgPool2dBackwardOp: lower_pool_backward,
}


CONVOLUTIONS = (tape.Conv2dOp, tape.Conv2dBackwardInputOp, tape.Conv2dBackwardWeightOp)
"""Lowered to kernel.gemm over an im2col buffer when groups = 1 (the direct loops otherwise)."""

LAYOUT = (tape.BroadcastOp, tape.PermuteOp, tape.SliceOp, tape.PadOp, tape.ConcatOp)


# ----------------------------------------------------------------------------------------------
# The function


@dataclass
class PlanReport:
    """Bytes of the intermediates: held at once at the peak, against all of them."""

    peak_bytes: int = 0
    total_bytes: int = 0
    scratch_bytes: int = 0
    """The largest scratch buffer one op holds while it runs (a convolution's im2col matrix)."""

    def __str__(self) -> str:
        scratch = f", plus {self.scratch_bytes:,} of scratch" if self.scratch_bytes else ""
        return (f"buffers: peak {self.peak_bytes:,} bytes of intermediates live at once"
                f"{scratch}, {self.total_bytes:,} if all were kept")


def lower_function(f: func.FuncOp, module: ModuleOp, report: PlanReport,
                   libm: bool = False, row_reductions: bool = False) -> None:
    block = f.body.block
    ret = block.last_op
    assert isinstance(ret, func.ReturnOp)
    if len(f.body.blocks) != 1:
        raise LoweringError(f"tape-to-loops: @{f.sym_name.data} must be one block of tape ops")
    unsupported = sorted({op.name for op in block.ops if not _lowerable(op)
                          and not isinstance(op, func.ReturnOp)})
    if unsupported:
        raise LoweringError(f"tape-to-loops: @{f.sym_name.data} holds {', '.join(unsupported)}, "
                            "which this lowering does not take (a function of tape ops only)")
    new_block = Block(arg_types=[buffer_type(a.type) for a in block.args]
                      + [buffer_type(r.type) for r in ret.arguments])
    for old, new in zip(block.args, new_block.args, strict=False):
        new.name_hint = old.name_hint
    e = Emitter(Builder(InsertPoint.at_end(new_block)), libm)
    outputs = list(new_block.args)[len(block.args):]
    returned = list(ret.arguments)
    # results returned once, made by an op that writes a buffer of its own (not a reshape's
    # alias, an argument or a constant), are computed straight into the caller's buffer
    direct = {value: target for value, target in zip(returned, outputs, strict=True)
              if returned.count(value) == 1 and isinstance(value.owner, Operation)
              and not isinstance(value.owner, tape.ReshapeOp | tape.ConstantOp)
              and value.owner.parent_block() is block}
    env: dict[SSAValue, SSAValue] = dict(zip(block.args, new_block.args, strict=False))
    allocated: list[SSAValue] = []
    views = transposes_read_in_place(block)
    counter = iter(range(1 << 30))
    names = lambda: f"{f.sym_name.data}_constant_{next(counter)}"  # noqa: E731

    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            break
        result = op.results[0]
        if isinstance(op, tape.ReshapeOp) or result in views:
            env[result] = env[op.input]  # flat buffers: the same buffer, other strides
            continue
        if result in direct:  # a result the caller keeps: computed in its buffer
            out = direct[result]
        else:
            out = e.insert(memref.AllocOp.get(buffer_type(result.type).element_type,
                                              shape=buffer_type(result.type).get_shape()))
            out.name_hint = result.name_hint
        ins = [env[o] for o in op.operands]
        if isinstance(op, tape.ConstantOp):
            written = lower_constant(e, op, module, out, names)
            if written is not out:
                new_block.erase_op(out.owner)
                env[result] = written
                continue
        elif isinstance(op, (*tape.ELEMENTWISE, tape.FusedOp)):
            lower_elementwise(e, op, ins, out)
        elif isinstance(op, LAYOUT):
            lower_layout(e, op, ins, out)
        elif isinstance(op, tape.SumOp | tape.MaxOp):
            lower_reduction(e, op, ins, out, report if row_reductions else None)
        elif isinstance(op, tape.MatmulOp):
            lower_matmul(e, op, ins, out, views)
        elif type(op) in CONVOLUTIONS and op.params["groups"] == 1:
            lower_conv2d_gemm(e, op, ins, out, report)
        elif type(op) in WINDOW:
            WINDOW[type(op)](e, op, ins, out)
        env[result] = out
        if result not in direct:
            allocated.append(out)

    for value, target in zip(ret.arguments, outputs, strict=True):
        source = env[value]
        if source is target:
            continue
        size = buffer_type(value.type).get_shape()[0]
        e.loops([size], lambda e, ivs, source=source, target=target:
                e.store(e.load(source, ivs[0]), target, ivs[0]), parallel=True)
    e.insert(func.ReturnOp())
    _free_after_last_use(new_block, allocated, report)

    names_in = _names(f.arg_attrs, block.args, "arg")
    names_out = [f"out.{n}" for n in _names(f.res_attrs, returned, "result")]
    for arg, name in zip(outputs, names_out, strict=True):
        arg.name_hint = _hint(name)
    f.body.add_block(new_block)  # the buffer body takes the tensor body's place
    f.body.erase_block(block, safe_erase=False)
    f.function_type = FunctionType.from_lists([a.type for a in new_block.args], [])
    f.arg_attrs = ArrayAttr([DictionaryAttr({"tapeml.name": StringAttr(n)})
                             for n in [*names_in, *names_out]])
    f.res_attrs = None


def _lowerable(op: Operation) -> bool:
    return isinstance(op, (*tape.ELEMENTWISE, tape.FusedOp, *LAYOUT, tape.ReshapeOp,
                           tape.SumOp, tape.MaxOp, tape.MatmulOp, *WINDOW))


def _names(attrs: ArrayAttr | None, values: Sequence[SSAValue], default: str) -> list[str]:
    from tapeml.frontend.program import value_names

    return value_names(attrs, list(values), default)


def _hint(name: str) -> str | None:
    import re

    hint = re.sub(r"[^A-Za-z0-9_$.-]", "_", name)
    return hint if re.fullmatch(r"[A-Za-z_$.-][A-Za-z0-9_$.-]*", hint) else None


def _free_after_last_use(block: Block, allocated: list[SSAValue], report: PlanReport) -> None:
    """memref.dealloc each buffer after the last top-level op that reads or writes it."""
    ops = list(block.ops)
    position = {op: i for i, op in enumerate(ops)}
    live_ranges = []
    for buffer in allocated:
        last = position[buffer.owner]
        for use in buffer.uses:
            top = use.operation
            while top.parent_block() is not block:
                top = top.parent_op()
            last = max(last, position[top])
        live_ranges.append((position[buffer.owner], last, buffer))
    for _, last, buffer in live_ranges:
        block.insert_op_after(memref.DeallocOp.get(buffer), ops[last])
    sizes = {b: b.type.get_shape()[0] * max(1, (b.type.element_type.bitwidth + 7) // 8)
             for _, _, b in live_ranges}
    events = sorted([(start, 1, b) for start, _, b in live_ranges]
                    + [(last, 2, b) for _, last, b in live_ranges], key=lambda x: (x[0], x[1]))
    live = peak = 0
    for _, kind, b in events:
        live += sizes[b] if kind == 1 else -sizes[b]
        peak = max(peak, live)
    report.peak_bytes = max(report.peak_bytes, peak)
    report.total_bytes += sum(sizes.values())


def lower_module(module: ModuleOp, libm: bool = False, row_reductions: bool = False
                 ) -> PlanReport:
    """Lower every function of `module` in place; returns the buffer plan's report. `libm`:
    call libm for exp, log, tanh and sigmoid (default: vectorizable arithmetic, see
    transcendentals.py). `row_reductions`: reductions that keep the input's last axes fold a
    row of accumulators at a time (the CPU's choice, see `lower_reduction`; a GPU wants one
    thread per output)."""
    report = PlanReport()
    for f in [op for op in module.ops if isinstance(op, func.FuncOp) and not op.is_declaration]:
        lower_function(f, module, report, libm, row_reductions)
    return report


@dataclass(frozen=True)
class ToLoopsPass(ModulePass):
    """Lower tape functions to loops over flat buffers (see the module doc)."""

    name = "tape-to-loops"

    libm: bool = False
    """Call libm for exp, log, tanh and sigmoid (default: vectorizable arithmetic)."""
    row_reductions: bool = False
    """Reductions that keep the last axes fold a row of accumulators at a time (the CPU's)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        lower_module(op, self.libm, self.row_reductions)

