"""The numpy semantics of `tape.fused`: its body's ops, each on whole arrays (`tape.index`: the
positions along its axis, as `tape.iota` gives them)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.interpreters.tape.registry import evaluate, semantics


@semantics(tape.FusedOp)
def fused(*inputs: np.ndarray, body: Any) -> np.ndarray:
    """The body's ops, each on whole arrays: the same numpy calls as the ops it fused."""
    shape = np.broadcast_shapes(*(x.shape for x in inputs))
    env = {arg: np.broadcast_to(x, shape) for arg, x in zip(body.args, inputs, strict=True)}
    for op in body.ops:
        if isinstance(op, tape.YieldOp):
            return np.broadcast_to(env[op.value], shape).copy()  # (0-d stays 0-d)
        if isinstance(op, tape.IndexOp):
            env[op.result] = evaluate(tape.IotaOp, shape=shape, **op.params)
            continue
        env[op.results[0]] = evaluate(type(op), *(env[o] for o in op.operands), **op.params)
    raise AssertionError("a verified tape.fused body ends in tape.yield")
