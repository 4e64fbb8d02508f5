"""`tape-fuse`: the fusion catalog. Idioms of the tape ops are raised to the fused ops that do the
same work at once; nothing else changes meaning.

Each idiom is a small `RewritePattern` that matches one exact spelling, checks every parameter,
and declines when the idiom is not exactly what it claims, for instance when an intermediate
value is used elsewhere, so that the fused op would not replace its work but repeat it. Layout
ops on the weight side and on cotangents are cheap views and may be shared.

    conv2d-forward     pad -> unfold -> permute/reshape -> matmul -> reshape/permute  => conv2d
    maxpool2d-forward  pad(-inf) -> unfold -> max over the window axes               => maxpool2d
    avgpool2d-forward  pad(0) -> unfold -> sum over the window axes / (kh * kw)       => avgpool2d

The backward idioms are matched in a first phase, the forward ones in a second: the weight
gradient of a convolution reads the forward's im2col rows, which become single-use only once it
is raised.

`tape-fuse{report=true}` prints what fired, per pattern, on stderr.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from tapeml.dialects import tape
from tapeml.dialects.tape.canonicalize import LAYOUT_PATTERNS

# ----------------------------------------------------------------------------------------------
# Matching helpers


def producer(value: SSAValue, op_type: type[Operation]) -> Any:
    """The op of type `op_type` that defines `value`, or None."""
    owner = value.owner
    return owner if isinstance(owner, op_type) else None


def single_use(*values: SSAValue) -> bool:
    return all(v.has_one_use() for v in values)


def through_reshapes(value: SSAValue) -> SSAValue:
    """`value` with any chain of reshapes feeding it skipped."""
    while (op := producer(value, tape.ReshapeOp)) is not None:
        value = op.input
    return value


@dataclass
class Windows:
    """An unfold over the two spatial dims of an NCHW tensor, with the pad feeding it."""

    x: SSAValue  # the unpadded input
    unfold: tape.UnfoldOp
    pad: tape.PadOp | None
    padding: tuple[int, int, int, int]  # top, left, bottom, right

    @property
    def params(self) -> dict[str, Any]:
        return self.unfold.params

    def ops(self) -> list[Operation]:
        return [self.unfold, *([self.pad] if self.pad else [])]


def match_windows(value: SSAValue, pad_value: float) -> Windows | None:
    """`value` = unfold(pad(x, pad_value) or x) over (H, W) of a rank-4 x, padding H and W only."""
    unfold = producer(value, tape.UnfoldOp)
    if unfold is None or len(unfold.params["kernel"]) != 2:
        return None
    source = unfold.input
    if len(source.type.get_shape()) != 4:
        return None
    pad = producer(source, tape.PadOp)
    if pad is None:
        return Windows(source, unfold, None, (0, 0, 0, 0))
    low, high, value_ = pad.params["low"], pad.params["high"], pad.params["value"]
    same_value = value_ == pad_value or (np.isnan(value_) and np.isnan(pad_value))
    if low[:2] != (0, 0) or high[:2] != (0, 0) or min(*low, *high) < 0 or not same_value:
        return None
    return Windows(pad.input, unfold, pad, (low[2], low[3], high[2], high[3]))


# ----------------------------------------------------------------------------------------------
# The patterns


class FusionPattern(RewritePattern):
    """A catalog entry: `name`, and `fired` counts (shared with the pass for its report)."""

    name: str = ""

    def __init__(self, fired: Counter[str]) -> None:
        self.fired = fired

    def replace(self, rewriter: PatternRewriter, root: Operation, new: Operation,
                before: Sequence[Operation] = ()) -> None:
        """Replace `root` by `new` (with the ops `new` needs first, if any)."""
        for op in (*before, new):
            op.location = root.location
        rewriter.replace(root, [*before, new], new.results)
        self.fired[self.name] += 1

    def replace_if_typed(self, rewriter: PatternRewriter, root: Operation, new: Operation,
                         before: Sequence[Operation] = ()) -> None:
        """`replace`, if `new` gives `root`'s result type; otherwise decline, erasing the
        unattached ops built for it (their operand uses), so the IR is as it was found."""
        if new.results[0].type == root.results[0].type:
            self.replace(rewriter, root, new, before)
            return
        for built in (new, *reversed(before)):
            built.erase()


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
        windows = _pool_windows(op, -np.inf)
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
        divisor = producer(op.rhs, tape.ConstantOp)
        windows = total and _pool_windows(total, 0.0)
        if windows is None or divisor is None:
            return
        kh, kw = windows.params["kernel"]
        if not np.all(divisor.params["value"] == kh * kw):
            return
        if not single_use(total.results[0], *(o.results[0] for o in windows.ops())):
            return
        p = windows.params
        self.replace_if_typed(rewriter, op, tape.AvgPool2dOp.build(
            windows.x, kernel=p["kernel"], stride=p["stride"], padding=windows.padding))


def _pool_windows(reduction: tape.SumOp | tape.MaxOp, pad_value: float) -> Windows | None:
    p = reduction.params
    if p["axes"] != (4, 5) or p["keepdims"]:
        return None
    windows = match_windows(reduction.input, pad_value)
    if windows is None or windows.params["dilation"] != (1, 1):
        return None
    return windows


# ----------------------------------------------------------------------------------------------
# Backward idioms: what tape-differentiate's pullbacks make of the forward idioms above (after
# layout canonicalization). Each ends in fold (the unfold's pullback) and the pad's pullback, a
# pad by minus the padding, which crops it away.


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


def _cotangent_rows(value: SSAValue) -> SSAValue | None:
    """v = reshape(permute(ct, (0, 2, 3, 1)), (N*OH*OW, O)): the ct it reshapes."""
    rows = producer(value, tape.ReshapeOp)
    moved = rows and producer(rows.input, tape.PermuteOp)
    if moved is None or moved.params["perm"] != (0, 2, 3, 1):
        return None
    return moved.input


def _window_rows(value: SSAValue) -> Windows | None:
    """v = reshape(permute(unfold(pad(x)), (0, 2, 3, 1, 4, 5)), (N*OH*OW, C*KH*KW))."""
    rows = producer(value, tape.ReshapeOp)
    moved = rows and producer(rows.input, tape.PermuteOp)
    if moved is None or moved.params["perm"] != (0, 2, 3, 1, 4, 5):
        return None
    return match_windows(moved.input, 0.0)


class ConvBackwardInput(FusionPattern):
    """The input gradient of a groups = 1 convolution idiom:
        pad(fold(permute(reshape(matmul(rows(ct), reshape(w))), (0, 3, 1, 2, 4, 5))), -padding)
    => conv2d_backward_input(ct, w)."""

    name = "conv2d-backward-input"

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, tape.PadOp | tape.FoldOp) or (folded := match_folded(op)) is None:
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

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, tape.ReshapeOp) or len(op.result.type.get_shape()) != 4:
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
    constant = producer(value, tape.ConstantOp)
    return constant is not None and bool(np.all(constant.params["value"] == expected))


class MaxPoolBackward(FusionPattern):
    """The gradient of the maxpool idiom (ties split evenly):
        pad(fold(mul(mask, div(spread(ct), spread(sum(mask))))), -padding),
        mask = select(cmp eq(windows, spread(max(windows))), 1, 0)
    => maxpool2d_backward(x, ct)."""

    name = "maxpool2d-backward"

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, tape.PadOp | tape.FoldOp) or (folded := match_folded(op)) is None:
            return
        mul = producer(folded.value, tape.MulOp)
        mask = mul and producer(mul.lhs, tape.SelectOp)
        div = mul and producer(mul.rhs, tape.DivOp)
        eq = mask and producer(mask.cond, tape.CmpOp)
        if not (div and eq and eq.params["predicate"] == "eq"
                and _splat(mask.on_true, 1.0) and _splat(mask.on_false, 0.0)):
            return
        top, ct = _unreduced(eq.rhs), _unreduced(div.lhs)
        pooled = producer(top[0], tape.MaxOp) if top and top[1] is None else None
        windows = pooled and _pool_windows(pooled, -np.inf)
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

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, tape.PadOp | tape.FoldOp) or (folded := match_folded(op)) is None:
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


# ----------------------------------------------------------------------------------------------
# Elementwise groups: every elementwise op becomes a tape.fused of one op; a fused op then
# swallows the fused ops whose only user it is, the broadcasts feeding it (it broadcasts its
# inputs itself) and its splat constants. Reductions, layout ops and contractions end a group.


def _element(t: Any) -> TensorType:
    return TensorType(t.get_element_type(), [])


def _fused_body(inputs: Sequence[SSAValue]) -> tuple[Block, list[SSAValue]]:
    block = Block(arg_types=[_element(v.type) for v in inputs])
    return block, list(block.args)


def _clone_body(source: Block, args: Sequence[SSAValue], into: Block) -> SSAValue:
    """Copy `source`'s ops into `into`, its arguments read as `args`; the value it yields."""
    mapping: dict[SSAValue, SSAValue] = dict(zip(source.args, args, strict=True))
    for op in source.ops:
        if isinstance(op, tape.YieldOp):
            return mapping[op.value]
        clone = op.clone(value_mapper=mapping)
        into.add_op(clone)
        mapping.update(zip(op.results, clone.results, strict=True))
    raise AssertionError("a tape.fused body ends in tape.yield")


