"""The pullback of `tape.fused`: its body replayed on whole arrays, then each body op's own
pullback applied in reverse."""

from __future__ import annotations

import numpy as np

from tapeml.dialects import tape
from tapeml.tracing import ops
from tapeml.tracing.trace import bind
from tapeml.transforms.pullbacks.layout import broadcast
from tapeml.transforms.pullbacks.registry import NON_DIFFERENTIABLE, PULLBACKS, pullback


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
        if isinstance(op, tape.IndexOp):  # positions: no cotangent flows into them
            env[op.result] = ops.iota(shape, op.params["axis"], op.params["dtype"])
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
            grads.append(broadcast(g, x, result=None, shape=shape)[0])
        else:
            grads.append(g)
    return tuple(grads)
