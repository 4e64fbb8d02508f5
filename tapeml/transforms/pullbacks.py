"""Pullbacks: for each differentiable tape op, the cotangents of its operands given the
cotangent of its result.

Each rule is written once against the ops API (`tapeml.tracing.ops`), so it computes on numpy
arrays eagerly and records tape ops under a trace: a gradient is more tape.

    rule(ct, *operands, result=result, **op.params) -> one cotangent (or None) per operand

None means "no cotangent" (an integer-valued or boolean path). Ops in NON_DIFFERENTIABLE have
no rule: their operands get no cotangent from them.

Ties: `maximum`/`minimum` give half the cotangent to each side where the operands are equal;
the `max` reduction and `maxpool2d` split it evenly among all the elements that attain the max.
Both are valid subgradients, and both keep the gradient's sum equal to the cotangent's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.dialects.base import TapeOp
from tapeml.tracing import ops
from tapeml.tracing.trace import bind

Rule = Callable[..., tuple[Any, ...]]
PULLBACKS: dict[type[TapeOp], Rule] = {}
NON_DIFFERENTIABLE: frozenset[type[TapeOp]] = frozenset({tape.CmpOp, tape.ConstantOp})


def pullback(*op_types: type[TapeOp]) -> Callable[[Rule], Rule]:
    def register(rule: Rule) -> Rule:
        for op_type in op_types:
            PULLBACKS[op_type] = rule
        return rule

    return register


# ----------------------------------------------------------------------------------------------
# Elementwise


@pullback(tape.AddOp)
def _add(ct, a, b, *, result):
    return ct, ct


@pullback(tape.SubOp)
def _sub(ct, a, b, *, result):
    return ct, ops.negative(ct)


@pullback(tape.MulOp)
def _mul(ct, a, b, *, result):
    return ops.multiply(ct, b), ops.multiply(ct, a)


@pullback(tape.DivOp)
def _div(ct, a, b, *, result):
    ct_a = ops.divide(ct, b)
    return ct_a, ops.negative(ops.multiply(ct_a, result))


def _tie_share(a, b):
    """1 where a wins, 0 where b wins, 1/2 on ties."""
    half = np.asarray(0.5, a.dtype)
    return ops.where(ops.greater(a, b), np.asarray(1.0, a.dtype),
                     ops.where(ops.equal(a, b), half, np.asarray(0.0, a.dtype)))


@pullback(tape.MaximumOp)
def _maximum(ct, a, b, *, result):
    share = _tie_share(a, b)
    return ops.multiply(ct, share), ops.multiply(ct, ops.subtract(1.0, share))


@pullback(tape.MinimumOp)
def _minimum(ct, a, b, *, result):
    share = _tie_share(b, a)
    return ops.multiply(ct, share), ops.multiply(ct, ops.subtract(1.0, share))


@pullback(tape.PowOp)
def _pow(ct, a, b, *, result):
    ct_a = ops.multiply(ct, ops.multiply(b, ops.power(a, ops.subtract(b, 1.0))))
    # d/db a**b = log(a) a**b, taken as 0 where a <= 0 (there a**b is 0, 1 or nan)
    log_a = ops.where(ops.greater(a, 0.0), ops.log(a), np.asarray(0.0, a.dtype))
    return ct_a, ops.multiply(ct, ops.multiply(result, log_a))


@pullback(tape.NegOp)
def _neg(ct, a, *, result):
    return (ops.negative(ct),)


@pullback(tape.ExpOp)
def _exp(ct, a, *, result):
    return (ops.multiply(ct, result),)


@pullback(tape.LogOp)
def _log(ct, a, *, result):
    return (ops.divide(ct, a),)


@pullback(tape.TanhOp)
def _tanh(ct, a, *, result):
    return (ops.multiply(ct, ops.subtract(1.0, ops.multiply(result, result))),)


@pullback(tape.SigmoidOp)
def _sigmoid(ct, a, *, result):
    return (ops.multiply(ct, ops.multiply(result, ops.subtract(1.0, result))),)


@pullback(tape.ReluOp)
def _relu(ct, a, *, result):
    return (ops.where(ops.greater(a, 0.0), ct, np.asarray(0.0, ct.dtype)),)  # 0 at 0


@pullback(tape.SqrtOp)
def _sqrt(ct, a, *, result):
    return (ops.divide(ct, ops.multiply(result, 2.0)),)


@pullback(tape.SelectOp)
def _select(ct, cond, on_true, on_false, *, result):
    zero = np.asarray(0.0, ct.dtype)
    return None, ops.where(cond, ct, zero), ops.where(cond, zero, ct)


@pullback(tape.CastOp)
def _cast(ct, a, *, result, dtype):
    return (ops.astype(ct, a.dtype),)


# ----------------------------------------------------------------------------------------------
# Layout


@pullback(tape.BroadcastOp)
def _broadcast(ct, a, *, result, shape):
    lead = len(shape) - a.ndim
    stretched = tuple(lead + i for i, d in enumerate(a.shape) if d == 1 and shape[lead + i] != 1)
    summed = ops.sum(ct, axis=tuple(range(lead)) + stretched, keepdims=True)
    return (ops.reshape(summed, a.shape),)


@pullback(tape.ReshapeOp)
def _reshape(ct, a, *, result, shape):
    return (ops.reshape(ct, a.shape),)


@pullback(tape.PermuteOp)
def _permute(ct, a, *, result, perm):
    return (ops.transpose(ct, tuple(np.argsort(perm))),)


@pullback(tape.PadOp)
def _pad(ct, a, *, result, low, high, value):
    # padding's adjoint crops what was added and zero-pads what was cropped: the opposite pad
    return (ops.pad(ct, [(-lo, -hi) for lo, hi in zip(low, high, strict=True)]),)


@pullback(tape.SliceOp)
def _slice(ct, a, *, result, start, stop, step):
    # scatter back: spread each dim out to `step` apart (zeros between), then place at `start`
    for axis, (s, d, n) in enumerate(zip(step, a.shape, ct.shape, strict=True)):
        if s > 1 and n > 0:
            ct = ops.expand_dims(ct, axis + 1)
            widths = [(0, 0)] * ct.ndim
            widths[axis + 1] = (0, s - 1)
            ct = ops.pad(ct, widths)
            ct = ops.reshape(ct, (*ct.shape[:axis], n * s, *ct.shape[axis + 2:]))
        widths = [(0, 0)] * ct.ndim
        widths[axis] = (start[axis], d - start[axis] - ct.shape[axis])
        ct = ops.pad(ct, widths)
    return (ct,)


@pullback(tape.UnfoldOp)
def _unfold(ct, a, *, result, kernel, stride, dilation):
    k = len(kernel)
    return (ops.fold(ct, a.shape[a.ndim - k:], kernel, stride, dilation),)


@pullback(tape.FoldOp)
def _fold(ct, a, *, result, kernel, stride, dilation, spatial):
    return (ops.unfold(ct, kernel, stride, dilation),)


@pullback(tape.ConcatOp)
def _concat(ct, *inputs, result, axis):
    cts, offset = [], 0
    for x in inputs:
        index = [slice(None)] * ct.ndim
        index[axis] = slice(offset, offset + x.shape[axis])
        cts.append(ops.getitem(ct, tuple(index)))
        offset += x.shape[axis]
    return tuple(cts)


# ----------------------------------------------------------------------------------------------
# Reductions and contractions


def _unreduce(ct, a, axes, keepdims):
    """`ct` (a reduction's cotangent) broadcast back to `a`'s shape."""
    if not keepdims:
        ct = ops.reshape(ct, [1 if i in axes else d for i, d in enumerate(a.shape)])
    return ops.broadcast_to(ct, a.shape)


@pullback(tape.SumOp)
def _sum(ct, a, *, result, axes, keepdims):
    return (_unreduce(ct, a, axes, keepdims),)


def _even_split(ct, values, top, axes):
    """ct shared evenly among the elements of `values` equal to `top` (both broadcastable)."""
    mask = ops.astype(ops.equal(values, top), values.dtype)
    count = ops.sum(mask, axis=axes, keepdims=True)
    return ops.multiply(mask, ops.divide(ct, count))


@pullback(tape.MaxOp)
def _max(ct, a, *, result, axes, keepdims):
    top = _unreduce(result, a, axes, keepdims)
    return (_even_split(_unreduce(ct, a, axes, keepdims), a, top, axes),)


def _pad2d(x, padding: Sequence[int], value: float):
    top, left, bottom, right = padding
    return ops.pad(x, [(0, 0), (0, 0), (top, bottom), (left, right)], value)


def _swap_last(x):
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return ops.transpose(x, perm)


@pullback(tape.MatmulOp)
def _matmul(ct, a, b, *, result):
    return ops.matmul(ct, _swap_last(b)), ops.matmul(_swap_last(a), ct)


# The convolution and its two backward ops are a closed family: each one's pullback is made of
# the other two (all are linear in each operand).


@pullback(tape.Conv2dOp)
def _conv2d(ct, x, w, *, result, **params):
    return (bind(tape.Conv2dBackwardInputOp, ct, w, **params, spatial=x.shape[2:]),
            bind(tape.Conv2dBackwardWeightOp, x, ct, **params, kernel=w.shape[2:]))


@pullback(tape.Conv2dBackwardInputOp)
def _conv2d_backward_input(g, ct, w, *, result, spatial, **params):
    return (bind(tape.Conv2dOp, g, w, **params),
            bind(tape.Conv2dBackwardWeightOp, g, ct, **params, kernel=w.shape[2:]))


@pullback(tape.Conv2dBackwardWeightOp)
def _conv2d_backward_weight(g, x, ct, *, result, kernel, **params):
    return (bind(tape.Conv2dBackwardInputOp, ct, g, **params, spatial=x.shape[2:]),
            bind(tape.Conv2dOp, x, g, **params))


@pullback(tape.MaxPool2dOp)
def _maxpool2d(ct, x, *, result, **params):
    return (bind(tape.MaxPool2dBackwardOp, x, ct, **params),)


@pullback(tape.MaxPool2dBackwardOp)
def _maxpool2d_backward(g, x, ct, *, result, kernel, stride, padding):
    # linear in ct: each window gathers g over the elements that attain its max, as the forward
    # scattered ct to them; the routing is piecewise constant in x, so x gets no cotangent
    cols = ops.unfold(_pad2d(x, padding, -np.inf), kernel, stride)
    top = ops.max(cols, axis=(-2, -1), keepdims=True)
    share = _even_split(np.asarray(1.0, x.dtype), cols, top, (-2, -1))
    g_cols = ops.unfold(_pad2d(g, padding, 0.0), kernel, stride)
    return None, ops.sum(ops.multiply(g_cols, share), axis=(-2, -1))


@pullback(tape.AvgPool2dOp)
def _avgpool2d(ct, x, *, result, **params):
    return (bind(tape.AvgPool2dBackwardOp, ct, **params, spatial=x.shape[2:]),)


@pullback(tape.AvgPool2dBackwardOp)
def _avgpool2d_backward(g, ct, *, result, spatial, **params):
    return (bind(tape.AvgPool2dOp, g, **params),)


@pullback(tape.FusedOp)
def _fused(ct, *inputs, result, body):
    # replay the body on whole arrays (recomputing the group's intermediates), then pull the
    # cotangent back through it op by op, and through the inputs' broadcasts
    shape = result.shape
    env = {arg: ops.broadcast_to(x, shape) for arg, x in zip(body.args, inputs, strict=True)}
    recorded = []
    for op in body.ops:
        if isinstance(op, tape.YieldOp):
            break
        if isinstance(op, tape.ConstantOp):
            env[op.result] = ops.broadcast_to(op.params["value"], shape)
            continue
        env[op.results[0]] = bind(type(op), *(env[o] for o in op.operands), **op.params)
        recorded.append(op)
    cts = {body.last_op.value: ct}
    for op in reversed(recorded):
        out_ct = cts.pop(op.results[0], None)
        if out_ct is None or type(op) in NON_DIFFERENTIABLE:
            continue
        operand_cts = PULLBACKS[type(op)](out_ct, *(env[o] for o in op.operands),
                                          result=env[op.results[0]], **op.params)
        for operand, operand_ct in zip(op.operands, operand_cts, strict=True):
            if operand_ct is not None:
                cts[operand] = ops.add(cts[operand], operand_ct) if operand in cts else operand_ct
    grads = []
    for arg, x in zip(body.args, inputs, strict=True):
        g = cts.get(arg)
        if g is None or np.dtype(x.dtype) == np.bool_:
            grads.append(None)
        elif tuple(x.shape) != tuple(shape):
            grads.append(_broadcast(g, x, result=None, shape=shape)[0])
        else:
            grads.append(g)
    return tuple(grads)