class WrapElementwise(FusionPattern):
    """An elementwise op outside a group becomes a group of one (unwrapped again at the end if
    nothing joined it)."""

    name = "elementwise-group"

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, tape.ELEMENTWISE) or isinstance(op, tape.ConstantOp) or \
                isinstance(op.parent_op(), tape.FusedOp):
            return
        body, args = _fused_body(op.operands)
        inner = type(op).build(*args, **op.params)
        body.add_ops([inner, tape.YieldOp(inner.results[0])])
        fused = tape.FusedOp.build(*op.operands, body=body)
        fused.location = op.location
        rewriter.replace(op, fused)


class GrowGroup(FusionPattern):
    """A group takes in what feeds it: groups used by it alone, broadcasts, splat constants;
    and reads a value repeated among its inputs once."""

    name = "elementwise-merge"

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, tape.FusedOp):
            return
        inputs = list(op.inputs)
        shape = op.result.type.get_shape()

        def keeps_shape(replace: SSAValue, by: Sequence[SSAValue]) -> bool:
            """The group still spans its result shape with `replace`'s place taken by `by`."""
            rest = [v.type.get_shape() for v in inputs if v is not replace]
            rest += [v.type.get_shape() for v in by]
            return bool(rest) and np.broadcast_shapes(*rest) == shape

        for value in dict.fromkeys(inputs):
            source = value.owner
            only_here = all(use.operation is op for use in value.uses)
            if isinstance(source, tape.FusedOp) and only_here and \
                    keeps_shape(value, source.inputs):
                return self._merge(op, value, source, rewriter)
            if isinstance(source, tape.BroadcastOp) and keeps_shape(value, [source.input]):
                return self._rewire(op, {value: source.input}, rewriter)
            if isinstance(source, tape.ConstantOp) and keeps_shape(value, []) and \
                    np.unique(source.params["value"]).size == 1:
                return self._merge(op, value, None, rewriter)
        if len(set(inputs)) < len(inputs):
            return self._rewire(op, {}, rewriter)

    def _rewire(self, op: tape.FusedOp, replace: dict[SSAValue, SSAValue],
                rewriter: PatternRewriter) -> None:
        """The same group over new inputs (each repeated input once)."""
        new_inputs = list(dict.fromkeys(replace.get(v, v) for v in op.inputs))
        body, args = _fused_body(new_inputs)
        by_value = dict(zip(new_inputs, args, strict=True))
        out = _clone_body(op.body.block, [by_value[replace.get(v, v)] for v in op.inputs], body)
        body.add_op(tape.YieldOp(out))
        self.replace(rewriter, op, tape.FusedOp.build(*new_inputs, body=body))

    def _merge(self, op: tape.FusedOp, value: SSAValue, source: tape.FusedOp | None,
               rewriter: PatternRewriter) -> None:
        """`op` computing `value` itself, from `source`'s inputs (or as a constant)."""
        extra = list(source.inputs) if source else []
        new_inputs = list(dict.fromkeys([v for v in op.inputs if v is not value] + extra))
        body, args = _fused_body(new_inputs)
        by_value = dict(zip(new_inputs, args, strict=True))
        if source is not None:
            inner = _clone_body(source.body.block, [by_value[v] for v in source.inputs], body)
        else:
            element = value.owner.params["value"].reshape(-1)[:1].reshape(())
            constant = tape.ConstantOp.build(value=element)
            body.add_op(constant)
            inner = constant.result
        by_value[value] = inner
        out = _clone_body(op.body.block, [by_value[v] for v in op.inputs], body)
        body.add_op(tape.YieldOp(out))
        self.replace(rewriter, op, tape.FusedOp.build(*new_inputs, body=body))


