"""sum and max as one accumulator per output folded in row-major order, or (the CPU's
row_reductions) a row of accumulators at a time, a few rows in groups of consecutive terms."""

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
SIDE_BY_SIDE = 8
"""With `row_reductions` (the CPU's), outputs that each fold their own terms are folded this
many at a time, side by side: independent chains of adds, where one output's chain waits on
each add's latency (a softmax's row max, a conv's bias gradient)."""

LANES = 8
"""With `row_reductions` (the CPU's), a sum whose terms of one output lie one after another in
memory (a softmax's row sum, a layer norm's mean) folds them as this many partial sums, term i
into partial i % LANES, the partials then combined in halves and the terms past the last whole
LANES added one after another: independent chains that LLVM's SLP vectorizer makes vector adds,
where a single chain was scalar loads and adds (each output on its own: eight side by side,
SIDE_BY_SIDE, were 64 chains, not vectorized, and spilled). One core, AVX-512 Xeon: the GPT
step's 16 x 4 x 64 x 64 -> 16 x 4 x 64 softmax sums 83 -> 31 us, its layer norms' 16 x 64 x 128
-> 16 x 64 sums 47 -> 18 us; the step's sums 2.3 -> 1.7 ms. Terms in contiguous runs (a
convolution's bias gradient, 64 x 16 x 28 x 28 -> 16: each image's plane of a channel) go into
the same partials run after run, then each run's last terms: W4's two bias gradients 451 and
267 -> 139 and 61 us (`step.profile`, one core, Zen 4), where eight outputs side by side were
scalar chains. The order is a function of the shape alone; the bits may differ from a
sequential sum's, as numpy's pairwise sum's do. (A max is left one chain per output: its
NaN-propagating maximum did not vectorize, and ran slower as partials.)"""

ROW_GROUPS = 8
"""`row_reductions` folds the reduced rows of a reduction with fewer than GROUPED_BELOW rows
of outputs (a bias gradient: one) in up to this many groups of consecutive rows, each into a
row of accumulators of its own, then combines the groups' rows in order (`row_groups`: the
most groups that divide the rows, each at least GROUP_ROWS rows, all of them at most
GROUPS_ELEMENTS accumulators). One row of accumulators is one loop, one thread's: the GPT
step's bias gradients (16 x 64 x 128, 384 and 512 -> one row) ran slower on two threads than
on one (their input is in both cores' caches); in groups its sums took 1.28 against 1.64 ms
on two threads (`step.profile`, AVX-512 Xeon; 2.2-2.3 ms on one either way). The groups are
a function of the shape alone, so a sum adds its terms in the same order at any thread count
(an f64 sum, or an f32 one in f64 that rounds, may differ from a sequential sum's bits)."""
GROUPED_BELOW = 64
GROUP_ROWS = 16
GROUPS_ELEMENTS = 1 << 15


