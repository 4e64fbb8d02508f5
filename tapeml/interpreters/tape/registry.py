"""The registry of the tape ops' numpy semantics: `SEMANTICS[Op]`, filled by each family's module
with `@semantics(Op)`, and `evaluate`, which runs one op on arrays under IEEE semantics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tapeml.dialects.base import TapeOp
from tapeml.dialects.registry import OpTable

Semantics = Callable[..., np.ndarray]
SEMANTICS: OpTable[Semantics] = OpTable("numpy semantics")
semantics = SEMANTICS.register


def evaluate(op_type: type[TapeOp], *arrays: np.ndarray, **params: Any) -> np.ndarray:
    """Compute one op on arrays, under IEEE semantics (no numpy warnings for inf/nan)."""
    with np.errstate(all="ignore"):
        return np.asarray(SEMANTICS[op_type](*arrays, **params))  # rank 0 stays an array