class UnwrapSingle(FusionPattern):
    """A group of one op over inputs of its own shape is just that op."""

    name = "elementwise-single"

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, tape.FusedOp):
            return
        body_ops = list(op.body.block.ops)
        if len(body_ops) != 2 or isinstance(body_ops[0], tape.ConstantOp):
            return
        inner = body_ops[0]
        shape = op.result.type.get_shape()
        if any(v.type.get_shape() != shape for v in op.inputs):
            return
        by_arg = dict(zip(op.body.block.args, op.inputs, strict=True))
        plain = type(inner).build(*(by_arg[v] for v in inner.operands), **inner.params)
        plain.location = op.location
        rewriter.replace(op, plain)


FORWARD: tuple[type[FusionPattern], ...] = (ConvForward, MaxPoolForward, AvgPoolForward)
BACKWARD: tuple[type[FusionPattern], ...] = (ConvBackwardInput, ConvBackwardWeight,
                                             MaxPoolBackward, AvgPoolBackward)


# ----------------------------------------------------------------------------------------------
# The pass


@dataclass
class FusionReport:
    """What fired: idioms raised, per pattern in catalog order; elementwise groups formed."""

    fired: Counter[str] = field(default_factory=Counter)
    groups: int = 0
    grouped_ops: int = 0

    def __str__(self) -> str:
        total = sum(self.fired.values())
        lines = [f"tape-fuse: {total} idiom{'s' if total != 1 else ''} raised, {self.groups} "
                 f"elementwise group{'s' if self.groups != 1 else ''} of {self.grouped_ops} ops"]
        lines += [f"  {p.name:<28}{self.fired[p.name]:>4}" for p in (*BACKWARD, *FORWARD)]
        lines.append(f"  {'elementwise-groups':<28}{self.groups:>4}")
        return "\n".join(lines)


