"""The numpy semantics of layer_norm, softmax and their backward ops: each step as the ops
written out compute it (a sum rounded to x's type, then / n; the IEEE max), so a norm is the
same numbers as one."""

from __future__ import annotations

import numpy as np

from tapeml.dialects import tape
from tapeml.interpreters.tape.reductions import max_over
from tapeml.interpreters.tape.registry import semantics


def _sum(x: np.ndarray) -> np.ndarray:
    return np.add.reduce(x, axis=-1, keepdims=True, dtype=x.dtype)


def _mean(x: np.ndarray) -> np.ndarray:
    return _sum(x) / x.dtype.type(x.shape[-1])


def normalized(x: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(y, r): x normalized along its last axis, and r = 1 / sqrt(var + eps) per row."""
    centered = x - _mean(x)
    r = x.dtype.type(1) / np.sqrt(_mean(centered * centered) + x.dtype.type(eps))
    return centered * r, r


@semantics(tape.LayerNormOp)
def layer_norm(x: np.ndarray, *, eps: float) -> np.ndarray:
    return normalized(x, eps)[0]


@semantics(tape.LayerNormBackwardOp)
def layer_norm_backward(x: np.ndarray, grad: np.ndarray, *, eps: float) -> np.ndarray:
    y, r = normalized(x, eps)
    return r * (grad - _mean(grad) - y * _mean(grad * y))


@semantics(tape.SoftmaxOp)
def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - max_over(x, (x.ndim - 1,), keepdims=True))
    return e / _sum(e)


@semantics(tape.SoftmaxBackwardOp)
def softmax_backward(probabilities: np.ndarray, grad: np.ndarray) -> np.ndarray:
    return probabilities * (grad - _sum(grad * probabilities))
