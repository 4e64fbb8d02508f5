"""layer_norm, softmax and their backward ops in StableHLO: the ops they stand for, written
out (each sum a `stablehlo.reduce` over the last dim), as interpreters/tape/normalization.py
computes them."""

from __future__ import annotations

import numpy as np

from tapeml.dialects import tape
from tapeml.stablehlo.registry import V, Writer, emits


def _reduced(w: Writer, x: V, body: str, init: float) -> V:
    """x reduced by `body` over the last dim, broadcast back to x's shape."""
    (total,) = w.reduce([x], [w.scalar(init, x.dtype)], [len(x.shape) - 1],
                        lambda b, args: [b.binary(body, *args)])
    return w.broadcast(w.reshape(total, (*x.shape[:-1], 1)), x.shape)


def _mean(w: Writer, x: V) -> V:
    """The mean over the last dim, kept as a dim of 1."""
    kept = (*x.shape[:-1], 1)
    (total,) = w.reduce([x], [w.scalar(0, x.dtype)], [len(x.shape) - 1],
                        lambda b, args: [b.binary("add", *args)])
    return w.binary("divide", w.reshape(total, kept), w.splat(x.shape[-1], kept, x.dtype))


def _normalized(w: Writer, x: V, eps: float) -> tuple[V, V]:
    """(y, r): x normalized along its last dim, r = 1 / sqrt(var + eps) per row."""
    centered = w.binary("subtract", x, w.broadcast(_mean(w, x), x.shape))
    var = _mean(w, w.binary("multiply", centered, centered))
    root = w.unary("sqrt", w.binary("add", var, w.splat(eps, var.shape, var.dtype)))
    r = w.binary("divide", w.splat(1, var.shape, var.dtype), root)
    return w.binary("multiply", centered, w.broadcast(r, x.shape)), r


@emits(tape.LayerNormOp)
def layer_norm(w: Writer, out: V, x: V, *, eps: float) -> V:
    return _normalized(w, x, eps)[0]


@emits(tape.LayerNormBackwardOp)
def layer_norm_backward(w: Writer, out: V, x: V, g: V, *, eps: float) -> V:
    y, r = _normalized(w, x, eps)
    mean_gy = w.broadcast(_mean(w, w.binary("multiply", g, y)), x.shape)
    h = w.binary("subtract", w.binary("subtract", g, w.broadcast(_mean(w, g), x.shape)),
                 w.binary("multiply", y, mean_gy))
    return w.binary("multiply", w.broadcast(r, x.shape), h)


@emits(tape.SoftmaxOp)
def softmax(w: Writer, out: V, x: V) -> V:
    e = w.unary("exponential", w.binary("subtract", x, _reduced(w, x, "maximum", -np.inf)))
    return w.binary("divide", e, _reduced(w, e, "add", 0))


@emits(tape.SoftmaxBackwardOp)
def softmax_backward(w: Writer, out: V, p: V, g: V) -> V:
    return w.binary("multiply", p, w.binary(
        "subtract", g, _reduced(w, w.binary("multiply", g, p), "add", 0)))
