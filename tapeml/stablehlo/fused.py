"""`tape.fused` in StableHLO: the group's operands broadcast to its shape, then each op of its
body written by its own rule over that whole shape (`tape.index` an iota); XLA or IREE fuse
the chain again."""

from __future__ import annotations

from xdsl.ir import Block, SSAValue

from tapeml.dialects import tape
from tapeml.stablehlo.registry import EMITTERS, V, Writer, emits


@emits(tape.FusedOp)
def fused(w: Writer, out: V, *inputs: V, body: Block) -> V:
    values: dict[SSAValue, V] = {arg: w.broadcast(x, out.shape)
                                 for arg, x in zip(body.args, inputs, strict=True)}
    for op in body.ops:
        if isinstance(op, tape.YieldOp):
            return values[op.value]
        dtype = tape.dtype_of(op.result.type)
        if isinstance(op, tape.IndexOp):
            values[op.result] = w.iota(out.shape, dtype, op.params["axis"])
            continue
        whole = V("", out.shape, dtype)
        values[op.result] = EMITTERS[type(op)](w, whole, *(values[o] for o in op.operands),
                                               **op.params)
    raise AssertionError("a tape.fused body ends in tape.yield")  # its verifier says so
