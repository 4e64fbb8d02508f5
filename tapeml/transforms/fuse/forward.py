"""tape-fuse's forward idioms (the package doc lists them): conv2d (groups = 1 and grouped),
maxpool2d and avgpool2d, raised from what nn.conv2d, nn.max_pool2d and nn.avg_pool2d record,
an unfold (im2col) of a pad with layout ops and a matmul or a reduction over the windows.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import SSAValue
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern

from tapeml.dialects import tape
from tapeml.transforms.fuse.matching import (
    FusionPattern,
    Windows,
    constant_value,
    match_windows,
    of_floats,
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

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tape.PermuteOp | tape.ReshapeOp,
                          rewriter: PatternRewriter) -> None:
        if not of_floats(op):  # (the op an idiom raises to takes floats)
            return
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
        before = []
        if isinstance(weight, np.ndarray):  # a known weight, its layout ops folded: OIHW again
            before = [tape.ConstantOp.build(value=weight)]
            weight = before[0].result
        if p["kernel"] != weight.type.get_shape()[2:]:
            return
        self.replace_if_typed(rewriter, op, tape.Conv2dOp.build(
            windows.x, weight, stride=p["stride"], padding=windows.padding,
            dilation=p["dilation"], groups=groups), before)

    def _grouped_1(self, op: tape.PermuteOp
                   ) -> tuple[Windows, SSAValue | np.ndarray, int] | None:
        """(A weight the traced function held as an array reaches the matmul as one constant
        of (C*KH*KW, O), its reshape and permute done while tracing: the OIHW array.)"""
        y = producer(op.input, tape.ReshapeOp)  # N, OH, OW, O
        mm = y and producer(y.input, tape.MatmulOp)
        rows = mm and producer(mm.lhs, tape.ReshapeOp)  # N*OH*OW, C*KH*KW
        moved = rows and producer(rows.input, tape.PermuteOp)  # N, OH, OW, C, KH, KW
        wt = mm and producer(mm.rhs, tape.PermuteOp)  # C*KH*KW, O
        known = mm and producer(mm.rhs, tape.ConstantOp)
        if not (moved and (wt or known) and moved.params["perm"] == (0, 2, 3, 1, 4, 5)
                and (known or wt.params["perm"] == (1, 0))):
            return None
        windows = match_windows(moved.input, 0.0)
        if windows is None:
            return None
        if known:
            _, c, _, _, kh, kw = windows.unfold.result.type.get_shape()
            value = known.params["value"]
            if value.ndim != 2 or value.shape[0] != c * kh * kw:
                return None
            weight = np.ascontiguousarray(value.T).reshape(value.shape[1], c, kh, kw)
        else:
            weight = through_reshapes(wt.input)
        if len(weight.shape if known else weight.type.get_shape()) != 4:
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

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tape.MaxOp, rewriter: PatternRewriter) -> None:
        if not of_floats(op):  # (the op an idiom raises to takes floats)
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

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tape.DivOp, rewriter: PatternRewriter) -> None:
        if not of_floats(op):  # (the op an idiom raises to takes floats)
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


class ConvScale(FusionPattern):
    """conv2d(x, W) * s, or (conv2d(x, W) + c) * s, with W a constant and s (and c) constant
    per output channel => conv2d(x, W * s) (+ c * s): an inference batch norm folded into the
    convolution before it, as inference compilers do (one rounding moves: W * s is rounded
    once, where the product was rounded after the sum)."""

    name = "conv2d-scale"

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tape.MulOp, rewriter: PatternRewriter) -> None:
        if not of_floats(op):  # (the op an idiom raises to takes floats)
            return
        for value, other in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
            scale = _per_channel(other, value)
            if scale is None or not value.has_one_use():
                continue
            add = producer(value, tape.AddOp)
            shift = None
            if add is not None:
                for a, b in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
                    shift = _per_channel(b, a)
                    if shift is not None and producer(a, tape.Conv2dOp) and a.has_one_use():
                        value = a
                        break
                else:
                    continue
            conv = producer(value, tape.Conv2dOp)
            weight = conv and producer(conv.weight, tape.ConstantOp)
            if weight is None:
                continue
            w = weight.params["value"]
            folded = tape.ConstantOp.build(value=(w * scale.reshape(-1, 1, 1, 1)).astype(w.dtype))
            new = tape.Conv2dOp.build(conv.input, folded.result, **conv.params)
            if shift is None:
                self.replace_if_typed(rewriter, op, new, [folded])
                return
            shape = op.result.type.get_shape()
            moved = tape.ConstantOp.build(value=(shift * scale).astype(w.dtype).reshape(
                1, -1, 1, 1))
            spread = tape.BroadcastOp.build(moved.result, shape=shape)
            total = tape.AddOp.build(new.result, spread.result)
            self.replace_if_typed(rewriter, op, total, [folded, new, moved, spread])
            return


def _per_channel(value: SSAValue, conv_result: SSAValue) -> np.ndarray | None:
    """The constant `value` as one number per channel (axis 1) of the rank-4 `conv_result`
    it meets (a scalar spread over them all), or None if it varies along another axis."""
    array = constant_value(value)
    shape = conv_result.type.get_shape()
    if array is None or len(shape) != 4 or array.dtype.kind != "f" or array.ndim > 4:
        return None
    full = array.reshape((1,) * (4 - array.ndim) + array.shape)
    if full.shape[0] != 1 or full.shape[2:] != (1, 1) or full.shape[1] not in (1, shape[1]):
        return None
    return np.broadcast_to(full[0, :, 0, 0], (shape[1],))
