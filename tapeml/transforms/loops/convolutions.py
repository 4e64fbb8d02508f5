"""conv2d and its two cotangents: GEMMs over an im2col matrix when groups = 1, direct loops over
the taps that read inside the input otherwise (what the padded taps add is added apart). The
CPU's forward convolutions may instead be a GEMM over the padded input's windows read in place
(`{window_convs}`: `_windowed`, kernel.gemm's a_taps) or the GEMM with the pixels as C's rows
(`{pixel_rows}`: `_pixels_as_rows`); `lower_conv2d_gemm` says which takes what."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from xdsl.dialects import arith
from xdsl.dialects.builtin import MemRefType, f32
from xdsl.ir import Operation, SSAValue

from tapeml.dialects import kernel, tape
from tapeml.dialects.kernel import GemmSpec
from tapeml.transforms.loops.buffers import PlanReport
from tapeml.transforms.loops.emitter import (
    Emitter,
    accumulate,
    alloc,
    dealloc,
    shape_of,
    zero,
)
from tapeml.transforms.loops.epilogues import Epilogue, gemm
from tapeml.transforms.loops.registry import Context, lowering


@lowering(tape.Conv2dOp, tape.Conv2dBackwardInputOp, tape.Conv2dBackwardWeightOp)
def lower_convolution(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue,
                      cx: Context) -> None:
    """groups = 1: GEMMs over an im2col matrix; otherwise direct loops. Over no images the
    weight's cotangent is zeros (a sum of no terms: the kernels' batch sums and the runs'
    loops would leave it unwritten) and the other two are empty."""
    images = shape_of(op.input if isinstance(op, tape.Conv2dBackwardWeightOp)
                      else op.result)[0]
    if images == 0:
        if size := math.prod(shape_of(op.result)):
            zero(e, out, size, op.result.type.get_element_type())
        return
    if op.params["groups"] == 1:
        lower_conv2d_gemm(e, op, ins, out, cx.report, cx.weight_runs, cx.image_group,
                          cx.epilogue, cx.out_images, cx.window_convs, cx.pixel_rows,
                          cx.any_batch)
    elif isinstance(op, tape.Conv2dOp):
        lower_conv2d(e, op, ins, out)
    else:
        lower_conv2d_backward(e, op, ins, out)


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


def _direct_row(e: Emitter, geo: _ConvGeometry, source: SSAValue, weights: SSAValue,
                out: SSAValue, ivs: list[SSAValue], backward: bool) -> None:
    """One row of the direct loops, at ivs = (image, group, channel, output row y): for each tap
    that reads inside the input (where row y does), along the row and over the other channel,
    out += source * w[o, c, i, j]. conv2d reads x at the tap's input position and adds to its
    output row (the channel is o, the loop's c); its input cotangent (`backward`) reads the
    cotangent row and adds to dx at the tap's position (the channel is c, the loop's o)."""
    b, gi, channel, y = ivs
    for i, j, (y0, y1), (x0, x1), first in geo.taps():
        def tap(e: Emitter, i=i, j=j, y0=y0, x0=x0, x1=x1, first=first) -> None:
            def body(e: Emitter, inner: list[SSAValue]) -> None:
                other, xx = inner
                oi, ci = (other, channel) if backward else (channel, other)

                def x_index() -> SSAValue:
                    return e.linear([b, gi, ci, y, xx], geo.x_steps(),
                                    first - y0 * geo.x_steps()[3])

                def y_index() -> SSAValue:
                    return e.linear([b, gi, oi, y, xx], geo.y_steps(), x0)

                value = e.load(source, y_index() if backward else x_index())
                weight = e.load(weights, e.linear([gi, oi, ci], geo.w_steps(), i * geo.kw + j))
                accumulate(e, out, x_index() if backward else y_index(),
                           e.insert(arith.MulfOp(value, weight)))

            e.loops([geo.o // geo.groups if backward else geo.cg, x1 - x0], body)

        e.if_(e.in_range(e.linear([y], [1], -y0), y1 - y0), tap)


def lower_conv2d(e: Emitter, op: tape.Conv2dOp, ins: list[SSAValue], out: SSAValue) -> None:
    """out[b, o, y, :] += in[...] * w[o, c, i, j]: per output row, the taps that read inside
    the input (the padding contributes nothing) and their channels; the innermost loop runs
    along the row, which stays in cache, and LLVM vectorizes it."""
    geo = _ConvGeometry.of(shape_of(op.input), shape_of(op.weight), shape_of(op.result), op.params)
    og = geo.o // geo.groups
    t = op.result.type.get_element_type()
    zero(e, out, math.prod(shape_of(op.result)), t)

    def row(e: Emitter, ivs: list[SSAValue]) -> None:
        b, gi, oi, y = ivs
        _direct_row(e, geo, ins[0], ins[1], out, ivs, backward=False)
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
                    e.loops([c1 - c0], lambda e, inner: accumulate(
                        e, out, e.linear([b, gi, oi, y, inner[0]], geo.y_steps(), c0), padding))

                e.if_(e.in_range(e.linear([y], [1], -r0), r1 - r0), add)

    e.loops([geo.n, geo.groups, og, geo.oh], row, parallel=True)  # each writes its own row


def lower_conv2d_backward(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue) -> None:
    """conv2d's cotangents, tap by tap over the positions whose tap is inside the input: per
    output row, dx[tap row] += ct * w along the row (vectorized); or dw[o, c, i, j] as the sum
    of ct * x over the positions."""
    weight_grad = isinstance(op, tape.Conv2dBackwardWeightOp)
    if weight_grad:
        x_shape, w_shape = shape_of(op.input), shape_of(op.result)
    else:
        x_shape, w_shape = shape_of(op.result), shape_of(op.weight)
    geo = _ConvGeometry.of(x_shape, w_shape, shape_of(op.cotangent), op.params)
    og = geo.o // geo.groups
    t = op.result.type.get_element_type()
    if not weight_grad:
        ct_buf, w_buf = ins
        zero(e, out, math.prod(x_shape), t)
        e.loops([geo.n, geo.groups, geo.cg, geo.oh],
                lambda e, ivs: _direct_row(e, geo, ct_buf, w_buf, out, ivs, backward=True))
        return
    x_buf, ct_buf = ins
    zero(e, out, math.prod(w_shape), t)
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
            accumulate(e, out, e.linear([gi, oi, ci], geo.w_steps(), i * geo.kw + j), total)

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
                accumulate(e, out, e.linear([gi, oi, ci], geo.w_steps(), i * geo.kw + j),
                            total)

        e.loops([geo.groups, og, geo.cg], padding, parallel=True)


UNROLLED_TAPS = 25
"""im2col and col2im write one loop nest per kernel tap (each over exactly the positions
inside the input: no bounds checks) up to 5 x 5 taps; a bigger kernel gets one nest with the
taps as loops and a bounds check per position. ResNet-50's 7 x 7 stem (random weights, batch
1, one thread): 4.2 ms as 49 nests, 5.8 ms as one; but the 49 nests took LLVM 3 s more, and
the model's first call 12.4 s -> 7.0 s."""

