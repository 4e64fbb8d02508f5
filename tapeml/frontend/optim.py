"""Optimizers as pure functions over parameter pytrees, eager on arrays or traced:

    opt = optim.adam(1e-3)
    state = opt.init(params)
    params, state = opt.update(params, grads, state)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from tapeml.tracing import ops
from tapeml.tracing.ops.promotion import is_weak, lift
from tapeml.tracing.pytree import tree_map


class Optimizer(NamedTuple):
    init: Callable[[Any], Any]
    update: Callable[[Any, Any, Any], tuple[Any, Any]]


def _zeros_like(params: Any) -> Any:
    """Zeros shaped like each leaf (a Python number's: 0-d, its dtype as tapeml takes it)."""
    return tree_map(lambda p: np.zeros(np.shape(p), lift(p).dtype), params)


def sgd(learning_rate: float) -> Optimizer:
    """p <- p - lr * g."""

    def init(params: Any) -> Any:
        return ()

    def update(params: Any, grads: Any, state: Any) -> tuple[Any, Any]:
        return tree_map(lambda p, g: ops.subtract(p, ops.multiply(g, learning_rate)),
                        params, grads), state

    return Optimizer(init, update)


def momentum(learning_rate: float, beta: float = 0.9) -> Optimizer:
    """v <- beta * v + g; p <- p - lr * v."""

    def init(params: Any) -> Any:
        return _zeros_like(params)

    def update(params: Any, grads: Any, velocity: Any) -> tuple[Any, Any]:
        velocity = tree_map(lambda v, g: ops.add(ops.multiply(v, beta), g), velocity, grads)
        params = tree_map(lambda p, v: ops.subtract(p, ops.multiply(v, learning_rate)),
                          params, velocity)
        return params, velocity

    return Optimizer(init, update)


def adam(learning_rate: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
         ) -> Optimizer:
    """Adam (Kingma & Ba) with bias correction; the step count is part of the state."""

    def init(params: Any) -> Any:
        return {"step": np.zeros((), np.float32), "m": _zeros_like(params),
                "v": _zeros_like(params)}

    def update(params: Any, grads: Any, state: Any) -> tuple[Any, Any]:
        step = ops.add(state["step"], 1.0)
        m = tree_map(lambda m, g: ops.add(ops.multiply(m, b1), ops.multiply(g, 1 - b1)),
                     state["m"], grads)
        v = tree_map(lambda v, g: ops.add(ops.multiply(v, b2), ops.multiply(ops.square(g),
                                                                          1 - b2)),
                     state["v"], grads)

        def step_param(p: Any, m: Any, v: Any) -> Any:
            p = lift(p)  # (a Python number: weak, f32 as tapeml takes it, traced or not)
            dtype = np.dtype(np.float32) if is_weak(p) else np.dtype(p.dtype)
            t = ops.astype(step, dtype)  # bias corrections in the parameter's own precision
            m_hat = ops.divide(m, ops.subtract(1.0, ops.power(np.asarray(b1, dtype), t)))
            v_hat = ops.divide(v, ops.subtract(1.0, ops.power(np.asarray(b2, dtype), t)))
            return ops.subtract(p, ops.multiply(
                ops.divide(m_hat, ops.add(ops.sqrt(v_hat), eps)), learning_rate))

        return tree_map(step_param, params, m, v), {"step": step, "m": m, "v": v}

    return Optimizer(init, update)
