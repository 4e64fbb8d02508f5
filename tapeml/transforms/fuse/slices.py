"""tape-fuse's idiom for the pullback of slices: the sum of zero pads that tile one axis (the
cotangents of q, k and v sliced from one projection, added back into its shape) is the
concatenation of what each pad holds, plus zero.

    add(add(pad(a, high=[.., 2n]), pad(b, low=[.., n], high=[.., n])), pad(c, low=[.., 2n]))
        =>  concat(a + 0.0, b + 0.0, c + 0.0, axis = ..)

Exact, bit for bit: where a pad is not padding, the sum adds its value to padding zeros, so
each element is x + 0.0 (-0.0 becomes +0.0; NaN stays NaN), in any order of the adds. Three
pads and their sum write the tiled shape four times and read it three; the concatenation
writes and reads it once.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, op_type_rewrite_pattern

from tapeml.dialects import tape
from tapeml.transforms.fuse.matching import FusionPattern


def _summed(root: tape.AddOp) -> list[SSAValue]:
    """The values an add tree rooted at `root` sums (through adds used by the tree only)."""
    leaves: list[SSAValue] = []
    for value in root.operands:
        inner = value.owner
        if isinstance(inner, tape.AddOp) and value.has_one_use():
            leaves += _summed(inner)
        else:
            leaves.append(value)
    return leaves


def _piece(value: SSAValue) -> tuple[tape.PadOp, int] | None:
    """`value` = a single-use pad by +0.0 along one axis only (no cropping): it, and the axis."""
    pad = value.owner
    if not isinstance(pad, tape.PadOp) or not value.has_one_use():
        return None
    p = pad.params
    if p["value"] != 0.0 or math.copysign(1.0, p["value"]) < 0:
        return None
    axes = [i for i, (lo, hi) in enumerate(zip(p["low"], p["high"], strict=True)) if lo or hi]
    if len(axes) != 1 or min(*p["low"], *p["high"]) < 0:
        return None
    return pad, axes[0]


class ConcatOfPads(FusionPattern):
    """add of zero pads that tile one axis (each along it only, in turn, nothing left over)
    => concat of their inputs, each plus zero."""

    name = "concat-of-pads"

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: tape.AddOp, rewriter: PatternRewriter) -> None:
        pieces = [_piece(v) for v in _summed(op)]
        if any(p is None for p in pieces) or len({axis for _, axis in pieces}) != 1:
            return
        axis = pieces[0][1]
        pads = sorted((pad for pad, _ in pieces), key=lambda pad: pad.params["low"][axis])
        size = op.result.type.get_shape()[axis]
        at = 0
        for pad in pads:
            if pad.params["low"][axis] != at:
                return  # a gap or an overlap
            at += pad.input.type.get_shape()[axis]
        if at != size:
            return
        before: list[Operation] = []
        parts = []
        for pad in pads:
            t = pad.input.type
            zero = tape.ConstantOp.build(value=np.zeros(t.get_shape(), tape.dtype_of(t)))
            plus = tape.AddOp.build(pad.input, zero)
            before += [zero, plus]
            parts.append(plus.result)
        self.replace(rewriter, op, tape.ConcatOp.build(*parts, axis=axis), before)