COLUMN_NESTS = 11
"""A kernel of more than UNROLLED_TAPS taps and at most this many columns has its im2col and
col2im written as a nest per column (`by_columns`); a wider one (an audio model's 1 x 256)
as one nest over every tap, each position checked (`all_taps`)."""

RUN_COLUMNS = 16
"""A weight gradient with at least this many weights per output channel (C * kh * kw) is,
where the machine is better at it (`weight_runs`, Target.weight_runs), a
few products over runs of whole images (`_weight_gradient_over_runs`); a narrower one (a
first layer's one input channel: 9) stays a product per image summed in groups, where the
long products' B would be mostly masked columns (W4's 1 -> 16 conv: 1.05 ms as it is, 1.15
ms as one product)."""


GROUP_BYTES = 2 << 20
"""With an `image_group`, a forward convolution whose im2col matrix (all images) would take
more than this, and whose product for one image is GROUP_FLOPS or more, writes it a group of
images at a time into a buffer of one group, each group's product right after: the matrix
stays in cache. ResNet-50's 64 -> 64 3 x 3 convolution at 56 x 56, one core: 3.76 ms per
image at batch 8 (a 58 MB matrix) against 2.70 a group of one image at a time; squeezenet's
16 -> 64 at 55 x 55: 0.91 against 0.63."""

GROUP_FLOPS = 4_000_000
"""...: smaller products a group at a time would leave threads idle (the CPU's kernel shares
out a product of fewer flops as a batch, not within one), and their im2col too."""


WINDOW_ROWS = 128
"""`window_convs` reads the padded input's windows in place for a convolution of at most this
many output channels: its weights (B, packed whole) then stay in L2 beside the windows its
tiles read, all of k in one block. One core (AVX-512 Xeon), the product alone: 64 x 144 over
55 x 55, 382 us over the windows against 456 us over the im2col matrix (which costs its
writing besides); 64 x 576 over 56 x 56, 1.58 against 2.05 ms (with B's rows the windows;
5-15% faster since A's columns are). In ResNet-50, 256 and 512 channels over 14 x 14 ran
8-36% slower over the windows than as the pixel-rows product of the im2col matrix."""

WINDOW_WIDENING = 1.1
"""... and whose windows' rows (a padded row, or a phase's: see `_Phases`) are at most this
much wider than its output's: the product computes the padding's columns too (and drops
them), 13 x 13 images padded to 15 columns (256 x 576 over them: 445 against 380 us)..."""

