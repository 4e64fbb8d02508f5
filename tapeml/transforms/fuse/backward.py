"""tape-fuse's backward idioms: what tape-differentiate's pullbacks make of the forward idioms
(forward.py) after layout canonicalization, raised to conv2d_backward_input,
conv2d_backward_weight, maxpool2d_backward and avgpool2d_backward. Each ends in fold (the
unfold's pullback) and the pad's pullback, a pad by minus the padding, which crops it away
(`Folded`, `match_folded`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.ir import Operation, SSAValue
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


@dataclass
class Folded:
    """fold(v) onto the padded input, and the negative pad that crops the padding off again."""

    value: SSAValue  # what is folded: (N, C, OH, OW, KH, KW)
    fold: tape.FoldOp
    crop: tape.PadOp | None
    padding: tuple[int, int, int, int]

    @property
    def params(self) -> dict[str, Any]:
        return self.fold.params

    def spatial(self) -> tuple[int, int]:
        t, left, b, r = self.padding
        h, w = self.fold.params["spatial"]
        return (h - t - b, w - left - r)


def match_folded(root: Operation) -> Folded | None:
    """`root` = pad(fold(v), -padding) (or fold(v)) over 2-D windows of a rank-4 result."""
    crop = root if isinstance(root, tape.PadOp) else None
    fold = producer(root.input, tape.FoldOp) if crop else root
    if not isinstance(fold, tape.FoldOp) or len(fold.params["kernel"]) != 2:
        return None
    if len(fold.result.type.get_shape()) != 4:
        return None
    if crop is None:
        users = [use.operation for use in fold.result.uses]
        if len(users) == 1 and isinstance(users[0], tape.PadOp):
            return None  # the crop that follows is part of the idiom: match from there
        return Folded(fold.input, fold, None, (0, 0, 0, 0))
    low, high = crop.params["low"], crop.params["high"]
    if low[:2] != (0, 0) or high[:2] != (0, 0) or max(*low, *high) > 0 or \
            not single_use(fold.results[0]):
        return None
    return Folded(fold.input, fold, crop, (-low[2], -low[3], -high[2], -high[3]))


def _rows(value: SSAValue, perm: tuple[int, ...]) -> SSAValue | None:
    """v = reshape(permute(s, perm)) (a matmul's operand as rows): s, else None."""
    rows = producer(value, tape.ReshapeOp)
    moved = rows and producer(rows.input, tape.PermuteOp)
    if moved is None or moved.params["perm"] != perm:
        return None
    return moved.input


def _cotangent_rows(value: SSAValue) -> SSAValue | None:
    """v = reshape(permute(ct, (0, 2, 3, 1)), (N*OH*OW, O)): the ct it reshapes."""
    return _rows(value, (0, 2, 3, 1))


def _window_rows(value: SSAValue) -> Windows | None:
    """v = reshape(permute(unfold(pad(x)), (0, 2, 3, 1, 4, 5)), (N*OH*OW, C*KH*KW))."""
    windows = _rows(value, (0, 2, 3, 1, 4, 5))
    return None if windows is None else match_windows(windows, 0.0)


class ConvBackwardInput(FusionPattern):
    """The input gradient of a groups = 1 convolution idiom:
        pad(fold(permute(reshape(matmul(rows(ct), reshape(w))), (0, 3, 1, 2, 4, 5))), -padding)
    => conv2d_backward_input(ct, w)."""

    name = "conv2d-backward-input"

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tape.PadOp | tape.FoldOp, rewriter: PatternRewriter
                          ) -> None:
        if not of_floats(op):  # (the op an idiom raises to takes floats)
            return
        if (folded := match_folded(op)) is None:
            return
        moved = producer(folded.value, tape.PermuteOp)
        split = moved and producer(moved.input, tape.ReshapeOp)
        mm = split and producer(split.input, tape.MatmulOp)
        if mm is None or moved.params["perm"] != (0, 3, 1, 2, 4, 5):
            return
        ct = _cotangent_rows(mm.lhs)
        weight = through_reshapes(mm.rhs)
        if ct is None or len(weight.type.get_shape()) != 4 or mm.rhs is weight:
            return
        if not single_use(moved.results[0], split.results[0], mm.results[0]):
            return
        p = folded.params
        if p["kernel"] != weight.type.get_shape()[2:]:
            return
        grad = tape.Conv2dBackwardInputOp.build(
            ct, weight, stride=p["stride"], padding=folded.padding, dilation=p["dilation"],
            groups=1, spatial=folded.spatial())
        self.replace_if_typed(rewriter, op, grad)


class ConvBackwardWeight(FusionPattern):
    """The weight gradient of a groups = 1 convolution idiom:
        reshape(permute(matmul(permute(rows(unfold(pad(x))), (1, 0)), rows(ct)), (1, 0)))
    => conv2d_backward_weight(x, ct)."""

    name = "conv2d-backward-weight"

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tape.ReshapeOp, rewriter: PatternRewriter) -> None:
        if not of_floats(op):  # (the op an idiom raises to takes floats)
            return
        if len(op.result.type.get_shape()) != 4:
            return
        back = producer(op.input, tape.PermuteOp)
        mm = back and producer(back.input, tape.MatmulOp)
        flipped = mm and producer(mm.lhs, tape.PermuteOp)
        if flipped is None or back.params["perm"] != (1, 0) or flipped.params["perm"] != (1, 0):
            return
        windows = _window_rows(flipped.input)
        ct = _cotangent_rows(mm.rhs)
        if windows is None or ct is None:
            return
        if not single_use(back.results[0], mm.results[0], flipped.results[0]):
            return
        p = windows.params
        grad = tape.Conv2dBackwardWeightOp.build(
            windows.x, ct, stride=p["stride"], padding=windows.padding, dilation=p["dilation"],
            groups=1, kernel=p["kernel"])
        self.replace_if_typed(rewriter, op, grad)


