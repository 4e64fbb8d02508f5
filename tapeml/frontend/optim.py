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
from tapeml.tracing.pytree import LEAF, TreeDef, flatten, tree_map, unflatten
from tapeml.tracing.trace import Tracer, at_user_line


class Optimizer(NamedTuple):
    init: Callable[[Any], Any]
    update: Callable[[Any, Any, Any], tuple[Any, Any]]


def _zeros(p: Any) -> Any:
    """Zeros shaped like a leaf (a Python number's: 0-d, its dtype as tapeml takes it, f32 for
    a float, which traced is a weak f64 tracer)."""
    if isinstance(p, Tracer):
        return ops.zeros_like(p, np.float32 if is_weak(p) and p.dtype.kind == "f" else p.dtype)
    return np.zeros(np.shape(p), lift(p).dtype)


def _zeros_like(params: Any) -> Any:
    return tree_map(_zeros, params)


def _brief(treedef: TreeDef, limit: int = 160) -> str:
    text = str(treedef)
    return text if len(text) <= limit else text[:limit] + " (cut)"


def _mismatch(message: str, want: TreeDef, got: TreeDef, hint: str = "",
              show_want: bool = False) -> ValueError:
    """`message` and the structure given, or where it first differs from `want`: that part."""
    path, w, g = "", want, got
    while w.kind == g.kind and w.keys == g.keys:  # (they differ, so some child does)
        key, w, g = next((k, a, b) for k, a, b in zip(w.keys, w.children, g.children,
                                                      strict=True) if a != b)
        path = f"{path}.{key}" if path else str(key)
    where = (f"; at {path}: {_brief(g)} where {_brief(w)} was expected" if path else
             f"{f', {_brief(want)}' if show_want else ''}; got {_brief(got)}")
    return ValueError(at_user_line(f"{message}{where}{hint}"))


def _flat(name: str, params: Any, grads: Any) -> tuple[list[Any], list[Any], TreeDef]:
    """The leaves of params and of grads, which must have params' structure (returned)."""
    p, treedef = flatten(params)
    g, got = flatten(grads)
    if got != treedef:
        hint = (" (value_and_grad returns (value, grads): pass its grads)"
                if got.kind == "tuple" and treedef in got.children else "")
        raise _mismatch(f"{name}.update: grads must be structured like params", treedef, got,
                        hint, show_want=True)
    return p, g, treedef


def sgd(learning_rate: float) -> Optimizer:
    """p <- p - lr * g."""

    def init(params: Any) -> Any:
        return ()

    def update(params: Any, grads: Any, state: Any) -> tuple[Any, Any]:
        p, g, treedef = _flat("sgd", params, grads)
        if flatten(state)[0]:  # (another optimizer's state: sgd would hand it back unused)
            raise _mismatch("sgd.update: state is not what sgd.init makes (sgd keeps no state: "
                            "())", flatten(())[1], flatten(state)[1])
        return unflatten(treedef, [ops.subtract(p, ops.multiply(g, learning_rate))
                                   for p, g in zip(p, g, strict=True)]), state

    return Optimizer(init, update)


def momentum(learning_rate: float, beta: float = 0.9) -> Optimizer:
    """v <- beta * v + g; p <- p - lr * v."""

    def init(params: Any) -> Any:
        return _zeros_like(params)

    def update(params: Any, grads: Any, velocity: Any) -> tuple[Any, Any]:
        p, g, treedef = _flat("momentum", params, grads)
        v, got = flatten(velocity)
        if got != treedef:
            raise _mismatch("momentum.update: state is not what momentum.init makes (the "
                            "velocities, structured like params)", treedef, got)
        v = [ops.add(ops.multiply(v, beta), g) for v, g in zip(v, g, strict=True)]
        p = [ops.subtract(p, ops.multiply(v, learning_rate)) for p, v in zip(p, v, strict=True)]
        return unflatten(treedef, p), unflatten(treedef, v)

    return Optimizer(init, update)


def adam(learning_rate: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
         ) -> Optimizer:
    """Adam (Kingma & Ba) with bias correction; the step count is part of the state."""

    def init(params: Any) -> Any:
        return {"step": np.zeros((), np.float32), "m": _zeros_like(params),
                "v": _zeros_like(params)}

    def update(params: Any, grads: Any, state: Any) -> tuple[Any, Any]:
        p, g, treedef = _flat("adam", params, grads)
        s, got = flatten(state)  # m's leaves, step, v's (dicts in sorted key order)
        want = TreeDef("dict", ("m", "step", "v"), (treedef, LEAF, treedef))
        if got != want:
            raise _mismatch("adam.update: state is not what adam.init makes (a dict with m, v "
                            "and step, m and v structured like params)", want, got)
        n = len(p)
        step = ops.add(s[n], 1.0)
        m = [ops.add(ops.multiply(m, b1), ops.multiply(g, 1 - b1))
             for m, g in zip(s[:n], g, strict=True)]
        v = [ops.add(ops.multiply(v, b2), ops.multiply(ops.square(g), 1 - b2))
             for v, g in zip(s[n + 1:], g, strict=True)]

        def step_param(p: Any, m: Any, v: Any) -> Any:
            p = lift(p)  # (a Python number: weak, f32 as tapeml takes it, traced or not)
            dtype = np.dtype(np.float32) if is_weak(p) else np.dtype(p.dtype)
            t = ops.astype(step, dtype)  # bias corrections in the parameter's own precision
            m_hat = ops.divide(m, ops.subtract(1.0, ops.power(np.asarray(b1, dtype), t)))
            v_hat = ops.divide(v, ops.subtract(1.0, ops.power(np.asarray(b2, dtype), t)))
            return ops.subtract(p, ops.multiply(
                ops.divide(m_hat, ops.add(ops.sqrt(v_hat), eps)), learning_rate))

        p = [step_param(*leaves) for leaves in zip(p, m, v, strict=True)]
        return unflatten(treedef, p), {"step": step, "m": unflatten(treedef, m),
                                       "v": unflatten(treedef, v)}

    return Optimizer(init, update)