WINDOW_WIDENING_OUTPUTS = 8
"""... or at most 1 + this / its output channels wider, where that is more: each column of an
im2col matrix is written for the products of o output channels, so with few of them its
writing costs more than the windows' padding columns. W4's 16 -> 32 over 14 x 14 (16 / 14 =
1.14): 1618 -> 1353 us over the windows at batch 64, 29 -> 26 us at batch 1; 64 -> 64 over
13 x 13 (15 / 13) and 32 -> 64 over 14 x 14, 0.96-1.0 as fast (left to the im2col matrix);
one core, Zen 4, each jitted alone with its bias and relu, timed in turns. W4's step 8.00 /
7.84 -> 7.71 / 7.57 ms on one core, 4.53 / 3.95 -> 4.30 / 3.82 on two (both jitted in one
process, timed in turns); its cold first call 0.80 -> 0.91 s (the windows' kernel)."""


WINDOW_BYTES = 64 << 10
"""... and whose im2col matrix would take at least this many bytes per image (in f32): a
smaller one is written and packed in L2, where that costs little (W4's first convolution,
1 -> 16 channels over 28 x 28, 28 KB: its step ran the same either way; 32 -> 32 over 7 x 7,
55 KB, the same), and the windows would cost a first call the compile of a kernel of their
own (0.13 s on one core). (256 KB before W4's second convolution, 110 KB, was measured.)"""


