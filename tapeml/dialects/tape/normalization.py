"""Normalizations over the last axis and their vector-Jacobian products: `tape.layer_norm`,
`tape.layer_norm_backward`, `tape.softmax`, `tape.softmax_backward`. Written as a dozen
elementwise ops and reductions, a layer norm and its pullbacks were 41 ops of a transformer's
tape (a third of the GPT step's) and eight loop nests; as these two, one nest each way.
A softmax written out was eight ops and four nests forward, as many backward."""

from __future__ import annotations

import math
from typing import ClassVar

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute
from xdsl.irdl import irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import Pure

from tapeml.dialects.base import Float, TapeOp
from tapeml.dialects.tape.types import check, float_tensor, same_type

__all__ = [
    "LayerNormBackwardOp",
    "LayerNormOp",
    "SoftmaxBackwardOp",
    "SoftmaxOp",
]


def _normalized(op: str, t: Attribute, eps: float, role: str = "operand") -> TensorType:
    t = float_tensor(op, t, role)
    check(t.get_num_dims() >= 1, op, lambda: f"normalizes over the last axis; {t} has none")
    check(math.isfinite(eps) and eps >= 0, op, lambda: f"eps must be finite and >= 0, got {eps}")
    return t


@irdl_op_definition
class LayerNormOp(TapeOp):
    """`(x - mean) * (1 / sqrt(var + eps))` along the last axis, where mean = sum(x) / n and
    var = sum((x - mean)^2) / n, every step rounded to x's type as the ops written out would
    be (torch's LayerNorm without its scale and bias, which nn.layer_norm applies after)."""

    name = "tape.layer_norm"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    eps = Float.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (Float("eps"),)

    @classmethod
    def infer(cls, input: Attribute, *, eps: float) -> Attribute:
        return _normalized(cls.name, input, eps)


@irdl_op_definition
class LayerNormBackwardOp(TapeOp):
    """The cotangent of layer_norm's input from its result's (`grad`, g), along the last axis:
    `r * (g - mean(g) - y * mean(g * y))`, with r = 1 / sqrt(var + eps) and y computed from x
    again as layer_norm computes them (nothing kept from the forward but x)."""

    name = "tape.layer_norm_backward"
    input = operand_def(TensorType)
    grad = operand_def(TensorType)
    result = result_def(TensorType)
    eps = Float.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (Float("eps"),)

    @classmethod
    def infer(cls, input: Attribute, grad: Attribute, *, eps: float) -> Attribute:
        x = _normalized(cls.name, input, eps)
        g = float_tensor(cls.name, grad, "cotangent")
        same_type(cls.name, [x, g], "the input and its cotangent must have the same type")
        return x


def _rows(op: str, t: Attribute, role: str = "operand") -> TensorType:
    t = float_tensor(op, t, role)
    check(t.get_num_dims() >= 1 and t.get_shape()[-1] > 0, op,
          lambda: f"normalizes over a last axis of at least one element; got {t}")
    return t


@irdl_op_definition
class SoftmaxOp(TapeOp):
    """`exp(x - max) / sum(exp(x - max))` along the last axis, the max IEEE's (NaN if any is),
    the sum rounded to x's type, as the ops written out compute it (ops.softmax)."""

    name = "tape.softmax"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, input: Attribute) -> Attribute:
        return _rows(cls.name, input)


@irdl_op_definition
class SoftmaxBackwardOp(TapeOp):
    """The cotangent of softmax's input from its result p and the result's cotangent g, along
    the last axis: `p * (g - sum(g * p))` (nothing kept from the forward but p)."""

    name = "tape.softmax_backward"
    probabilities = operand_def(TensorType)
    grad = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, probabilities: Attribute, grad: Attribute) -> Attribute:
        p = _rows(cls.name, probabilities, "probabilities")
        g = float_tensor(cls.name, grad, "cotangent")
        same_type(cls.name, [p, g], "the probabilities and their cotangent must have the same "
                  "type")
        return p
