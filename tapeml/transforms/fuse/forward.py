"""tape-fuse's forward idioms (the package doc lists them): conv2d (groups = 1 and grouped),
maxpool2d and avgpool2d, raised from what nn.conv2d, nn.max_pool2d and nn.avg_pool2d record,
an unfold (im2col) of a pad with layout ops and a matmul or a reduction over the windows.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter

from tapeml.dialects import tape
from tapeml.transforms.fuse.matching import (
    FusionPattern,
    Windows,
    constant_value,
    match_windows,
    pool_windows,
    producer,
    single_use,
    through_reshapes,
)


class ConvForward(FusionPattern):
    """The convolution nn.conv2d records, groups = 1:
        permute(reshape(matmul(reshape(permute(W)), permute(reshape(w)))), (0, 3, 1, 2))
    where W = unfold(pad(x)) is (N, C, OH, OW, KH, KW) and w is (O, C, KH, KW); and groups > 1:
        reshape(permute(reshape(matmul(rows, permute(reshape(w))), (1, 0, 4, 2, 3)))
    with rows the windows regrouped (G, N*OH*OW, C/G*KH*KW)."""

    name = "conv2d-forward"

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, tape.PermuteOp) and op.params["perm"] == (0, 3, 1, 2):
            match = self._grouped_1(op)
        elif isinstance(op, tape.ReshapeOp):
            match = self._grouped_g(op)
        else:
            return
        if match is None:
            return
        windows, weight, groups = match
        p = windows.params
        if p["kernel"] != weight.type.get_shape()[2:]:
            return
        self.replace_if_typed(rewriter, op, tape.Conv2dOp.build(
            windows.x, weight, stride=p["stride"], padding=windows.padding,
            dilation=p["dilation"], groups=groups))

    def _grouped_1(self, op: tape.PermuteOp) -> tuple[Windows, SSAValue, int] | None:
        y = producer(op.input, tape.ReshapeOp)  # N, OH, OW, O
        mm = y and producer(y.input, tape.MatmulOp)
        rows = mm and producer(mm.lhs, tape.ReshapeOp)  # N*OH*OW, C*KH*KW
        moved = rows and producer(rows.input, tape.PermuteOp)  # N, OH, OW, C, KH, KW
        wt = mm and producer(mm.rhs, tape.PermuteOp)  # C*KH*KW, O
        if not (moved and wt and moved.params["perm"] == (0, 2, 3, 1, 4, 5)
                and wt.params["perm"] == (1, 0)):
            return None
        windows = match_windows(moved.input, 0.0)
        weight = through_reshapes(wt.input)
        if windows is None or len(weight.type.get_shape()) != 4:
            return None
        if not single_use(y.results[0], mm.results[0], rows.results[0], moved.results[0],
                          *(o.results[0] for o in windows.ops())):
            return None
        return windows, weight, 1

    def _grouped_g(self, op: tape.ReshapeOp) -> tuple[Windows, SSAValue, int] | None:
        moved_out = producer(op.input, tape.PermuteOp)  # N, G, O/G, OH, OW
        y = moved_out and producer(moved_out.input, tape.ReshapeOp)  # G, N, OH, OW, O/G
        mm = y and producer(y.input, tape.MatmulOp)
        rows = mm and producer(mm.lhs, tape.ReshapeOp)  # G, N*OH*OW, C/G*KH*KW
        moved = rows and producer(rows.input, tape.PermuteOp)  # G, N, OH, OW, C/G, KH, KW
        split = moved and producer(moved.input, tape.ReshapeOp)  # N, G, C/G, OH, OW, KH, KW
        wt = mm and producer(mm.rhs, tape.PermuteOp)  # G, C/G*KH*KW, O/G
        if not (split and wt and moved_out.params["perm"] == (1, 0, 4, 2, 3)
                and moved.params["perm"] == (1, 0, 3, 4, 2, 5, 6)
                and wt.params["perm"] == (0, 2, 1)):
            return None
        windows = match_windows(split.input, 0.0)
        weight = through_reshapes(wt.input)
        if windows is None or len(weight.type.get_shape()) != 4:
            return None
        groups = split.result.type.get_shape()[1]
        n, c, oh, ow, kh, kw = windows.unfold.result.type.get_shape()
        if split.result.type.get_shape() != (n, groups, c // groups, oh, ow, kh, kw):
            return None
        o = weight.type.get_shape()[0]
        if wt.input.type.get_shape() != (groups, o // groups, c // groups * kh * kw):
            return None
        if not single_use(moved_out.results[0], y.results[0], mm.results[0], rows.results[0],
                          moved.results[0], split.results[0],
                          *(o.results[0] for o in windows.ops())):
            return None
        return windows, weight, groups


class MaxPoolForward(FusionPattern):
    """max(unfold(pad(x, -inf)), axes = [4, 5]) over 2-D windows without dilation."""

    name = "maxpool2d-forward"

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, tape.MaxOp):
            return
        windows = pool_windows(op, -np.inf)
        if windows is None or not single_use(*(o.results[0] for o in windows.ops())):
            return
        p = windows.params
        self.replace_if_typed(rewriter, op, tape.MaxPool2dOp.build(
            windows.x, kernel=p["kernel"], stride=p["stride"], padding=windows.padding))


class AvgPoolForward(FusionPattern):
    """sum(unfold(pad(x, 0)), axes = [4, 5]) / (kh * kw) over 2-D windows without dilation."""

    name = "avgpool2d-forward"

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, tape.DivOp):
            return
        total = producer(op.lhs, tape.SumOp)
        divisor = constant_value(op.rhs)
        windows = total and pool_windows(total, 0.0)
        if windows is None or divisor is None:
            return
        kh, kw = windows.params["kernel"]
        if not np.all(divisor == kh * kw):
            return
        if not single_use(total.results[0], *(o.results[0] for o in windows.ops())):
            return
        p = windows.params
        self.replace_if_typed(rewriter, op, tape.AvgPool2dOp.build(
            windows.x, kernel=p["kernel"], stride=p["stride"], padding=windows.padding))