@dataclass(frozen=True)
class _Phases:
    """A convolution's padded input split by its stride into sh x sw phases, phase (py, px)
    holding the rows sh * y + py and columns sw * x + px of the padded input (zero past it),
    each hq x wq: a tap then reads one phase at a shift, so the windows of a stride-s
    convolution are rows of a buffer read in place as a stride-1 one's are. Stride 1: one
    phase, the padded input itself."""

    geo: _ConvGeometry

    @property
    def sizes(self) -> tuple[int, int]:
        top, left, bottom, right = self.geo.params["padding"]
        (sh, sw) = self.geo.params["stride"]
        return (-(-(self.geo.h + top + bottom) // sh), -(-(self.geo.w + left + right) // sw))

    @property
    def channel(self) -> int:
        """Elements of one channel's phases."""
        (sh, sw), (hq, wq) = self.geo.params["stride"], self.sizes
        return sh * sw * hq * wq

    def taps(self) -> list[int]:
        """Where each tap (i, j), in order, starts in a channel's phases."""
        (sh, sw), (dh, dw) = self.geo.params["stride"], self.geo.params["dilation"]
        hq, wq = self.sizes
        return [((i * dh % sh) * sw + j * dw % sw) * hq * wq + i * dh // sh * wq + j * dw // sw
                for i in range(self.geo.kh) for j in range(self.geo.kw)]


WINDOW_DEPTH = 64
"""... and at least this many products per output (k = C * kh * kw): a shallower product is
bound by writing its output, which the windows write twice (the padding's columns, then the
copy): squeezenet's 3 -> 64 3 x 3 stride-2 first layer (k = 27) took 0.82-0.88 ms in the
model over windows against 0.73-0.74 over its im2col matrix (one core)."""


def _windows_fit(geo: _ConvGeometry, epilogue: Epilogue | None) -> bool:
    """A forward convolution the windowed product takes (`_windowed`)."""
    depth = geo.c * geo.kh * geo.kw
    widening = max(WINDOW_WIDENING, 1 + WINDOW_WIDENING_OUTPUTS / max(geo.o, 1))
    return (geo.o <= WINDOW_ROWS and _Phases(geo).sizes[1] <= widening * geo.ow
            and depth >= WINDOW_DEPTH and 4 * depth * geo.oh * geo.ow >= WINDOW_BYTES
            and (epilogue is None or epilogue.residual is None))


def lower_conv2d_gemm(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue,
                      report: PlanReport, weight_runs: bool = True,
                      image_group: int = 0, epilogue: Epilogue | None = None,
                      out_images: int = 0, window_convs: bool = False,
                      pixel_rows: bool = False, any_batch: bool = False) -> None:
    """conv2d (groups = 1) and its two cotangents as GEMMs over the im2col matrix
    cols[b, c, i, j, y, x] = x[b, c, y*sh + i*dh - top, x*sw + j*dw - left] (0 in the padding),
    a scratch buffer of N*C*kh*kw*OH*OW elements freed after the op:

        forward   out[b] = W[o, (c,i,j)] @ cols[b]                     per image, one kernel.gemm
                  or, an `image_group` and a large matrix (GROUP_BYTES), in a loop over
                  groups of that many images (or the largest divisor of N below): cols of
                  the group, then its kernel.gemm (kernel.view: the group's images)
        input     dcols[b] = W^T @ ct[b], then dx += dcols scattered back (col2im)
        weight    dW = sum_b ct[b] @ cols[b]^T                         batches summed in the kernel,
                  or, C*kh*kw >= RUN_COLUMNS and `weight_runs`, products over runs of whole
                  images (`_weight_gradient_over_runs`)

    The forward products carry `epilogue` (a bias per output channel: a row of C; relu),
    where an op folds into the convolution (epilogues.py), and write each image's result
    `out_images` elements after the last where that is given (its part of a concat's
    buffer; 0: one after another). With `window_convs`, a forward convolution of few output
    channels (WINDOW_ROWS), narrow padding (WINDOW_WIDENING) and a large im2col matrix
    (WINDOW_BYTES) is a product over its zero-padded input's windows instead (`_windowed`):
    no im2col matrix. With `pixel_rows`, one whose product pads fewer tiles with the pixels
    as C's rows (`_pixel_rows_fit`) is that product, stored transposed into out
    (`_pixels_as_rows`).
    """
    kind = type(op)
    if kind is tape.Conv2dOp:
        x_shape, w_shape = shape_of(op.input), shape_of(op.weight)
    elif kind is tape.Conv2dBackwardInputOp:
        x_shape, w_shape = shape_of(op.result), shape_of(op.weight)
    else:
        x_shape, w_shape = shape_of(op.input), shape_of(op.result)
    y_shape = shape_of(op.result if kind is tape.Conv2dOp else op.cotangent)
    geo = _ConvGeometry.of(x_shape, w_shape, y_shape, op.params)
    t = op.result.type.get_element_type()
    dtype = "f32" if t == f32 else "f64"
    ckk, ohw = geo.c * geo.kh * geo.kw, geo.oh * geo.ow
    size = geo.n * ckk * ohw
    (sh, sw), (dh, dw) = op.params["stride"], op.params["dilation"]
    top, left = op.params["padding"][:2]
    runs = weight_runs and ckk >= RUN_COLUMNS
    if (geo.kh, geo.kw, sh, sw) == (1, 1, 1, 1) and not any(op.params["padding"]) and (
            kind is not tape.Conv2dBackwardWeightOp or not runs):
        if pixel_rows and kind is tape.Conv2dOp and _pixel_rows_fit(geo):  # x as it is
            _pixels_as_rows(e, geo, ins[0], ins[1], out, epilogue, out_images, dtype)
            return
        _pointwise(e, op, ins, out, geo, dtype, epilogue, out_images)  # im2col: x itself
        return
    if window_convs and kind is tape.Conv2dOp and _windows_fit(geo, epilogue):
        _windowed(e, geo, ins, out, epilogue, out_images, image_group, report, t, dtype,
                  any_batch)
        return
    images = geo.n  # in cols at once
    if (image_group and kind is tape.Conv2dOp and geo.n > 1
            and size * (t.bitwidth // 8) > GROUP_BYTES and 2 * geo.o * ckk * ohw >= GROUP_FLOPS):
        images = max(d for d in range(1, min(image_group, geo.n) + 1) if geo.n % d == 0)
        size = images * ckk * ohw
    cols = e.insert(alloc(MemRefType(t, [size])))
    report.scratch_bytes = max(report.scratch_bytes, size * (t.bitwidth // 8))
    col_steps = [ckk * ohw, geo.kh * geo.kw * ohw, ohw, geo.ow, 1]  # over (b, c, tap, y, x)
    if kind is tape.Conv2dBackwardWeightOp and runs:
        _weight_gradient_over_runs(e, geo, ins, out, cols, report, op.params, dtype)
        e.insert(dealloc(cols))
        return

    def taps(e: Emitter, move: Callable[[Emitter, SSAValue, SSAValue], None]) -> None:
        """move(x index, cols index) for every (b, c, tap, y, x) that reads inside the input,
        b < `images` (in x and cols as they are: a view of one image's, per image)."""
        if geo.kh * geo.kw > UNROLLED_TAPS:
            return by_columns(e, move) if geo.kw <= COLUMN_NESTS else all_taps(e, move)
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
            e.loops([images, geo.c, y1 - y0, x1 - x0], body, parallel=True)

    def by_columns(e: Emitter, move: Callable[[Emitter, SSAValue, SSAValue], None]) -> None:
        """`taps` as one nest per column j of the kernel (ResNet's 7 x 7 stem: 7 nests): the
        kernel's rows are a loop, each row of output positions checked once against the
        input's rows, and the positions along it that read inside the input are known per
        j, so the innermost loop (a strided copy) runs with no check."""
        for j in range(geo.kw):
            x0, x1 = _valid(geo.ow, geo.w, sw, j * dw - left)
            if x0 >= x1:
                continue

            def plane(e: Emitter, ivs: list[SSAValue], j=j, x0=x0, x1=x1) -> None:
                b, c = ivs

                def row(e: Emitter, inner: list[SSAValue]) -> None:
                    i, y = inner
                    iy = e.linear([y, i], [sh, dh], -top)

                    def along(e: Emitter) -> None:
                        e.loops([x1 - x0], lambda e, xs: move(
                            e, e.linear([b, c, iy, xs[0]], [geo.c * geo.h * geo.w,
                                                            geo.h * geo.w, geo.w, sw],
                                        x0 * sw + j * dw - left),
                            e.linear([b, c, i, y, xs[0]], [col_steps[0], col_steps[1],
                                                           geo.kw * ohw, geo.ow, 1],
                                     j * ohw + x0)))

                    e.if_(e.in_range(iy, geo.h), along)

                e.loops([geo.kh, geo.oh], row)

            # each (image, channel) plane of x and of cols is its own: im2col and col2im alike
            e.loops([images, geo.c], plane, parallel=True)

    def all_taps(e: Emitter, move: Callable[[Emitter, SSAValue, SSAValue], None]) -> None:
        """`taps` as one nest for a kernel of many taps (an audio model's 1 x 256): the taps
        are loops too, each position checked against the input's bounds (a nest per tap
        wrote 256 nests per convolution, and LLVM took minutes over them)."""
        def plane(e: Emitter, ivs: list[SSAValue]) -> None:
            b, c = ivs

            def body(e: Emitter, inner: list[SSAValue]) -> None:
                i, j, y, xx = inner
                iy = e.addi(e.muli(y, e.index(sh)), e.linear([i], [dh], -top))
                ix = e.addi(e.muli(xx, e.index(sw)), e.linear([j], [dw], -left))
                inside = e.insert(arith.AndIOp(e.in_range(iy, geo.h), e.in_range(ix, geo.w)))
                source = e.linear([b, c, iy, ix], [geo.c * geo.h * geo.w, geo.h * geo.w,
                                                   geo.w, 1])
                target = e.linear([b, c, i, j, y, xx], [col_steps[0], col_steps[1],
                                                        geo.kw * ohw, ohw, geo.ow, 1])
                e.if_(inside, lambda e: move(e, source, target))

            e.loops([geo.kh, geo.kw, geo.oh, geo.ow], body)

        # each (image, channel) plane of x and of cols is its own: im2col and col2im alike
        e.loops([images, geo.c], plane, parallel=True)

    stride = out_images or geo.o * ohw  # from one image of out to the next
    covered = sum((y1 - y0) * (x1 - x0) for _, _, (y0, y1), (x0, x1), _ in geo.taps())
    if kind is not tape.Conv2dBackwardInputOp and covered < geo.kh * geo.kw * ohw:
        zero(e, cols, size, t)  # the padding's entries (the same for every image)
    if images < geo.n:
        def group(e: Emitter, ivs: list[SSAValue]) -> None:
            chw = geo.c * geo.h * geo.w
            x = e.insert(kernel.ViewOp(ins[0], e.linear(ivs, [images * chw]),
                                       MemRefType(t, [images * chw])))
            y = e.insert(kernel.ViewOp(out, e.linear(ivs, [images * stride]), MemRefType(
                t, [(images - 1) * stride + geo.o * ohw])))
            taps(e, lambda e, source, target: e.store(e.load(x, source), cols, target))
            here = epilogue
            if epilogue is not None and epilogue.residual is not None:  # the group's images
                here = replace(epilogue, residual=e.insert(kernel.ViewOp(
                    epilogue.residual, e.linear(ivs, [images * geo.o * ohw]),
                    MemRefType(t, [images * geo.o * ohw]))))
            gemm(e, ins[1], cols, y, GemmSpec(  # y[n] = w @ cols[n]
                dtype=dtype, batch=images, m=geo.o, n=ohw, k=ckk, a=(0, ckk, 1),
                b=(ckk * ohw, ohw, 1), c0=stride, accumulate=False), here)

        e.loops([geo.n // images], group)
        e.insert(dealloc(cols))
        return
    if kind is not tape.Conv2dBackwardInputOp:  # im2col
        taps(e, lambda e, source, target: e.store(e.load(ins[0], source), cols, target))
    if kind is tape.Conv2dOp and pixel_rows and _pixel_rows_fit(geo):
        _pixels_as_rows(e, geo, cols, ins[1], out, epilogue, out_images, dtype)
    elif kind is tape.Conv2dOp:
        gemm(e, ins[1], cols, out, GemmSpec(  # out[n] = w @ cols[n]
            dtype=dtype, batch=geo.n, m=geo.o, n=ohw, k=ckk, a=(0, ckk, 1),
            b=(ckk * ohw, ohw, 1), c0=stride, accumulate=False), epilogue)
    elif kind is tape.Conv2dBackwardInputOp:
        ct, weight = ins
        e.insert(kernel.GemmOp(weight, ct, cols, GemmSpec(  # cols[n] = w^T @ ct[n]
            dtype=dtype, batch=geo.n, m=ckk, n=ohw, k=geo.o, a=(0, 1, ckk),
            b=(geo.o * ohw, ohw, 1), c0=ckk * ohw, accumulate=False)))
        zero(e, out, math.prod(x_shape), t)  # col2im
        taps(e, lambda e, source, target: accumulate(e, out, source, e.load(cols, target)))
    else:
        ct = ins[1]
        e.insert(kernel.GemmOp(ct, cols, out, GemmSpec(  # out = sum over n of ct[n] @ cols[n]^T
            dtype=dtype, batch=geo.n, m=geo.o, n=ckk, k=ohw, a=(geo.o * ohw, ohw, 1),
            b=(ckk * ohw, 1, ohw), c0=0, accumulate=False)))
    e.insert(dealloc(cols))



TILE, KC = (14, 32), 256
"""The CPU's f32 register tile on AVX-512 (MR rows at most, NR columns: tapeml/codegen/gemm's
`tiles`) and its depth of a block of k, which `pixel_rows` weighs the two forms of a
convolution's product by. A pass does not know its backend's target; on another machine the
choice stays correct, only less well made."""

TRANSPOSED_COST = (1.07, 0.03)
"""`pixel_rows`' price of the transposed form, against the padded tiles it saves: (a, b), a
padded product of (a + b * KC / min(k, KC)) times as many elements (KC = 256) costs what the
other form's does. The transposed tile's store (registers transposed, every block of k: 3%
at k >= 256, 14% at k = 64) and A's packing down its columns (x's channel-major layout). One
core, AVX-512 Xeon, the product alone with its bias and relu, transposed over as it is:
o x k over P pixels 256 x 1024 over 196, 684 against 772 us; 512 x 4608 over 49, 1.80 against
2.13 ms; 1024 x 256 over 196, 650 against 726 us; 128 x 512 over 784, 722 against 806 us;
512 x 128 over 784, 974 against 786; 64 x 576 over 3136, 2.34 against 2.12 ms (tiles padded
1.09 times as much then: 64 rows in tiles of 14)."""


def _padded(count: int, most: int) -> int:
    """`count` rows in tiles as the CPU's kernel chooses their height (its `tiles`): `most`
    if that pads by at most a twentieth, else the one of `most` and the two around half of
    it that pads least."""
    if count <= most:
        return count
    if -(-count // most) * most - count <= count // 20:
        return -(-count // most) * most
    return min(-(-count // r) * r for r in (most, most // 2 + 1, max(1, most // 2)))


def _padded_columns(count: int, width: int) -> int:
    """`count` columns in panels `width` wide, the last one half a panel where that holds it
    (the kernel's `.tile.half`)."""
    whole, rest = divmod(count, width)
    return whole * width + (0 if not rest else width // 2 if rest <= width // 2 else width)


def _pixel_rows_fit(geo: _ConvGeometry) -> bool:
    """The product with the pixels as C's rows pads fewer tiles, by enough (TRANSPOSED_COST)."""
    pixels, k = geo.oh * geo.ow, geo.c * geo.kh * geo.kw
    rows, columns = TILE
    plain = _padded(geo.o, rows) * _padded_columns(pixels, columns)
    transposed = _padded(pixels, rows) * _padded_columns(geo.o, columns)
    a, b = TRANSPOSED_COST
    return plain > transposed * (a + b * KC / min(max(k, 1), KC))


def _pixels_as_rows(e: Emitter, geo: _ConvGeometry, source: SSAValue, weights: SSAValue,
                    out: SSAValue, epilogue: Epilogue | None, out_images: int,
                    dtype: str) -> None:
    """out[b][o][p] = sum over q of w[o, q] * source[b][q][p] (source: the im2col matrix, or
    x itself for a pointwise convolution) as out'[b][p][o] = source[b]^T @ w^T (A and B
    read transposed: their strides), stored transposed (kernel.gemm's c_transposed): out'
    written as out's layout, the bias (one per column of out') and the residual (out's
    layout) its epilogue."""
    pixels, k = geo.oh * geo.ow, geo.c * geo.kh * geo.kw
    if epilogue is not None and epilogue.bias is not None:
        epilogue = replace(epilogue, kind="columns")
    gemm(e, source, weights, out, GemmSpec(  # out'[n] = source[n]^T @ w^T
        dtype=dtype, batch=geo.n, m=pixels, n=geo.o, k=k, a=(k * pixels, 1, pixels),
        b=(0, 1, k), c0=out_images or pixels * geo.o, accumulate=False, c_transposed=True),
        epilogue)


def _windowed(e: Emitter, geo: _ConvGeometry, ins: list[SSAValue], out: SSAValue,
              epilogue: Epilogue | None, out_images: int, image_group: int, report: PlanReport,
              t: Any, dtype: str, any_batch: bool = False) -> None:
    """A forward convolution as a product over windows (kernel.gemm's a_taps): the input
    copied into its zero-padded phases xq[b][c][py][px][hq][wq] (`_Phases`; zeroed once,
    only the input's own positions written), then out'[b][o][y * wq + x] = sum over (c, i,
    j) of w[o, c, i, j] * (the phase of tap (i, j) of xq[b][c], read at its shift + y * wq +
    x) for every y < OH and x < wq, as the product with the pixels as its rows (stored
    transposed into out', the bias one per column), whose A (row y * wq + x, column (c, i,
    j)) is xq itself read at a shift per column: the pixels x >= OW read across a row's end
    (the last ones past the images: the buffer's tail, A_TAPS_SLACK longer for the kernel's
    whole tiles) and are dropped as out' is copied into out. A group of
    `image_group` images (a divisor of N; all of them without one) at a time, so the buffers
    stay in cache; `any_batch`: in a loop over the groups even where one group is every image
    (a batch of 2 over groups of 2: its program is another's but for its numbers)."""
    phases = _Phases(geo)
    top, left = geo.params["padding"][:2]
    (sh, sw), (hq, wq) = geo.params["stride"], phases.sizes
    taps, channel = phases.taps(), phases.channel
    wide_plane, ckk = geo.oh * wq, geo.c * geo.kh * geo.kw
    images = max(d for d in range(1, min(image_group or geo.n, geo.n) + 1) if geo.n % d == 0)
    padded_size = (images * geo.c * channel + max(0, max(taps) + wide_plane - channel)
                   + kernel.A_TAPS_SLACK)  # (read, never used)
    padded = e.insert(alloc(MemRefType(t, [padded_size])))
    wide = e.insert(alloc(MemRefType(t, [images * geo.o * wide_plane])))
    report.scratch_bytes = max(report.scratch_bytes,
                               (padded_size + images * geo.o * wide_plane) * (t.bitwidth // 8))
    zero(e, padded, padded_size, t)
    chw, stride = geo.c * geo.h * geo.w, out_images or geo.o * geo.oh * geo.ow
    by_columns = epilogue  # (the bias: one per output channel, a column of the product)
    if epilogue is not None and epilogue.bias is not None:
        by_columns = replace(epilogue, kind="columns")

    def phase_in(e: Emitter, x: SSAValue, py: int, px: int) -> None:
        """The input's positions that phase (py, px) holds, copied into it."""
        y0, y1 = _valid(hq, geo.h, sh, py - top)
        x0, x1 = _valid(wq, geo.w, sw, px - left)
        if y0 < y1 and x0 < x1:
            e.loops([images, geo.c, y1 - y0, x1 - x0], lambda e, v: e.store(
                e.load(x, e.linear(v, [chw, geo.h * geo.w, sh * geo.w, sw],
                                   (y0 * sh + py - top) * geo.w + x0 * sw + px - left)),
                padded, e.linear(v, [geo.c * channel, channel, wq, 1],
                                 (py * sw + px) * hq * wq + y0 * wq + x0)), parallel=True)

    looped = images < geo.n or any_batch

    def group(e: Emitter, ivs: list[SSAValue]) -> None:
        x, y = ins[0], out
        if looped:  # this group's images of x and of out
            x = e.insert(kernel.ViewOp(ins[0], e.linear(ivs, [images * chw]),
                                       MemRefType(t, [images * chw])))
            y = e.insert(kernel.ViewOp(out, e.linear(ivs, [images * stride]), MemRefType(
                t, [(images - 1) * stride + geo.o * geo.oh * geo.ow])))
        for py in range(sh):
            for px in range(sw):
                phase_in(e, x, py, px)
        # out'[n]^T = windows of xq[n] (its columns) @ w^T, stored transposed
        gemm(e, padded, ins[1], wide, GemmSpec(
            dtype=dtype, batch=images, m=wide_plane, n=geo.o, k=ckk,
            a=(geo.c * channel, 1, channel), b=(0, 1, ckk), c0=geo.o * wide_plane,
            accumulate=False, a_taps=tuple(taps), c_transposed=True), by_columns)
        e.loops([images, geo.o, geo.oh, geo.ow], lambda e, v: e.store(
            e.load(wide, e.linear(v, [geo.o * wide_plane, wide_plane, wq, 1])), y,
            e.linear(v, [stride, geo.oh * geo.ow, geo.ow, 1])), parallel=True)

    if looped:
        e.loops([geo.n // images], group)
    else:
        group(e, [])
    e.insert(dealloc(wide))
    e.insert(dealloc(padded))


def _pointwise(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue,
               geo: _ConvGeometry, dtype: str, epilogue: Epilogue | None,
               out_images: int) -> None:
    """A 1 x 1 convolution of stride 1 without padding: its im2col matrix is x itself
    ([b][c][y*x], what cols would hold), and col2im is the identity, so the GEMMs read x and
    the input cotangent is the product itself (a ResNet's bottleneck convolutions)."""
    c, o, hw = geo.c, geo.o, geo.oh * geo.ow
    if isinstance(op, tape.Conv2dOp):
        spec = GemmSpec(dtype=dtype, batch=geo.n, m=o, n=hw, k=c, a=(0, c, 1),
                        b=(c * hw, hw, 1), c0=out_images or o * hw, accumulate=False)
        gemm(e, ins[1], ins[0], out, spec, epilogue)  # out[n] = w @ x[n]
    elif isinstance(op, tape.Conv2dBackwardInputOp):
        ct, weight = ins
        spec = GemmSpec(dtype=dtype, batch=geo.n, m=c, n=hw, k=o, a=(0, 1, c),
                        b=(o * hw, hw, 1), c0=c * hw, accumulate=False)
        e.insert(kernel.GemmOp(weight, ct, out, spec))  # dx[n] = w^T @ ct[n]
    else:
        x, ct = ins
        spec = GemmSpec(dtype=dtype, batch=geo.n, m=o, n=c, k=hw, a=(o * hw, hw, 1),
                        b=(c * hw, 1, hw), c0=0, accumulate=False)
        e.insert(kernel.GemmOp(ct, x, out, spec))  # dw = sum over n of ct[n] @ x[n]^T


RUNS = 8
"""`_weight_gradient_over_runs` splits its k into at most this many runs of whole images: a
batch of the product each, all adding into one C, which the CPU's kernel sums in as many groups
(its batch_groups: up to 8), in order, shared by its threads; on one thread or eight the same
sums."""


def _weight_gradient_over_runs(e: Emitter, geo: _ConvGeometry, ins: list[SSAValue],
                                 out: SSAValue, cols: SSAValue, report: PlanReport,
                                 params: dict, dtype: str) -> None:
    """dW = ct' @ cols' over k = (b, y, x): cols' is [b][y][x][(c, i, j)] (rows
    of B, contiguous, written a (b, y, x, c) at a time, each tap read through a bounds check),
    ct' is [o][b][y][x] (ct's b and o swapped, into a scratch of its own). The images' sums
    become a few long dot products per weight (up to RUNS runs of whole images, summed in
    order, the threads' shares) instead of a small product per image: W4's 16 -> 32 conv's
    weight gradient 3.3 -> 2.1 ms on one core."""
    x, ct = ins
    t = out.type.element_type
    ckk, ohw, kk = geo.c * geo.kh * geo.kw, geo.oh * geo.ow, geo.kh * geo.kw
    count = geo.n * ohw
    (sh, sw), (dh, dw) = params["stride"], params["dilation"]
    top, left = params["padding"][:2]

    def row(e: Emitter, ivs: list[SSAValue]) -> None:
        b, y, xx, c = ivs
        at = e.linear([b, y, xx, c], [ohw * ckk, geo.ow * ckk, ckk, kk])
        for i in range(geo.kh):
            iy = e.linear([y], [sh], i * dh - top)
            for j in range(geo.kw):
                ix = e.linear([xx], [sw], j * dw - left)
                inside = e.insert(arith.AndIOp(e.in_range(iy, geo.h), e.in_range(ix, geo.w)))
                value = e.load(x, e.linear([b, c, e.clamp(iy, geo.h), e.clamp(ix, geo.w)],
                                           [geo.c * geo.h * geo.w, geo.h * geo.w, geo.w, 1]))
                e.store(e.insert(arith.SelectOp(inside, value, e.scalar(0.0, t))), cols,
                        e.addi(at, e.index(i * geo.kw + j)))

    e.loops([geo.n, geo.oh, geo.ow, geo.c], row, parallel=True)
    swapped = e.insert(alloc(MemRefType(t, [geo.o * count])))
    report.scratch_bytes = max(report.scratch_bytes,
                               (geo.n * ckk * ohw + geo.o * count) * (t.bitwidth // 8))
    e.loops([geo.n, geo.o, ohw], lambda e, ivs: e.store(
        e.load(ct, e.linear(ivs, [geo.o * ohw, ohw, 1])), swapped,
        e.linear(ivs, [ohw, count, 1])), parallel=True)
    # k in `parts` runs of whole images, each a batch of the product, all adding into one C:
    # the kernel sums them in groups (gemm.batch_groups), which threads share
    parts = max(d for d in range(1, RUNS + 1) if geo.n % d == 0)
    run = count // parts
    e.insert(kernel.GemmOp(swapped, cols, out, GemmSpec(  # out = ct' @ cols'
        dtype=dtype, batch=parts, m=geo.o, n=ckk, k=run, a=(run, count, 1),
        b=(run * ckk, ckk, 1), c0=0, accumulate=False)))
    e.insert(dealloc(swapped))