@lowering(tape.SumOp, tape.MaxOp)
def lower_reduction(e: Emitter, op: tape.SumOp | tape.MaxOp, ins: list[SSAValue],
                    out: SSAValue, cx: Context) -> None:
    """One accumulator per output, folded over the reduced axes in row-major order. With
    `rows` (the CPU's row_reductions; the report takes the scratch), when the input's last
    axes are kept (a bias gradient: a sum over the batch), a whole row of accumulators is
    folded at a time instead, so the innermost loop runs along contiguous memory and
    vectorizes; every output adds the same terms in the same order, or, where such rows are
    few, in groups of consecutive terms (ROW_GROUPS), the groups' sums then in order."""
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
        _row_reduction(e, op, ins[0], out, rows, wide, combine, identity,
                       grouped=not cx.any_batch)
        return

    # the kept dims and the reduced ones each merged where the input runs on across them
    # (coalesce: the same elements in the same order, in fewer loops)
    kept_shape, (kept_src, kept_out), _ = coalesce(
        out_shape, [[src[i] for i in kept], strides(out_shape)])
    reduced_shape, (reduced_src,), _ = coalesce([shape[a] for a in axes],
                                                [[src[a] for a in axes]], ones=cx.any_batch)

    # one output's terms contiguous (a softmax's, a layer norm's row), or in contiguous runs (a
    # convolution's bias gradient: each image's plane of a channel): LANES partial results
    # (any_batch: whatever the run's length, which may be the batch's)
    lanes = (cx.row_reductions and isinstance(op, tape.SumOp) and reduced_src[-1:] == [1]
             and (reduced_shape[-1] >= 2 * LANES or cx.any_batch))
    outer_shape, outer_src = reduced_shape[:-1], reduced_src[:-1]  # (the runs' own indices)

    def outputs(e: Emitter, ivs: list[SSAValue], count: int) -> None:
        """`count` outputs from the one at `ivs` on along the last kept dim, folded side by
        side, each over its own terms in row-major order (or, `lanes`, as LANES)."""
        last = kept_src[-1] if kept_src else 0  # the input's step from one output's to the next

        def term(e: Emitter, at: SSAValue, j: int) -> SSAValue:  # output j's, at its first's
            x = e.load(ins[0], at if j == 0 else e.addi(at, e.index(j * last)))
            return e.insert(arith.ExtFOp(x, wide)) if wide != t else x

        def step(e: Emitter, inner: list[SSAValue], accs: list[SSAValue]) -> list[SSAValue]:
            base = e.linear([*ivs, *inner], [*kept_src, *reduced_src])
            return [e.insert(combine(acc, term(e, base, j))) for j, acc in enumerate(accs)]

        if not lanes:
            totals = e.reduce_all(reduced_shape, [e.scalar(identity, wide)] * count, step)
        else:  # each run's whole LANES into the partials, run after run; then the rest
            whole, rest = divmod(reduced_shape[-1], LANES)

            def run_start(e: Emitter, inner: list[SSAValue]) -> SSAValue:
                return e.linear([*ivs, *inner[:-1]], [*kept_src, *outer_src])

            def lane_step(e: Emitter, inner: list[SSAValue],
                          accs: list[SSAValue]) -> list[SSAValue]:
                base = e.addi(run_start(e, inner), e.muli(inner[-1], e.index(LANES)))
                return [e.insert(combine(accs[j * LANES + v], term(
                    e, base if v == 0 else e.addi(base, e.index(v)), j)))
                        for j in range(count) for v in range(LANES)]

            partial = e.reduce_all([*outer_shape, whole],
                                   [e.scalar(identity, wide)] * (count * LANES), lane_step)
            totals = [pairwise(e, combine, partial[j * LANES:(j + 1) * LANES])
                      for j in range(count)]
            if rest or cx.any_batch:  # each run's last terms, one after another, run after run
                def tail(e: Emitter, inner: list[SSAValue],
                         accs: list[SSAValue]) -> list[SSAValue]:
                    at = e.addi(run_start(e, inner), e.addi(inner[-1], e.index(whole * LANES)))
                    return [e.insert(combine(acc, term(e, at, j))) for j, acc in enumerate(accs)]

                totals = e.reduce_all([*outer_shape, rest], totals, tail)
        at = e.linear(ivs, kept_out)
        for j, total in enumerate(totals):
            if wide != t:
                total = e.insert(arith.TruncFOp(total, t))
            e.store(total, out, at if j == 0 else e.addi(at, e.index(j * kept_out[-1])))

    side = SIDE_BY_SIDE if cx.row_reductions and kept_shape and reduced_shape and not lanes else 1
    if side == 1 or kept_shape[-1] < side and not cx.any_batch:
        e.loops(kept_shape, lambda e, ivs: outputs(e, ivs, 1), parallel=True)
        return
    blocks, rest = divmod(kept_shape[-1], side)
    e.loops([*kept_shape[:-1], blocks],
            lambda e, ivs: outputs(e, [*ivs[:-1], e.muli(ivs[-1], e.index(side))], side),
            parallel=True)
    if rest or cx.any_batch:  # (any_batch: written at every size, as the blocks' loop is,
        # though either may run no trips; outline-parallel-loops{any_batch} outlines both)
        e.loops([*kept_shape[:-1], rest],
                lambda e, ivs: outputs(e, [*ivs[:-1], e.addi(ivs[-1], e.index(blocks * side))],
                                       1), parallel=True)


def pairwise(e: Emitter, combine: type[Operation], values: list[SSAValue]) -> SSAValue:
    """`values` (a power of two of them) combined by halves: v[i] . v[i + half] for each i of
    the first half, then those the same way, down to one (a vector's halves folded)."""
    while len(values) > 1:
        half = len(values) // 2
        values = [e.insert(combine(values[i], values[i + half])) for i in range(half)]
    return values[0]


def _combine(op: tape.SumOp | tape.MaxOp, t: Attribute) -> tuple[type[Operation], float | int]:
    """How elements combine, and the identity a reduction starts from: floats add and take the
    IEEE maximum from -inf; integers add, wrapping, and take the signed maximum from the
    smallest integer."""
    if isinstance(t, IntegerType):
        if isinstance(op, tape.SumOp):
            return arith.AddiOp, 0
        return arith.MaxSIOp, int(np.iinfo(np.int32 if t.bitwidth == 32 else np.int64).min)
    return (arith.AddfOp, 0.0) if isinstance(op, tape.SumOp) else (arith.MaximumfOp, -np.inf)


