"""The registry of the pullbacks: `PULLBACKS[Op]`, filled by each family's module with
`@pullback(Op)`, and NON_DIFFERENTIABLE, the ops that have no rule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tapeml.dialects import tape
from tapeml.dialects.base import TapeOp
from tapeml.dialects.registry import OpTable

Rule = Callable[..., tuple[Any, ...]]
PULLBACKS: OpTable[Rule] = OpTable("pullback")
pullback = PULLBACKS.register
NON_DIFFERENTIABLE: frozenset[type[TapeOp]] = frozenset(
    {tape.CmpOp, tape.ConstantOp, *tape.INTEGER_BINARY, *tape.INTEGER_UNARY,
     tape.SignOp, tape.FloorOp, tape.CeilOp, tape.RoundOp,
     tape.ArgMaxOp, tape.ArgMinOp, tape.IotaOp, tape.StopGradientOp})
"""Ops with no rule: comparisons, constants, the ops of integers (which carry no gradient),
and the piecewise constant sign, floor, ceil and round (their derivative is 0 wherever it
exists: an argument reached only through them gets a zero gradient, as JAX gives); argmax and
argmin (integer results) and iota (no operands); and stop_gradient, whose whole point is
that its operand gets no cotangent from it."""
