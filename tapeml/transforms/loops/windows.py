"""Window ops: unfold and fold index linearly; the pools and their backward ops read the padded
input through a bounds check, so nothing outside a buffer is ever addressed."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import Attribute, Operation, SSAValue

from tapeml.dialects import tape
from tapeml.transforms.loops.emitter import (
    Emitter,
    accumulate,
    alloc,
    dealloc,
    shape_of,
    strides,
    zero,
)
from tapeml.transforms.loops.layout import lower_copy
from tapeml.transforms.loops.registry import Context, lowering


@lowering(tape.UnfoldOp)
def lower_unfold(e: Emitter, op: tape.UnfoldOp, ins: list[SSAValue], out: SSAValue,
                 cx: Context) -> None:
    shape = shape_of(op.input)
    k = len(op.params["kernel"])
    src = strides(shape)
    batch = len(shape) - k
    steps = (src[:batch] + [s * st for s, st in zip(op.params["stride"], src[batch:],
                                                    strict=True)]
             + [d * st for d, st in zip(op.params["dilation"], src[batch:], strict=True)])
    out_shape = shape_of(op.result)
    lower_copy(e, out_shape, ins[0], out,
               lambda e, ivs: e.load(ins[0], e.linear(ivs, steps)))


@lowering(tape.FoldOp)
def lower_fold(e: Emitter, op: tape.FoldOp, ins: list[SSAValue], out: SSAValue,
               cx: Context) -> None:
    """out[window position + tap] += in[window, tap], for every window and tap in order."""
    in_shape, out_shape = shape_of(op.input), shape_of(op.result)
    k = len(op.params["kernel"])
    dst = strides(out_shape)
    batch = len(out_shape) - k
    steps = (dst[:batch] + [s * st for s, st in zip(op.params["stride"], dst[batch:],
                                                    strict=True)]
             + [d * st for d, st in zip(op.params["dilation"], dst[batch:], strict=True)])
    zero(e, out, math.prod(out_shape), op.result.type.get_element_type())
    # windows that do not overlap (stride >= dilated kernel) add into disjoint elements
    disjoint = all(s >= (kk - 1) * d + 1 for s, kk, d in zip(
        op.params["stride"], op.params["kernel"], op.params["dilation"], strict=True))
    e.loops(in_shape, lambda e, ivs: accumulate(
        e, out, e.linear(ivs, steps), e.load(ins[0], e.linear(ivs, strides(in_shape)))),
        parallel=disjoint)


def _tap(e: Emitter, position: SSAValue, stride: int, tap: SSAValue, dilation: int,
         pad: int) -> SSAValue:
    """position * stride + tap * dilation - pad: the input row (or column) a tap reads."""
    return e.linear([position, tap], [stride, dilation], -pad)


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


def _inside(count: int, size: int, stride: int, k: int, pad: int) -> tuple[int, int]:
    """The output positions in [0, count) whose whole window (k taps from position * stride -
    pad) is inside [0, size)."""
    low = -(-pad // stride)
    high = (size - k + pad) // stride + 1 if size - k + pad >= 0 else 0
    low, high = min(max(low, 0), count), min(max(high, 0), count)
    return low, max(low, high)


POOL_BLOCK_BYTES = 32
"""A pool's row of windows inside the input is computed this many bytes of outputs at a time
(`_block_start`). Not 64: LLVM vectorizes a block of 16 f32 windows of stride 2 as 8 lanes and
8 scalars (its interleaved loads of a window's taps leave a gap, which needs a scalar last
iteration); blocks of 8 are one vector each. Squeezenet's three 3 x 3 stride-2 pools, one
core: 425, 245, 179 us -> 396, 222, 98 (onnxruntime 169, 85, 48); a 2 x 2 pool of
64 x 8 x 28 x 28: 181 -> 46 us."""


COLUMN_BLOCK_BYTES = 64
"""`_max_by_columns` computes this many bytes of a row at a time: its loads run along
contiguous memory (no interleaving, no gap), so a block of 16 f32 is one AVX-512 vector."""


EDGE_ROWS = 8
"""`_max_by_columns` writes each output row whose windows pass the top or bottom edge as code
of its own (its taps inside the input known); a pool with more of them (padding as tall as
a few windows) keeps `lower_pool`'s bounds-checked windows."""


