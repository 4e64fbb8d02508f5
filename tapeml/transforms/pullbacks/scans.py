"""The pullbacks of the ops along one axis: cumsum's is the cumsum of the cotangent the other
way. argmax, argmin and iota have none (NON_DIFFERENTIABLE: integer results, or no operand)."""

from __future__ import annotations

import numpy as np

from tapeml.dialects import tape
from tapeml.tracing.trace import bind
from tapeml.transforms.pullbacks.registry import pullback


@pullback(tape.CumsumOp)
def _cumsum(ct, a, *, result, axis, reverse):
    # y_j = sum of x_i for i <= j (i >= j reversed): x_i's cotangent sums ct_j over j >= i
    if np.dtype(a.dtype).kind != "f":
        return (None,)  # integers carry no gradient
    return (bind(tape.CumsumOp, ct, axis=axis, reverse=not reverse),)
