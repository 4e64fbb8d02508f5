"""Pullbacks: for each differentiable tape op, the cotangents of its operands given the
cotangent of its result.

Each rule is written once against the ops API (`tapeml.tracing.ops`), so it computes on numpy
arrays eagerly and records tape ops under a trace: a gradient is more tape.

    rule(ct, *operands, result=result, **op.params) -> one cotangent (or None) per operand

None means "no cotangent" (an integer-valued or boolean path). Ops in NON_DIFFERENTIABLE have
no rule: their operands get no cotangent from them.

Ties: `maximum`/`minimum` give half the cotangent to each side where the operands are equal;
the `max` reduction and `maxpool2d` split it evenly among all the elements that attain the max.
Both are valid subgradients, and both keep the gradient's sum equal to the cotangent's.

One module per op family (those of `tapeml/dialects/tape/`), each registering its ops' rules
with `@pullback(Op)`:

    registry.py      PULLBACKS, pullback(), NON_DIFFERENTIABLE (cmp, constant)
    elementwise.py   arithmetic (ties of maximum, minimum), select, cast
    layout.py        broadcast, reshape, permute, pad, slice, unfold, fold, concat
    reductions.py    sum, max (even_split)
    normalization.py layer_norm (its backward op), layer_norm_backward (second order)
    indexing.py      take, scatter (set: the winning update's; max/min: even splits)
    scans.py         cumsum (argmax, argmin, iota: NON_DIFFERENTIABLE)
    contractions.py  matmul
    convolutions.py  conv2d, maxpool2d, avgpool2d and their backward ops
    fused.py         fused (each body op's own rule, in reverse)

This module imports them all, in that order: PULLBACKS keeps it.
"""

from __future__ import annotations

from tapeml.transforms.pullbacks.registry import NON_DIFFERENTIABLE, PULLBACKS, Rule, pullback

# The families in the old file's order, which PULLBACKS keeps.
# isort: off
from tapeml.transforms.pullbacks import elementwise  # noqa: F401
from tapeml.transforms.pullbacks import layout  # noqa: F401
from tapeml.transforms.pullbacks import reductions  # noqa: F401
from tapeml.transforms.pullbacks import contractions  # noqa: F401
from tapeml.transforms.pullbacks import convolutions  # noqa: F401
from tapeml.transforms.pullbacks import fused  # noqa: F401
from tapeml.transforms.pullbacks import indexing  # noqa: F401
from tapeml.transforms.pullbacks import scans  # noqa: F401
from tapeml.transforms.pullbacks import normalization  # noqa: F401
# isort: on

__all__ = ["NON_DIFFERENTIABLE", "PULLBACKS", "Rule", "pullback"]
