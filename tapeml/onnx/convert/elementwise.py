"""Elementwise ONNX ops: arithmetic with ONNX's (numpy's) broadcasting, comparisons, logic,
activations, Cast, Clip, Where, Dropout at inference."""

from __future__ import annotations

import math
from functools import reduce
from typing import Any

import numpy as np

from tapeml.onnx.convert import axis_of, converts, element_type, known, present
from tapeml.onnx.graph import Node
from tapeml.tracing import ops


def _binary(fn: Any) -> Any:
    return lambda node, ins: fn(ins[0], _legacy_aligned(node, ins[0], ins[1]))


def _legacy_aligned(node: Node, a: Any, b: Any) -> Any:
    """B as ONNX's binary ops before opset 7 broadcast it with broadcast=1 and an `axis`: its
    dims line up with A's from `axis` on (Add-6: A (2, 3, 4, 5) and B (3, 4) with axis=1), so B
    is given trailing 1s; a 1 among them stretches as numpy's (ONNX's own test data,
    operator_add_size1_broadcast, holds one). Without `axis` (suffix matching), or of one
    element, numpy's rule is the same. From opset 7 the ops broadcast as numpy's, and have
    no such attributes."""
    if node.opset >= 7 or not node.attr("broadcast", 0) or node.attr("axis") is None:
        return b
    if math.prod(b.shape) == 1:
        return b
    rank = len(a.shape)
    axis = axis_of(node, node.attr("axis"), rank)
    lined_up = a.shape[axis:axis + len(b.shape)]
    if len(lined_up) < len(b.shape) or any(d not in (1, n) for d, n in
                                             zip(b.shape, lined_up, strict=False)):
        raise node.fail(f"B {tuple(b.shape)} does not line up with the dims of A "
                        f"{tuple(a.shape)} from axis {axis} (broadcast=1 before opset 7)")
    return ops.reshape(b, (*b.shape, *[1] * (rank - axis - len(b.shape))))


for _name, _fn in {"Add": ops.add, "Sub": ops.subtract, "Mul": ops.multiply,
                   "Equal": ops.equal, "Less": ops.less, "LessOrEqual": ops.less_equal,
                   "Greater": ops.greater, "GreaterOrEqual": ops.greater_equal,
                   "And": ops.logical_and, "Or": ops.logical_or, "Xor": ops.logical_xor,
                   "BitwiseAnd": ops.bitwise_and, "BitwiseOr": ops.bitwise_or,
                   "BitwiseXor": ops.bitwise_xor}.items():
    converts(_name)(_binary(_fn))

_UNARY = {"Abs": ops.abs, "Neg": ops.negative, "Exp": ops.exp, "Log": ops.log,
          "Sqrt": ops.sqrt, "Tanh": ops.tanh, "Sigmoid": ops.sigmoid, "Erf": ops.erf,
          "Floor": ops.floor, "Ceil": ops.ceil, "Round": ops.round, "Sign": ops.sign,
          "Sin": ops.sin, "Cos": ops.cos, "Relu": ops.relu, "Not": ops.logical_not,
          "BitwiseNot": ops.bitwise_not, "Reciprocal": lambda x: ops.divide(1.0, x),
          "Identity": lambda x: x}
for _name, _fn in _UNARY.items():
    converts(_name)(lambda node, ins, fn=_fn: fn(ins[0]))


@converts("Div")
def div(node: Node, ins: list[Any]) -> Any:
    """Floats divide; integers truncate toward zero (C's, ONNX's reference)."""
    a, b = ins[0], _legacy_aligned(node, *ins)
    if np.dtype(a.dtype).kind == "f":
        return ops.divide(a, b)
    quotient = ops.floor_divide(a, b)
    inexact = ops.not_equal(ops.remainder(a, b), 0)
    opposite = ops.not_equal(ops.less(a, 0), ops.less(b, 0))
    return ops.where(ops.logical_and(inexact, opposite), ops.add(quotient, 1), quotient)


