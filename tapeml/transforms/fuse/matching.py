"""What tape-fuse's patterns are built on: `FusionPattern`, a catalog entry (it replaces an
idiom's root and counts what fired, for the report); the producer-chain helpers (`producer`,
`single_use`, `through_reshapes`); and the windows an unfold reads through the pad feeding it
(`Windows`, `match_windows`, `pool_windows`), which the forward and backward idioms share.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects.builtin import Float32Type, Float64Type
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from tapeml.dialects import tape


def producer(value: SSAValue, op_type: type[Operation]) -> Any:
    """The op of type `op_type` that defines `value`, or None."""
    owner = value.owner
    return owner if isinstance(owner, op_type) else None


def constant_value(value: SSAValue) -> np.ndarray | None:
    """The value of the tape.constant that defines `value`, directly or through a
    tape.broadcast (a traced `x / 4.0` is a rank-0 constant broadcast), or None."""
    spread = producer(value, tape.BroadcastOp)
    constant = producer(spread.input if spread else value, tape.ConstantOp)
    return None if constant is None else constant.params["value"]


def single_use(*values: SSAValue) -> bool:
    return all(v.has_one_use() for v in values)


def through_reshapes(value: SSAValue) -> SSAValue:
    """`value` with any chain of reshapes feeding it skipped."""
    while (op := producer(value, tape.ReshapeOp)) is not None:
        value = op.input
    return value


@dataclass
class Windows:
    """An unfold over the two spatial dims of an NCHW tensor, with the pad feeding it."""

    x: SSAValue  # the unpadded input
    unfold: tape.UnfoldOp
    pad: tape.PadOp | None
    padding: tuple[int, int, int, int]  # top, left, bottom, right

    @property
    def params(self) -> dict[str, Any]:
        return self.unfold.params

    def ops(self) -> list[Operation]:
        return [self.unfold, *([self.pad] if self.pad else [])]


def match_windows(value: SSAValue, pad_value: float) -> Windows | None:
    """`value` = unfold(pad(x, pad_value) or x) over (H, W) of a rank-4 x, padding H and W only."""
    unfold = producer(value, tape.UnfoldOp)
    if unfold is None or len(unfold.params["kernel"]) != 2:
        return None
    source = unfold.input
    if len(source.type.get_shape()) != 4:
        return None
    pad = producer(source, tape.PadOp)
    if pad is None:
        return Windows(source, unfold, None, (0, 0, 0, 0))
    low, high, value_ = pad.params["low"], pad.params["high"], pad.params["value"]
    same_value = value_ == pad_value or (np.isnan(value_) and np.isnan(pad_value))
    if low[:2] != (0, 0) or high[:2] != (0, 0) or min(*low, *high) < 0 or not same_value:
        return None
    return Windows(pad.input, unfold, pad, (low[2], low[3], high[2], high[3]))


def pool_windows(reduction: tape.SumOp | tape.MaxOp, pad_value: float) -> Windows | None:
    """`reduction` = a sum or max over the window axes (4, 5) of unfold(pad(x)), without
    keepdims or dilation: its windows."""
    p = reduction.params
    if p["axes"] != (4, 5) or p["keepdims"]:
        return None
    windows = match_windows(reduction.input, pad_value)
    if windows is None or windows.params["dilation"] != (1, 1):
        return None
    return windows


def of_floats(op: Operation) -> bool:
    """`op`'s result holds floats: the ops an idiom is raised to (conv2d, the pools and their
    gradients) take f32 and f64 only, so an idiom of integers or booleans (unfold and matmul
    take them too) stays as it is."""
    return isinstance(op.results[0].type.get_element_type(), Float32Type | Float64Type)


class FusionPattern(RewritePattern):
    """A catalog entry: `name`, and `fired` counts (shared with the pass for its report)."""

    name: str = ""

    def __init__(self, fired: Counter[str]) -> None:
        self.fired = fired

    def replace(self, rewriter: PatternRewriter, root: Operation, new: Operation,
                before: Sequence[Operation] = ()) -> None:
        """Replace `root` by `new` (with the ops `new` needs first, if any)."""
        for op in (*before, new):
            op.location = root.location
        rewriter.replace(root, [*before, new], new.results)
        self.fired[self.name] += 1

    def replace_if_typed(self, rewriter: PatternRewriter, root: Operation, new: Operation,
                         before: Sequence[Operation] = ()) -> None:
        """`replace`, if `new` gives `root`'s result type; otherwise decline, erasing the
        unattached ops built for it (their operand uses), so the IR is as it was found."""
        if new.results[0].type == root.results[0].type:
            self.replace(rewriter, root, new, before)
            return
        for built in (new, *reversed(before)):
            built.erase()
