"""The registry of the tape ops' StableHLO: `EMITTERS[Op]`, filled by each family's module with
`@emits(Op)`. A rule writes the op with a `Writer` and returns its result:

    @emits(tape.SumOp)
    def sum_(w: Writer, out: V, x: V, *, axes, keepdims) -> V: ...

`out` is the result's shape and dtype (its name is empty); the operands are the op's, already
written; the keywords are the op's `params`. Inside a `tape.fused` body the same rules write
each op over the group's whole shape.
"""

from __future__ import annotations

from collections.abc import Callable

from tapeml.dialects.registry import OpTable
from tapeml.stablehlo.writer import V, Writer

Emitter = Callable[..., V]
EMITTERS: OpTable[Emitter] = OpTable("StableHLO")
emits = EMITTERS.register

__all__ = ["EMITTERS", "Emitter", "V", "Writer", "emits"]