@converts("Mod")
def mod(node: Node, ins: list[Any]) -> Any:
    """fmod=1: C's fmod (the sign of the dividend); fmod=0: the sign of the divisor."""
    a, b = ins
    if not node.attr("fmod", 0):
        return ops.remainder(a, b)
    if np.dtype(a.dtype).kind == "f":
        return ops.fmod(a, b)
    r = ops.remainder(a, b)  # integers: the remainder of division truncated toward zero
    opposite = ops.not_equal(ops.less(a, 0), ops.less(b, 0))
    return ops.where(ops.logical_and(ops.not_equal(r, 0), opposite), ops.subtract(r, b), r)


@converts("Pow")
def power(node: Node, ins: list[Any]) -> Any:
    """x ** y in x's type. An integer base: by repeated multiplication for one known
    non-negative integer exponent, else in float64 and truncated back (ONNX's reference)."""
    x, y = ins[0], _legacy_aligned(node, *ins)
    if np.dtype(x.dtype).kind == "f":
        return ops.power(x, ops.astype(y, x.dtype))
    if isinstance(y, np.ndarray) and y.size == 1 and y.dtype.kind in "iu" and int(y.flat[0]) >= 0:
        return ops.power(x, int(y.flat[0]))
    return ops.astype(ops.power(ops.astype(x, np.float64), ops.astype(y, np.float64)), x.dtype)


@converts("BitShift")
def bit_shift(node: Node, ins: list[Any]) -> Any:
    shift = ops.left_shift if node.attr("direction") == "LEFT" else ops.right_shift
    return shift(ins[0], ins[1])


def _variadic(fn: Any) -> Any:
    return lambda node, ins: reduce(fn, ins)


converts("Max")(_variadic(ops.maximum))
converts("Min")(_variadic(ops.minimum))
converts("Sum")(_variadic(ops.add))


@converts("Mean")
def mean(node: Node, ins: list[Any]) -> Any:
    return ops.divide(reduce(ops.add, ins), float(len(ins)))


@converts("Where")
def where(node: Node, ins: list[Any]) -> Any:
    return ops.where(*ins)


@converts("IsNaN")
def is_nan(node: Node, ins: list[Any]) -> Any:
    return ops.not_equal(ins[0], ins[0])


