"""The numpy semantics of the contraction, matmul."""

from __future__ import annotations

import numpy as np

from tapeml.dialects import tape
from tapeml.interpreters.tape.registry import semantics


@semantics(tape.MatmulOp)
def matmul(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    return np.matmul(lhs, rhs)
