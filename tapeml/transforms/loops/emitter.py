"""Emitting loops, index arithmetic and scalar code over flat row-major buffers: what every
family's lowering (tapeml/transforms/loops/) writes its op with."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.builder import Builder, InsertPoint
from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import (
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    TensorType,
    i1,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.utils.exceptions import DiagnosticException

from tapeml.transforms.new_ops import for_op, parallel_op, reduce_op, yield_op

INDEX = IndexType()
_NO_FLAGS = arith.IntegerOverflowAttr("none")  # what arith.AddiOp(a, b) gives by default


class LoweringError(DiagnosticException):
    """An op this lowering does not handle (yet)."""


def buffer_type(t: TensorType) -> MemRefType:
    """The flat buffer holding a tensor of type `t`."""
    return _flat(t.get_element_type(), math.prod(t.get_shape()))  # rank 0: one element


@functools.cache
def _flat(element: Attribute, size: int) -> MemRefType:
    """A memref<size x element>, built (and its parameters checked) once per process."""
    return MemRefType(element, [size])


@functools.cache
def _index_attr(value: int) -> IntegerAttr:
    """An index constant's value, built once per process (attributes are immutable)."""
    return IntegerAttr(value, INDEX)


@functools.cache
def _alloc_properties() -> dict[str, Attribute]:
    """What memref.AllocOp.get gives a static allocation (no dynamic sizes nor symbols), read
    off one built so."""
    return dict(memref.AllocOp.get(INDEX, shape=[1]).properties)


def alloc(t: MemRefType) -> memref.AllocOp:
    """memref.AllocOp.get(t.element_type, shape=t.get_shape()), without rebuilding `t` and
    checking it each time (64 us against 5)."""
    return memref.AllocOp.create(result_types=[t], properties=_alloc_properties())


def dealloc(buffer: SSAValue) -> memref.DeallocOp:
    """memref.DeallocOp.get(buffer), as `alloc`."""
    return memref.DeallocOp.create(operands=[buffer])


def strides(shape: Sequence[int]) -> list[int]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return out[::-1]


def coalesce(shape: Sequence[int], steps: Sequence[Sequence[int]], keep: Sequence[int] = (),
             ones: bool = False) -> tuple[list[int], list[list[int]], dict[int, int]]:
    """The same walk over fewer dims: adjacent dims merge where every buffer's steps run on
    across them (step[i] == step[i + 1] * shape[i + 1]: contiguous, or broadcast along both),
    dims of one element drop, except the dims in `keep` (whose positions the loop body reads);
    row-major order is kept, so each element is visited when it was (`ones`: dims of one
    element merge as the others do, or stay a loop of one trip, but never drop: a batch's
    loop at a batch of 1, under any_batch). The merged shape, each buffer's steps over it, and
    where each kept dim went."""
    dims: list[tuple[int, list[int], int | None]] = []  # (size, steps, the kept dim it is)
    for i, size in enumerate(shape):
        if size == 1 and i not in keep and not ones:
            continue
        here = [s[i] for s in steps]
        if dims and i not in keep and dims[-1][2] is None and all(
                before == step * size for before, step in zip(dims[-1][1], here, strict=True)):
            dims[-1] = (dims[-1][0] * size, here, None)
            continue
        dims.append((size, here, i if i in keep else None))
    merged = [size for size, _, _ in dims]
    by_buffer = [[d[1][b] for d in dims] for b in range(len(steps))]
    return merged, by_buffer, {kept: n for n, (_, _, kept) in enumerate(dims) if kept is not None}