def _run(module: ModuleOp, patterns: list[RewritePattern]) -> None:
    PatternRewriteWalker(GreedyRewritePatternApplier(patterns)).rewrite_module(module)


def fuse(module: ModuleOp) -> FusionReport:
    """Apply the catalog to `module` in place; returns what fired."""
    report = FusionReport()
    make: Callable[[type[FusionPattern]], FusionPattern] = lambda p: p(report.fired)  # noqa: E731
    _run(module, [*LAYOUT_PATTERNS, *map(make, BACKWARD)])
    _run(module, [*LAYOUT_PATTERNS, *map(make, FORWARD)])
    _run(module, [make(WrapElementwise)])
    _run(module, [make(GrowGroup)])
    _run(module, [make(UnwrapSingle)])
    _count_groups(module, report)
    return report


def _count_groups(module: ModuleOp, report: FusionReport) -> None:
    """Report the groups that remain (wrapping, merging and unwrapping are steps to them)."""
    for name in (WrapElementwise.name, GrowGroup.name, UnwrapSingle.name):
        report.fired.pop(name, None)
    groups = [op for op in module.walk() if isinstance(op, tape.FusedOp)]
    report.groups = len(groups)
    report.grouped_ops = sum(len(g.body.block.ops) - 1 for g in groups)


@dataclass(frozen=True)
class FusePass(ModulePass):
    """Raise idioms to fused ops (see the module doc)."""

    name = "tape-fuse"

    report: bool = False
    """Print what fired, per pattern, on stderr."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        fired = fuse(op)
        if self.report:
            print(fired, file=sys.stderr)
