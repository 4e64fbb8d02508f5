"""sum and max as one accumulator per output folded in row-major order, or (the CPU's
row_reductions) a row of accumulators at a time."""

from __future__ import annotations

import math

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, MemRefType, f32, f64
from xdsl.ir import Attribute, Operation, SSAValue

from tapeml.dialects import tape
from tapeml.transforms.loops.buffers import PlanReport
from tapeml.transforms.loops.emitter import (
    Emitter,
    alloc,
    coalesce,
    dealloc,
    shape_of,
    strides,
)
from tapeml.transforms.loops.registry import Context, lowering

ROW_WIDTH = 8
"""The least number of contiguous kept elements for which `row_reductions` keeps a row of
accumulators (fewer would not fill a vector)."""


@lowering(tape.SumOp, tape.MaxOp)
def lower_reduction(e: Emitter, op: tape.SumOp | tape.MaxOp, ins: list[SSAValue],
                    out: SSAValue, cx: Context) -> None:
    """One accumulator per output, folded over the reduced axes in row-major order. With
    `rows` (the CPU's row_reductions; the report takes the scratch), when the input's last
    axes are kept (a bias gradient: a sum over the batch), a whole row of accumulators is
    folded at a time instead, so the innermost loop runs along contiguous memory and
    vectorizes. Every output still adds the same terms in the same order."""
    rows = cx.report if cx.row_reductions else None
    shape = shape_of(op.input)
    axes = op.params["axes"]
    kept = [i for i in range(len(shape)) if i not in axes]
    src = strides(shape)
    t = op.result.type.get_element_type()
    out_shape = [shape[i] for i in kept]

    # an f32 sum accumulates in f64: summed one after another, f32 would lose the small terms
    # of a long sum (numpy sums pairwise); the result is rounded to f32 once, at the end
    wide = f64 if isinstance(op, tape.SumOp) and t == f32 else t
    combine, identity = _combine(op, t)
    last = max(axes, default=len(shape))
    width = math.prod(shape[last + 1:])
    if rows is not None and axes and width >= ROW_WIDTH:
        _row_reduction(e, op, ins[0], out, rows, wide, combine, identity)
        return

    # the kept dims and the reduced ones each merged where the input runs on across them
    # (coalesce: the same elements in the same order, in fewer loops)
    kept_shape, (kept_src, kept_out), _ = coalesce(
        out_shape, [[src[i] for i in kept], strides(out_shape)])
    reduced_shape, (reduced_src,), _ = coalesce([shape[a] for a in axes],
                                                [[src[a] for a in axes]])

    def body(e: Emitter, ivs: list[SSAValue]) -> None:
        init = e.scalar(identity, wide)

        def step(e: Emitter, inner: list[SSAValue], acc: SSAValue) -> SSAValue:
            x = e.load(ins[0], e.linear([*ivs, *inner], [*kept_src, *reduced_src]))
            if wide != t:
                x = e.insert(arith.ExtFOp(x, wide))
            return e.insert(combine(acc, x))

        total = e.reduce(reduced_shape, init, step)
        if wide != t:
            total = e.insert(arith.TruncFOp(total, t))
        e.store(total, out, e.linear(ivs, kept_out))

    e.loops(kept_shape, body, parallel=True)


def _combine(op: tape.SumOp | tape.MaxOp, t: Attribute) -> tuple[type[Operation], float | int]:
    """How elements combine, and the identity a reduction starts from: floats add and take the
    IEEE maximum from -inf; integers add, wrapping, and take the signed maximum from the
    smallest integer."""
    if isinstance(t, IntegerType):
        if isinstance(op, tape.SumOp):
            return arith.AddiOp, 0
        return arith.MaxSIOp, int(np.iinfo(np.int32 if t.bitwidth == 32 else np.int64).min)
    return (arith.AddfOp, 0.0) if isinstance(op, tape.SumOp) else (arith.MaximumfOp, -np.inf)


def _row_reduction(e: Emitter, op: tape.SumOp | tape.MaxOp, x: SSAValue, out: SSAValue,
                   report: PlanReport, wide: Attribute, combine: type[Operation],
                   init: float | int) -> None:
    """`lower_reduction` with rows: for each index of the kept axes before the last reduced
    one (in parallel), a row of accumulators over the trailing kept axes (contiguous in x and
    in out), folded over the reduced indices in row-major order, then stored."""
    shape = shape_of(op.input)
    axes = op.params["axes"]
    last = max(axes)
    width = math.prod(shape[last + 1:])
    outer = [i for i in range(last) if i not in axes]
    t = op.result.type.get_element_type()
    size = math.prod(shape[i] for i in outer) * width
    acc = e.insert(alloc(MemRefType(wide, [size])))
    report.scratch_bytes = max(report.scratch_bytes, size * (wide.bitwidth // 8))
    src = strides(shape)
    # the outer dims and the reduced ones each merged where the input runs on across them
    # (coalesce: the same rows folded in the same order, in fewer loops)
    outer_shape, (outer_src, outer_rows), _ = coalesce(
        [shape[i] for i in outer],
        [[src[i] for i in outer], [s * width for s in strides([shape[i] for i in outer])]])
    reduced_shape, (reduced_src,), _ = coalesce([shape[a] for a in axes],
                                                [[src[a] for a in axes]])

    def row(e: Emitter, outer_ivs: list[SSAValue]) -> None:
        start = e.linear(outer_ivs, outer_rows)

        def fold(e: Emitter, reduced: list[SSAValue]) -> None:
            base = e.linear([*outer_ivs, *reduced], [*outer_src, *reduced_src])

            def one(e: Emitter, w: list[SSAValue]) -> None:
                at = e.insert(arith.AddiOp(start, w[0]))
                value = e.load(x, e.insert(arith.AddiOp(base, w[0])))
                if wide != t:
                    value = e.insert(arith.ExtFOp(value, wide))
                e.store(e.insert(combine(e.load(acc, at), value)), acc, at)

            e.loops([width], one)

        e.loops([width], lambda e, w: e.store(e.scalar(init, wide), acc,
                                              e.insert(arith.AddiOp(start, w[0]))))
        e.loops(reduced_shape, fold)

        def store(e: Emitter, w: list[SSAValue]) -> None:
            at = e.insert(arith.AddiOp(start, w[0]))
            value = e.load(acc, at)
            e.store(e.insert(arith.TruncFOp(value, t)) if wide != t else value, out, at)

        e.loops([width], store)

    e.loops(outer_shape, row, parallel=True)
    e.insert(dealloc(acc))