def _lanes(width: int, t: Attribute, block_bytes: int = POOL_BLOCK_BYTES) -> int:
    """Outputs of a pool's row computed as one block (`_block_start`): `block_bytes` of
    them, or the widest power of two that fits a narrower row; 0 for rows under 4 wide."""
    lanes = block_bytes // (t.bitwidth // 8)
    while lanes > width:
        lanes //= 2
    return lanes if lanes >= 4 else 0


def _block_start(e: Emitter, block: SSAValue, lanes: int, x0: int, x1: int) -> SSAValue:
    """Where block `block` of a row [x0, x1) starts: every `lanes` outputs, the last block
    moved back to end at x1 (it computes some outputs of the one before again, the same
    values), so a row is whole vectors with no scalar remainder: as one loop, 13 outputs
    were a vector of 8, one of 4 and a scalar."""
    start = e.linear([block], [lanes], x0)
    return e.insert(arith.MinSIOp(start, e.index(x1 - lanes)))


@lowering(tape.MaxPool2dOp, tape.AvgPool2dOp)
def lower_pool(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue,
               cx: Context) -> None:
    """Each output the max (or mean) of its window: the windows wholly inside the input read
    it without bounds checks, a row of them in blocks of vector width (`_block_start`: LLVM
    vectorizes each block), those at its edges through them (padding is -inf for a max, 0
    for a mean). With the CPU's row_reductions, a max whose windows overlap along a row
    takes the max down each column first (`_max_by_columns`)."""
    x_shape, out_shape = shape_of(op.input), shape_of(op.result)
    t = op.result.type.get_element_type()
    kh, kw = op.params["kernel"]
    (sh, sw), (top, left, _, _) = op.params["stride"], op.params["padding"]
    n, c, h, w = x_shape
    oh, ow = out_shape[2:]
    maximum = isinstance(op, tape.MaxPool2dOp)

    def body(e: Emitter, ivs: list[SSAValue], checked: bool) -> None:
        def step(e: Emitter, taps: list[SSAValue], acc: SSAValue) -> SSAValue:
            if checked:
                inside, index = _window(e, op, ins[0], x_shape, ivs, taps)
                x = e.insert(arith.SelectOp(inside, e.load(ins[0], index),
                                            e.scalar(-np.inf if maximum else 0.0, t)))
            else:
                x = e.load(ins[0], e.linear([*ivs, *taps], [c * h * w, h * w, sh * w, sw, w, 1],
                                            -top * w - left))
            return e.insert(arith.MaximumfOp(acc, x) if maximum else arith.AddfOp(acc, x))

        value = e.reduce([kh, kw], e.scalar(-np.inf if maximum else 0.0, t), step)
        if not maximum:
            value = e.insert(arith.DivfOp(value, e.scalar(kh * kw, t)))
        e.store(value, out, e.linear(ivs, strides(out_shape)))

    (r0, r1), (c0, c1) = _inside(oh, h, sh, kh, top), _inside(ow, w, sw, kw, left)
    edge_rows = r0 + oh - max(r0, r1)  # unrolled by _max_by_columns, each with its taps
    if (maximum and cx.row_reductions and kw > sw and _lanes(ow, t, COLUMN_BLOCK_BYTES)
            and edge_rows <= EDGE_ROWS):
        _max_by_columns(e, op, ins[0], out, cx, _lanes(ow, t, COLUMN_BLOCK_BYTES))
        return
    if r0 == r1 or c0 == c1:
        r0 = r1 = c0 = c1 = 0
    lanes = _lanes(c1 - c0, t)
    if r0 < r1 and lanes:  # the windows inside, a row's outputs `lanes` at a time
        def row(e: Emitter, ivs: list[SSAValue]) -> None:
            y = e.linear([ivs[2]], [1], r0)
            e.loops([-(-(c1 - c0) // lanes), lanes], lambda e, jvs: body(
                e, [ivs[0], ivs[1], y, e.addi(_block_start(e, jvs[0], lanes, c0, c1), jvs[1])],
                False))

        e.loops([n, c, r1 - r0], row, parallel=True)
    parts = [((r0, r1), (c0, c1), False)] if not lanes else []
    parts += [((0, r0), (0, ow), True), ((r1, oh), (0, ow), True),
              ((r0, r1), (0, c0), True), ((r0, r1), (c1, ow), True)]
    for (y0, y1), (x0, x1), checked in parts:
        if y0 < y1 and x0 < x1:
            e.loops([n, c, y1 - y0, x1 - x0], lambda e, ivs, y0=y0, x0=x0, checked=checked: body(
                e, [ivs[0], ivs[1], e.linear([ivs[2]], [1], y0), e.linear([ivs[3]], [1], x0)],
                checked), parallel=True)


def _max_by_columns(e: Emitter, op: Operation, x: SSAValue, out: SSAValue, cx: Context,
                    lanes: int) -> None:
    """A max pool with the CPU's row_reductions, when its windows overlap along a row: one
    image plane per parallel iteration, and for each output row, first the max down each
    input column its windows cover (kh taps, unit stride; only the rows inside the input, a
    padded column -inf), kept in a row of scratch by the column's phase (its index mod the
    stride), then each output the max of kw of those (unit stride in each phase). Every
    load runs along contiguous memory, so each loop is whole vectors (`_block_start`), and
    no window is bounds-checked; the same max as the window's order (IEEE maximum is
    associative and commutative, NaN as NaN, -0 below +0).

    Squeezenet's three 3 x 3 stride-2 pools, one core (`tapeml.jit(nn.max_pool2d)`): 568,
    337, 152 us with every window's 9 taps (stride-2 loads: LLVM gathered one tap of each
    row) -> 128-151, 81-99, 60-67 (onnxruntime 169, 85, 48); ResNet's (padding 1) of
    8 x 64 x 112 x 112: 6.4 ms -> 3.75 with its edges' windows still bounds-checked
    (a strided pass over memory again) -> 1.78 with them in this form too. A
    window as wide as its stride (2 x 2, stride 2) reads its taps as whole interleaved
    groups already, and stays with `lower_pool`'s blocks."""
    n, c, h, w = shape_of(op.input)
    oh, ow = shape_of(op.result)[2:]
    t = op.result.type.get_element_type()
    kh, kw = op.params["kernel"]
    (sh, sw), (top, left, _, _) = op.params["stride"], op.params["padding"]
    # phase p holds the column maxima at input columns sw * q + p - left, q < need[p]; of
    # those, q in [inside[p][0], inside[p][1]) are inside the input (the rest padding)
    need = [ow + max(dx for dx in range(p, kw, sw)) // sw for p in range(sw)]
    inside = [(min(max(0, -(-(left - p) // sw)), need[p]),
               min(max(0, (w - 1 + left - p) // sw + 1), need[p])) for p in range(sw)]
    inside = [(lo, max(lo, hi)) for lo, hi in inside]
    span = max(need)
    common = (max(lo for lo, _ in inside), min(hi for _, hi in inside))
    slots = n * c * sw * span
    scratch = e.insert(alloc(MemRefType(t, [slots])))
    cx.report.scratch_bytes = max(cx.report.scratch_bytes, slots * t.bitwidth // 8)
    low = e.scalar(-np.inf, t)
    (r0, r1) = _inside(oh, h, sh, kh, top)

    def plane(e: Emitter, ivs: list[SSAValue]) -> None:
        phases = e.linear(ivs, [c * sw * span, sw * span])

        def row(e: Emitter, y: SSAValue | int, taps: tuple[int, int]) -> None:
            """Output row y, its windows' rows inside the input those of taps [t0, t1)."""
            t0, t1 = taps
            corner = e.linear([*ivs, y], [c * h * w, h * w, sh * w], (t0 - top) * w - left)

            def column(e: Emitter, q: SSAValue, p: int) -> None:
                at = e.linear([q], [sw], p)
                down = e.reduce([t1 - t0], low, lambda e, dy, acc: e.insert(arith.MaximumfOp(
                    acc, e.load(x, e.addi(e.linear(dy, [w]), e.addi(corner, at))))))
                e.store(down, scratch, e.addi(phases, e.linear([q], [1], p * span)))

            def columns(e: Emitter, qv: list[SSAValue]) -> None:
                q = e.addi(_block_start(e, qv[0], lanes, *common), qv[1])
                for p in range(sw):
                    column(e, q, p)

            if common[1] - common[0] >= lanes:
                e.loops([-(-(common[1] - common[0]) // lanes), lanes], columns)
                done = common
            else:
                done = (common[0], common[0])
            for p in range(sw):  # each phase's columns past those every phase has inside
                lo, hi = inside[p]
                for q0, q1 in ((lo, min(done[0], hi)), (max(done[1], lo), hi)):
                    if q0 < q1:
                        e.loops([q1 - q0], lambda e, qv, p=p, q0=q0: column(
                            e, e.linear(qv, [1], q0), p))
                for q0, q1 in ((0, lo), (hi, need[p])):  # padding
                    if q0 < q1:
                        e.loops([q1 - q0], lambda e, qv, p=p, q0=q0: e.store(
                            low, scratch, e.addi(phases, e.linear(qv, [1], p * span + q0))))
            start = e.linear([*ivs, y], [c * oh * ow, oh * ow, ow])

            def outputs(e: Emitter, jv: list[SSAValue]) -> None:
                j = e.addi(_block_start(e, jv[0], lanes, 0, ow), jv[1])
                value = low
                for dx in range(kw):
                    at = e.addi(phases, e.linear([j], [1], (dx % sw) * span + dx // sw))
                    value = e.insert(arith.MaximumfOp(value, e.load(scratch, at)))
                e.store(value, out, e.addi(start, j))

            e.loops([-(-ow // lanes), lanes], outputs)

        if r0 < r1:
            e.loops([r1 - r0], lambda e, yv: row(e, e.linear(yv, [1], r0), (0, kh)))
        for y in [*range(0, r0), *range(max(r1, r0), oh)]:  # rows whose windows pass an edge
            first = y * sh - top
            row(e, y, (max(0, -first), max(max(0, -first), min(kh, h - first))))

    e.loops([n, c], plane, parallel=True)
    e.insert(dealloc(scratch))


@lowering(tape.MaxPool2dBackwardOp, tape.AvgPool2dBackwardOp)
def lower_pool_backward(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue,
                        cx: Context) -> None:
    x_shape = shape_of(op.result)
    ct_shape = shape_of(op.cotangent)
    t = op.result.type.get_element_type()
    kh, kw = op.params["kernel"]
    (sh, sw) = op.params["stride"]
    ct_buf = ins[1] if isinstance(op, tape.MaxPool2dBackwardOp) else ins[0]
    if sh >= kh and sw >= kw and not any(op.params["padding"]):
        _pool_backward_tiled(e, op, ins, out, ct_buf)
        return
    zero(e, out, math.prod(x_shape), t)

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
            e.if_(inside, lambda e: accumulate(e, out, index, value))

        e.loops([kh, kw], scatter)

    # windows that do not overlap (stride >= kernel) scatter into disjoint elements
    e.loops(ct_shape, body, parallel=sh >= kh and sw >= kw)


def _pool_backward_tiled(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue,
                         ct_buf: SSAValue) -> None:
    """Pool windows side by side (stride >= kernel, no padding): every tap is inside the input
    and every input element in one window at most, so each window writes its taps (no bounds
    check, no read-modify-write) and only the elements no window covers are zeroed first."""
    x_shape, ct_shape = shape_of(op.result), shape_of(op.cotangent)
    t = op.result.type.get_element_type()
    (kh, kw), (sh, sw) = op.params["kernel"], op.params["stride"]
    if (sh, sw) != (kh, kw) or ct_shape[2] * sh != x_shape[2] or ct_shape[3] * sw != x_shape[3]:
        zero(e, out, math.prod(x_shape), t)
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
