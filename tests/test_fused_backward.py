"""The backward ops of conv2d and the poolings against loop references, and as the adjoints of
their forward ops (<forward(x), g> == <x, backward(g)>)."""

from __future__ import annotations

import numpy as np
import pytest
import reference
from xdsl.ir import Block

import tapeml
from tapeml import nn, ops
from tapeml.dialects import tape
from tapeml.interpreters.tape import evaluate

RNG = np.random.default_rng(5)

CONVS = [  # x shape, w shape, stride, padding, dilation, groups
    ((2, 3, 7, 6), (4, 3, 3, 2), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((1, 4, 9, 8), (6, 2, 3, 3), (2, 1), (1, 0, 2, 1), (1, 2), 2),
    ((1, 3, 6, 6), (3, 1, 2, 2), (3, 3), (0, 0, 0, 0), (1, 1), 3),  # depthwise, stride > kernel
    ((2, 2, 5, 7), (2, 2, 1, 3), (2, 2), (0, 1, 1, 0), (1, 1), 1),  # rows the windows skip
]


@pytest.mark.parametrize("case", CONVS, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv2d_backward_ops_against_loops(case, dtype):
    xs, ws, stride, padding, dilation, groups = case
    params = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    x, w = RNG.standard_normal(xs).astype(dtype), RNG.standard_normal(ws).astype(dtype)
    y = evaluate(tape.Conv2dOp, x, w, **params)
    ct = RNG.standard_normal(y.shape).astype(dtype)
    dx = evaluate(tape.Conv2dBackwardInputOp, ct, w, **params, spatial=xs[2:])
    dw = evaluate(tape.Conv2dBackwardWeightOp, x, ct, **params, kernel=ws[2:])
    assert dx.dtype == dtype and dw.dtype == dtype
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, reference.conv2d_backward_input(ct, w, stride, padding,
                                                                   dilation, groups, xs[2:]),
                               **tol)
    np.testing.assert_allclose(dw, reference.conv2d_backward_weight(x, ct, stride, padding,
                                                                    dilation, groups, ws[2:]),
                               **tol)
    if dtype == np.float64:  # adjoints: <conv(x), ct> = <x, dx>, and likewise for w
        assert np.isclose(np.vdot(y, ct), np.vdot(x, dx))
        assert np.isclose(np.vdot(y, ct), np.vdot(w, dw))


POOLS = [  # x shape, kernel, stride, padding
    ((2, 3, 6, 6), (2, 2), (2, 2), (0, 0, 0, 0)),
    ((1, 2, 7, 5), (3, 2), (2, 1), (1, 0, 1, 1)),
    ((1, 1, 5, 5), (2, 2), (3, 3), (1, 1, 1, 1)),
]


@pytest.mark.parametrize("case", POOLS, ids=str)
def test_pool_backward_ops_against_loops(case):
    xs, kernel, stride, padding = case
    params = dict(kernel=kernel, stride=stride, padding=padding)
    x = RNG.integers(0, 3, xs).astype(np.float64)  # small integers: many ties
    ct = RNG.standard_normal(evaluate(tape.MaxPool2dOp, x, **params).shape)
    np.testing.assert_allclose(evaluate(tape.MaxPool2dBackwardOp, x, ct, **params),
                               reference.maxpool2d_backward(x, ct, kernel, stride, padding),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(evaluate(tape.AvgPool2dBackwardOp, ct, **params, spatial=xs[2:]),
                               reference.avgpool2d_backward(ct, kernel, stride, padding,
                                                            xs[2:]), rtol=1e-12, atol=1e-12)


def _arg(shape, dtype=np.float32):
    return Block(arg_types=[tape.tensor_type(shape, dtype)]).args[0]


def test_backward_shape_rules_check_the_cotangent_against_the_forward():
    with pytest.raises(tapeml.ShapeError, match="tape.conv2d_backward_input: cotangent "
                       r"tensor<1x4x5x5xf32> must have the type of the forward result, "
                       r"tensor<1x4x3x3xf32>"):
        tape.Conv2dBackwardInputOp.build(_arg((1, 4, 5, 5)), _arg((4, 3, 3, 3)), stride=(1, 1),
                                         padding=(0, 0, 0, 0), dilation=(1, 1), groups=1,
                                         spatial=(5, 5))
    op = tape.Conv2dBackwardWeightOp.build(_arg((1, 3, 5, 5)), _arg((1, 4, 3, 3)),
                                           stride=(1, 1), padding=(0, 0, 0, 0),
                                           dilation=(1, 1), groups=1, kernel=(3, 3))
    assert op.result.type.get_shape() == (4, 3, 3, 3)
    with pytest.raises(tapeml.ShapeError, match="tape.maxpool2d_backward: cotangent"):
        tape.MaxPool2dBackwardOp.build(_arg((1, 1, 4, 4)), _arg((1, 1, 3, 3)), kernel=(2, 2),
                                       stride=(2, 2), padding=(0, 0, 0, 0))


@pytest.mark.parametrize("case", [*POOLS, ((2, 2, 7, 7), (2, 2), (2, 2), (0, 0, 0, 0)),
                                  ((1, 2, 8, 7), (2, 2), (3, 3), (0, 0, 0, 0))], ids=str)
def test_compiled_pool_backward_matches_the_interpreter(case):
    """On the CPU: windows side by side (written, not added; the uncovered last rows and the
    gaps between windows zeroed) and the general scatter, with many ties."""
    xs, kernel, stride, padding = case
    x = RNG.integers(0, 3, xs).astype(np.float32)
    pad = padding  # (top, left, bottom, right), as the ops take it

    def grads(x):
        def loss(x):
            return ops.sum(nn.max_pool2d(x, kernel, stride, pad) ** 2
                           + nn.avg_pool2d(x, kernel, stride, pad))
        return tapeml.grad(loss)(x)

    np.testing.assert_allclose(tapeml.jit(grads)(x), tapeml.jit(grads, backend="interp")(x),
                               rtol=1e-6, atol=1e-6)
