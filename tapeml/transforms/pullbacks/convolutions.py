"""The pullbacks of the 2-D window ops on NCHW tensors: conv2d, maxpool2d and avgpool2d, and their
backward ops. Each is made of the family's other ops, except maxpool2d's backward, written with
unfold over the padded input (`ops.pad2d`)."""

from __future__ import annotations

import numpy as np

from tapeml.dialects import tape
from tapeml.tracing import ops
from tapeml.tracing.trace import bind
from tapeml.transforms.pullbacks.reductions import even_split
from tapeml.transforms.pullbacks.registry import pullback

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
    cols = ops.unfold(ops.pad2d(x, padding, -np.inf), kernel, stride)
    top = ops.max(cols, axis=(-2, -1), keepdims=True)
    share = even_split(np.asarray(1.0, x.dtype), cols, top, (-2, -1))
    g_cols = ops.unfold(ops.pad2d(g, padding, 0.0), kernel, stride)
    return None, ops.sum(ops.multiply(g_cols, share), axis=(-2, -1))


@pullback(tape.AvgPool2dOp)
def _avgpool2d(ct, x, *, result, **params):
    return (bind(tape.AvgPool2dBackwardOp, ct, **params, spatial=x.shape[2:]),)


@pullback(tape.AvgPool2dBackwardOp)
def _avgpool2d_backward(g, ct, *, result, spatial, **params):
    return (bind(tape.AvgPool2dOp, g, **params),)