@converts("IsInf")
def is_inf(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    positive = node.attr("detect_positive", 1)
    negative = node.attr("detect_negative", 1)
    hits = [ops.equal(x, np.inf)] if positive else []
    hits += [ops.equal(x, -np.inf)] if negative else []
    return reduce(ops.logical_or, hits) if hits else ops.full_like(x, False, dtype=np.bool_)


# ---------------------------------------------------------------------------------------------
# Activations with parameters


@converts("LeakyRelu")
def leaky_relu(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    return ops.where(ops.less(x, 0), ops.multiply(x, node.attr("alpha", 0.01)), x)


@converts("PRelu")
def prelu(node: Node, ins: list[Any]) -> Any:
    """Before opset 7 a (C,) slope runs along axis 1; from it, the slope broadcasts."""
    x, slope = ins
    if node.opset < 7 and len(slope.shape) == 1 and len(x.shape) > 2:
        slope = ops.reshape(slope, (slope.shape[0], *[1] * (len(x.shape) - 2)))
    return ops.where(ops.less(x, 0), ops.multiply(x, slope), x)


@converts("ThresholdedRelu")
def thresholded_relu(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    return ops.where(ops.greater(x, node.attr("alpha", 1.0)), x, ops.zeros_like(x))


@converts("Elu")
def elu(node: Node, ins: list[Any]) -> Any:
    x, alpha = ins[0], node.attr("alpha", 1.0)
    return ops.where(ops.less(x, 0), ops.multiply(ops.subtract(ops.exp(x), 1.0), alpha), x)


@converts("Selu")
def selu(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    alpha, gamma = node.attr("alpha", 1.67326319217681884765625), \
        node.attr("gamma", 1.05070102214813232421875)
    negative = ops.subtract(ops.multiply(ops.exp(x), alpha), alpha)
    return ops.multiply(ops.where(ops.greater(x, 0), x, negative), gamma)


@converts("Celu")
def celu(node: Node, ins: list[Any]) -> Any:
    x, alpha = ins[0], node.attr("alpha", 1.0)
    negative = ops.multiply(ops.subtract(ops.exp(ops.divide(x, alpha)), 1.0), alpha)
    return ops.add(ops.maximum(x, 0.0), ops.minimum(negative, 0.0))


def softplus_of(x: Any) -> Any:
    """log(1 + exp(x)), without overflow: max(x, 0) + log(1 + exp(-|x|))."""
    return ops.add(ops.maximum(x, 0.0), ops.log(ops.add(ops.exp(ops.negative(ops.abs(x))), 1.0)))


@converts("Softplus")
def softplus(node: Node, ins: list[Any]) -> Any:
    return softplus_of(ins[0])


@converts("Swish")
def swish(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    return ops.multiply(x, ops.sigmoid(ops.multiply(x, node.attr("alpha", 1.0))))


@converts("Softsign")
def softsign(node: Node, ins: list[Any]) -> Any:
    return ops.divide(ins[0], ops.add(ops.abs(ins[0]), 1.0))


@converts("Mish")
def mish(node: Node, ins: list[Any]) -> Any:
    return ops.multiply(ins[0], ops.tanh(softplus_of(ins[0])))


def hard_sigmoid_of(x: Any, alpha: float, beta: float) -> Any:
    return ops.clip(ops.add(ops.multiply(x, alpha), beta), 0.0, 1.0)


@converts("HardSigmoid")
def hard_sigmoid(node: Node, ins: list[Any]) -> Any:
    return hard_sigmoid_of(ins[0], node.attr("alpha", 0.2), node.attr("beta", 0.5))


@converts("HardSwish")
def hard_swish(node: Node, ins: list[Any]) -> Any:
    return ops.multiply(ins[0], hard_sigmoid_of(ins[0], 1 / 6, 0.5))


@converts("Gelu")
def gelu(node: Node, ins: list[Any]) -> Any:
    from tapeml.frontend import nn

    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise node.fail(f"approximate={approximate!r} is neither 'none' nor 'tanh'")
    return nn.gelu(ins[0], approximate=approximate == "tanh")


# ---------------------------------------------------------------------------------------------
# Types and bounds


@converts("Cast")
def cast(node: Node, ins: list[Any]) -> Any:
    return ops.astype(ins[0], element_type(node, node.attr("to")))


@converts("CastLike")
def cast_like(node: Node, ins: list[Any]) -> Any:
    return ops.astype(ins[0], ins[1].dtype)


_FLT_MAX = float(np.finfo(np.float32).max)


@converts("Clip")
def clip(node: Node, ins: list[Any]) -> Any:
    """tapeml.clip (numpy.clip: min > max gives max, NaN stays NaN) between the node's
    bounds."""
    x = ins[0]
    lo, hi = _clip_bounds(node, ins)
    if lo is None and hi is None:
        return x
    return ops.clip(x, _in_type_of(x, lo), _in_type_of(x, hi))


def _in_type_of(x: Any, bound: Any) -> Any:
    """A tensor bound in x's type (an attribute's Python float is weak: it takes x's)."""
    return bound if bound is None or isinstance(bound, float) else ops.astype(bound, x.dtype)


def _clip_bounds(node: Node, ins: list[Any]) -> tuple[Any, Any]:
    """(min, max), None where there is none: attributes before opset 11 (Clip-6's default to
    -/+FLT_MAX, so an infinity clips to FLT_MAX, as onnxruntime and onnx.reference; Clip-1's
    have no default), optional inputs from it."""
    if node.opset < 6:
        return node.attr("min"), node.attr("max")
    if node.opset < 11:
        return node.attr("min", -_FLT_MAX), node.attr("max", _FLT_MAX)
    return tuple(ins[k] if len(ins) > k and present(ins[k]) else None for k in (1, 2))


@converts("Dropout")
def dropout(node: Node, ins: list[Any]) -> Any:
    """At inference the identity (and a mask of ones). training_mode, when given, must be a
    known false."""
    if len(ins) > 2 and present(ins[2]) and bool(known(node, ins[2], "training_mode")):
        raise node.fail("Dropout in training mode is not imported (it draws random masks)")
    x = ins[0]
    return [x, ops.full_like(x, True, dtype=np.bool_)]