def row_groups(outer: int, rows: int, width: int) -> int:
    """How many groups of consecutive rows `row_reductions` folds `rows` reduced rows of
    `width` accumulators in, for each of `outer` rows of outputs (ROW_GROUPS)."""
    if outer >= GROUPED_BELOW:
        return 1
    return max((g for g in range(2, ROW_GROUPS + 1) if rows % g == 0
                and rows // g >= GROUP_ROWS and g * outer * width <= GROUPS_ELEMENTS), default=1)


def _row_reduction(e: Emitter, op: tape.SumOp | tape.MaxOp, x: SSAValue, out: SSAValue,
                   report: PlanReport, wide: Attribute, combine: type[Operation],
                   init: float | int, grouped: bool = True) -> None:
    """`lower_reduction` with rows: for each index of the kept axes before the last reduced
    one (in parallel), a row of accumulators over the trailing kept axes (contiguous in x and
    in out), folded over the reduced indices in row-major order, then stored. Where those
    rows are few (`row_groups`: a bias gradient's one), the reduced indices are folded in
    groups of consecutive ones instead, each group's row of its own (in parallel), and then
    the groups' rows combined in order: the same groups at any thread count (not where not
    `grouped`: a program for every batch size)."""
    shape = shape_of(op.input)
    axes = op.params["axes"]
    last = max(axes)
    width = math.prod(shape[last + 1:])
    outer = [i for i in range(last) if i not in axes]
    t = op.result.type.get_element_type()
    src = strides(shape)
    # the outer dims and the reduced ones each merged where the input runs on across them
    # (coalesce: the same rows folded in the same order, in fewer loops)
    outer_shape, (outer_src, outer_rows), _ = coalesce(
        [shape[i] for i in outer],
        [[src[i] for i in outer], [s * width for s in strides([shape[i] for i in outer])]])
    reduced_shape, (reduced_src,), _ = coalesce([shape[a] for a in axes],
                                                [[src[a] for a in axes]], ones=not grouped)
    size = math.prod(outer_shape) * width
    groups = (row_groups(math.prod(outer_shape), reduced_shape[0], width)
              if reduced_shape and grouped else 1)
    acc = e.insert(alloc(MemRefType(wide, [groups * size])))
    report.scratch_bytes = max(report.scratch_bytes, groups * size * (wide.bitwidth // 8))
    per_group = [reduced_shape[0] // groups, *reduced_shape[1:]] if reduced_shape else []

    def row(e: Emitter, outer_ivs: list[SSAValue], group: SSAValue) -> None:
        start = e.addi(e.linear(outer_ivs, outer_rows), e.muli(group, e.index(size)))

        def fold(e: Emitter, reduced: list[SSAValue]) -> None:
            if groups > 1:  # the group's reduced indices from its first
                reduced = [e.addi(e.muli(group, e.index(per_group[0])), reduced[0]),
                           *reduced[1:]]
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
        e.loops(per_group, fold)

    def store(e: Emitter, at: SSAValue, total: SSAValue) -> None:
        e.store(e.insert(arith.TruncFOp(total, t)) if wide != t else total, out, at)

    if groups == 1:
        def whole(e: Emitter, outer_ivs: list[SSAValue]) -> None:
            row(e, outer_ivs, e.index(0))
            start = e.linear(outer_ivs, outer_rows)
            e.loops([width], lambda e, w: (lambda at: store(e, at, e.load(acc, at)))(
                e.insert(arith.AddiOp(start, w[0]))))

        e.loops(outer_shape, whole, parallel=True)
    else:
        e.loops([*outer_shape, groups], lambda e, ivs: row(e, ivs[:-1], ivs[-1]),
                parallel=True)

        def combined(e: Emitter, ivs: list[SSAValue]) -> None:  # the groups' rows, in order
            at = e.addi(e.linear(ivs[:-1], outer_rows), ivs[-1])
            total = e.reduce([groups - 1], e.load(acc, at), lambda e, g, total: e.insert(
                combine(total, e.load(acc, e.addi(at, e.muli(e.addi(g[0], e.index(1)),
                                                             e.index(size)))))))
            store(e, at, total)

        e.loops([*outer_shape, width], combined, parallel=True)
    e.insert(dealloc(acc))
