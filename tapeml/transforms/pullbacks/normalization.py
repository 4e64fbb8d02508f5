"""The pullbacks of layer_norm and softmax (their backward ops) and of those (second order).

layer_norm_backward computes dx = r * P g along the last axis, P = I - 1 1^T / n - y y^T / n,
which is symmetric: its cotangent u gives g the same map of u, another layer_norm_backward.
Through x (y and r depend on it), with h = g - mean(g) - y mean(g y) (= dx / r):

    x_bar = -r^2 * (mean(u h) y + mean(g y) (u - mean(u) - mean(u y) y) + mean(u y) h)

(from dr = -(r^2 / n) y.dx and dy = r (dx - mean(dx)) - r y mean(y dx)), written with the ops,
so it is differentiable in turn.

softmax_backward computes dx = p * (g - sum(g p)) = (diag(p) - p p^T) g, symmetric in g too:
g's cotangent is softmax_backward(p, u); p's is u * (g - sum(g p)) - g * sum(u p)."""

from __future__ import annotations

from tapeml.dialects import tape
from tapeml.tracing import ops
from tapeml.tracing.trace import bind
from tapeml.transforms.pullbacks.registry import pullback


@pullback(tape.LayerNormOp)
def _layer_norm(ct, x, *, result, eps):
    return (bind(tape.LayerNormBackwardOp, x, ct, eps=eps),)


def _mean(v):
    return ops.mean(v, axis=-1, keepdims=True)


@pullback(tape.LayerNormBackwardOp)
def _layer_norm_backward(ct, x, g, *, result, eps):
    centered = ops.subtract(x, _mean(x))
    r = ops.divide(1.0, ops.sqrt(ops.add(_mean(ops.multiply(centered, centered)), eps)))
    y = ops.multiply(centered, r)
    mean_gy = _mean(ops.multiply(g, y))
    h = ops.subtract(ops.subtract(g, _mean(g)), ops.multiply(y, mean_gy))
    mean_uy = _mean(ops.multiply(ct, y))
    inner = ops.add(ops.add(
        ops.multiply(_mean(ops.multiply(ct, h)), y),
        ops.multiply(mean_gy, ops.subtract(ops.subtract(ct, _mean(ct)), ops.multiply(mean_uy, y)))),
        ops.multiply(mean_uy, h))
    x_bar = ops.negative(ops.multiply(ops.multiply(r, r), inner))
    return x_bar, bind(tape.LayerNormBackwardOp, x, ct, eps=eps)


@pullback(tape.SoftmaxOp)
def _softmax(ct, x, *, result):
    return (bind(tape.SoftmaxBackwardOp, result, ct),)


def _sum(v):
    return ops.sum(v, axis=-1, keepdims=True)


@pullback(tape.SoftmaxBackwardOp)
def _softmax_backward(ct, p, g, *, result):
    p_bar = ops.subtract(ops.multiply(ct, ops.subtract(g, _sum(ops.multiply(g, p)))),
                         ops.multiply(g, _sum(ops.multiply(ct, p))))
    return p_bar, bind(tape.SoftmaxBackwardOp, p, ct)