def shape_of(v: SSAValue) -> tuple[int, ...]:
    return v.type.get_shape()


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
        return self.insert(arith.ConstantOp.create(result_types=[INDEX],
                                                   properties={"value": _index_attr(value)}))

    def scalar(self, value: float | int | bool, t: Attribute) -> SSAValue:
        """A constant of element type `t` (an integer type wraps `value` to its width)."""
        if t == i1:
            return self.insert(arith.ConstantOp.from_int_and_width(int(bool(value)), i1))
        if isinstance(t, IntegerType):
            return self.insert(arith.ConstantOp(IntegerAttr(int(value), t, truncate_bits=True)))
        return self.insert(arith.ConstantOp(FloatAttr(float(value), t)))

    def addi(self, a: SSAValue, b: SSAValue) -> SSAValue:
        """a + b on indices (what arith.AddiOp(a, b) builds, without its argument checks)."""
        return self.insert(arith.AddiOp.create(operands=[a, b], result_types=[a.type],
                                               properties={"overflowFlags": _NO_FLAGS}))

    def muli(self, a: SSAValue, b: SSAValue) -> SSAValue:
        """a * b on indices (as `addi`)."""
        return self.insert(arith.MuliOp.create(operands=[a, b], result_types=[a.type],
                                               properties={"overflowFlags": _NO_FLAGS}))

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
            term = iv if step == 1 else self.muli(iv, self.index(step))
            total = term if total is None else self.addi(total, term)
        if total is None:
            return self.index(constant)
        return total if constant == 0 else self.addi(total, self.index(constant))

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
            inner.insert(reduce_op())
            zero, one = self.index(0), self.index(1)
            self.insert(parallel_op([zero] * len(shape), [self.index(d) for d in shape],
                                    [one] * len(shape), block))
            return
        zero, one = self.index(0), self.index(1)
        block = Block(arg_types=[INDEX])
        loop = for_op(zero, self.index(shape[0]), one, [], block)
        self.insert(loop)
        inner = Emitter(Builder(InsertPoint.at_end(block)), self.libm)
        inner.loops(shape[1:], lambda e, ivs: body(e, [block.args[0], *ivs]))
        inner.insert(yield_op())

    def reduce(self, shape: Sequence[int], init: SSAValue,
               step: Callable[[Emitter, list[SSAValue], SSAValue], SSAValue]) -> SSAValue:
        """Fold `step(ivs, acc)` over `shape` in row-major order, from `init`."""
        if not shape:
            return step(self, [], init)
        block = Block(arg_types=[INDEX, init.type])
        loop = for_op(self.index(0), self.index(shape[0]), self.index(1), [init], block)
        self.insert(loop)
        inner = Emitter(Builder(InsertPoint.at_end(block)), self.libm)
        acc = inner.reduce(shape[1:], block.args[1],
                           lambda e, ivs, a: step(e, [block.args[0], *ivs], a))
        inner.insert(yield_op(acc))
        return loop.results[0]

    def reduce_all(self, shape: Sequence[int], inits: list[SSAValue],
                   step: Callable[[Emitter, list[SSAValue], list[SSAValue]], list[SSAValue]]
                   ) -> list[SSAValue]:
        """`reduce` with several accumulators folded side by side (independent chains)."""
        if not shape:
            return step(self, [], inits)
        block = Block(arg_types=[INDEX, *(v.type for v in inits)])
        loop = for_op(self.index(0), self.index(shape[0]), self.index(1), inits, block)
        self.insert(loop)
        inner = Emitter(Builder(InsertPoint.at_end(block)), self.libm)
        accs = inner.reduce_all(shape[1:], list(block.args[1:]),
                                lambda e, ivs, a: step(e, [block.args[0], *ivs], a))
        inner.insert(yield_op(*accs))
        return list(loop.results)

    def if_(self, cond: SSAValue, body: Callable[[Emitter], None]) -> None:
        """scf.if without results: `body` runs where `cond` holds."""
        block = Block()
        inner = Emitter(Builder(InsertPoint.at_end(block)), self.libm)
        body(inner)
        inner.insert(yield_op())
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
        # create, not get: the buffer is a flat memref (no type to check at every load)
        return self.insert(memref.LoadOp.create(operands=[buffer, index],
                                                result_types=[buffer.type.element_type]))

    def store(self, value: SSAValue, buffer: SSAValue, index: SSAValue) -> None:
        self.insert(memref.StoreOp.create(operands=[value, buffer, index]))


def zero(e: Emitter, out: SSAValue, size: int, t: Attribute) -> None:
    zero = e.scalar(0.0, t)
    e.loops([size], lambda e, ivs: e.store(zero, out, ivs[0]), parallel=True)


def accumulate(e: Emitter, out: SSAValue, index: SSAValue, value: SSAValue) -> None:
    e.store(e.insert(arith.AddfOp(e.load(out, index), value)), out, index)
