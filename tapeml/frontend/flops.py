"""The floating-point operations of each tape op, found by its class: `FLOPS[type(op)](op)`.
A multiply-add counts two; elementwise ops count one per result element; reductions one per
input element; layout ops none. A test fails for any op without a row."""

from __future__ import annotations

import math
from collections.abc import Callable

from tapeml.dialects import tape
from tapeml.dialects.base import TapeOp
from tapeml.dialects.registry import OpTable

Flops = Callable[[TapeOp], int]
FLOPS: OpTable[Flops] = OpTable("FLOPs")
flops = FLOPS.register


def _numel(value) -> int:
    return math.prod(value.type.get_shape())


def op_flops(op: TapeOp) -> int:
    return FLOPS[type(op)](op)


@flops(*tape.ELEMENTWISE_BINARY, *tape.ELEMENTWISE_UNARY, *tape.INTEGER_BINARY,
       *tape.INTEGER_UNARY, *tape.NUMERIC_UNARY, *tape.NUMERIC_BINARY, tape.CmpOp, tape.SelectOp)
def _per_result_element(op: TapeOp) -> int:
    return _numel(op.results[0])


@flops(tape.ConstantOp, tape.CastOp, tape.BroadcastOp, tape.ReshapeOp, tape.PermuteOp,
       tape.PadOp, tape.SliceOp, tape.UnfoldOp, tape.ConcatOp, tape.IotaOp,
       tape.StopGradientOp)
def _layout(op: TapeOp) -> int:
    return 0


# Not counted yet: summary() reads traced programs, which hold none of these (tape-fuse makes
# them); counting them is a change of the figures, for its own commit.
@flops(tape.FusedOp, tape.Conv2dBackwardInputOp, tape.Conv2dBackwardWeightOp,
       tape.MaxPool2dBackwardOp, tape.AvgPool2dBackwardOp)
def _not_counted(op: TapeOp) -> int:
    return 0


@flops(tape.SumOp, tape.MaxOp, tape.FoldOp, tape.ArgMaxOp, tape.ArgMinOp, tape.CumsumOp)
def _per_input_element(op: TapeOp) -> int:
    return _numel(op.operands[0])


@flops(tape.LayerNormOp, tape.LayerNormBackwardOp)
def _layer_norm(op: TapeOp) -> int:
    """As the ops written out count: per element, 5 (two sums, a subtraction, a square, a
    product) and 7 more backward (two sums, a product, two subtractions and two products); per
    row, 5 and 7 (the divisions, eps, sqrt)."""
    n = _numel(op.operands[0])
    rows = n // max(op.operands[0].type.get_shape()[-1], 1)
    return 5 * (n + rows) if isinstance(op, tape.LayerNormOp) else 12 * n + 12 * rows


@flops(tape.SoftmaxOp, tape.SoftmaxBackwardOp)
def _softmax(op: TapeOp) -> int:
    """As the ops written out count: per element, 5 (max, subtraction, exp, sum, division), 4
    backward (two products, a sum, a subtraction)."""
    return (5 if isinstance(op, tape.SoftmaxOp) else 4) * _numel(op.operands[0])


@flops(tape.TakeOp)
def _take(op: tape.TakeOp) -> int:
    return 0


@flops(tape.ScatterOp)
def _scatter(op: tape.ScatterOp) -> int:
    """One per update combined (add, max, min); a set computes nothing."""
    return 0 if op.params["kind"] == "set" else _numel(op.updates)


@flops(tape.MatmulOp)
def _matmul(op: tape.MatmulOp) -> int:
    return 2 * _numel(op.result) * op.lhs.type.get_shape()[-1]


@flops(tape.Conv2dOp)
def _conv2d(op: tape.Conv2dOp) -> int:
    _, cg, kh, kw = op.weight.type.get_shape()
    return 2 * _numel(op.result) * cg * kh * kw


@flops(tape.MaxPool2dOp, tape.AvgPool2dOp)
def _pool(op: TapeOp) -> int:
    kh, kw = op.params["kernel"]
    return _numel(op.results[0]) * kh * kw