def skip_broadcast(value: SSAValue) -> SSAValue:
    """`value` without the broadcast that makes it (canonicalization drops identity ones)."""
    spread = producer(value, tape.BroadcastOp)
    return spread.input if spread else value


def _unreduced(value: SSAValue) -> tuple[SSAValue, tuple[int, ...] | None] | None:
    """v = broadcast(reshape(r, (..., 1, 1))): the r a window reduction's pullback spreads,
    and the shape r must be reshaped to first (None if it has it) when canonicalization merged
    that reshape into an earlier one (r then comes from a flatter value, as when the pooled
    result was flattened for a linear). Nothing is built: a pattern may still decline."""
    kept = producer(skip_broadcast(value), tape.ReshapeOp)
    if kept is None or kept.result.type.get_shape()[-2:] != (1, 1):
        return None
    shape = kept.result.type.get_shape()[:-2]
    return kept.input, (None if kept.input.type.get_shape() == shape else shape)


def _reshaped(source: SSAValue, shape: tuple[int, ...] | None) -> tuple[SSAValue, list]:
    """`source` in `shape` (an _unreduced result), and the reshape op that makes it, if any."""
    if shape is None:
        return source, []
    reshape = tape.ReshapeOp.build(source, shape=shape)
    return reshape.result, [reshape]


def _splat(value: SSAValue, expected: float) -> bool:
    constant = constant_value(value)
    return constant is not None and bool(np.all(constant == expected))


def _mask_of(value: SSAValue) -> tuple[Any, Any] | None:
    """(mask op, cmp op) for a 0/1 mask of a comparison: cast(cmp) or select(cmp, 1, 0)."""
    if (cast := producer(value, tape.CastOp)) is not None:
        return cast, producer(cast.input, tape.CmpOp)
    select = producer(value, tape.SelectOp)
    if select is None or not (_splat(select.on_true, 1.0) and _splat(select.on_false, 0.0)):
        return None
    return select, producer(select.cond, tape.CmpOp)


class MaxPoolBackward(FusionPattern):
    """The gradient of the maxpool idiom (ties split evenly):
        pad(fold(mul(mask, div(spread(ct), spread(sum(mask))))), -padding),
        mask = cast(cmp eq(windows, spread(max(windows)))) (or select(cmp eq, 1, 0))
    => maxpool2d_backward(x, ct)."""

    name = "maxpool2d-backward"

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tape.PadOp | tape.FoldOp, rewriter: PatternRewriter
                          ) -> None:
        if not of_floats(op):  # (the op an idiom raises to takes floats)
            return
        if (folded := match_folded(op)) is None:
            return
        mul = producer(folded.value, tape.MulOp)
        mask, eq = (mul and _mask_of(mul.lhs)) or (None, None)
        div = mul and producer(mul.rhs, tape.DivOp)
        if not (div and eq and eq.params["predicate"] == "eq"):
            return
        top, ct = _unreduced(eq.rhs), _unreduced(div.lhs)
        pooled = producer(top[0], tape.MaxOp) if top and top[1] is None else None
        windows = pooled and pool_windows(pooled, -np.inf)
        count = producer(skip_broadcast(div.rhs), tape.SumOp)
        if not (windows and ct and count and eq.lhs is pooled.input and count.input is mask.result
                and count.params["axes"] == (4, 5) and count.params["keepdims"]):
            return
        if not single_use(mul.results[0], div.results[0]) or \
                folded.params["kernel"] != windows.params["kernel"] or \
                folded.params["stride"] != windows.params["stride"] or \
                folded.padding != windows.padding:
            return
        p = windows.params
        cotangent, before = _reshaped(*ct)
        grad = tape.MaxPool2dBackwardOp.build(windows.x, cotangent, kernel=p["kernel"],
                                              stride=p["stride"], padding=windows.padding)
        self.replace_if_typed(rewriter, op, grad, before)


class AvgPoolBackward(FusionPattern):
    """The gradient of the avgpool idiom: pad(fold(spread(div(ct, kh * kw))), -padding)
    => avgpool2d_backward(ct)."""

    name = "avgpool2d-backward"

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tape.PadOp | tape.FoldOp, rewriter: PatternRewriter
                          ) -> None:
        if not of_floats(op):  # (the op an idiom raises to takes floats)
            return
        if (folded := match_folded(op)) is None:
            return
        share = _unreduced(folded.value)
        div = producer(share[0], tape.DivOp) if share and share[1] is None else None
        p = folded.params
        if div is None or p["dilation"] != (1, 1) or not _splat(div.rhs, p["kernel"][0] *
                                                                p["kernel"][1]):
            return
        if len(div.lhs.type.get_shape()) != 4 or not single_use(div.results[0]):
            return
        grad = tape.AvgPool2dBackwardOp.build(div.lhs, kernel=p["kernel"], stride=p["stride"],
                                              padding=folded.padding, spatial=folded.spatial())
        self.replace_if_typed(rewriter, op, grad)
