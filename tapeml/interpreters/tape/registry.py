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


try:  # numpy's own error state, set as np.errstate(all="ignore") sets it, without its cost
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj

    _QUIET = _make_extobj(all="ignore")
except (ImportError, TypeError):  # a numpy without them: np.errstate, 0.6 us more per op
    _extobj_contextvar = None


def evaluate(op_type: type[TapeOp], *arrays: np.ndarray, **params: Any) -> np.ndarray:
    """Compute one op on arrays, under IEEE semantics (no numpy warnings for inf/nan)."""
    return ieee(op_type)(*arrays, **params)


_IEEE: dict[type, Callable[..., np.ndarray]] = {}
_NO_FLAG: set[Callable[..., np.ndarray]] = set()


def raises_no_flag(semantic: Semantics) -> Semantics:
    """Mark a semantics that raises no IEEE flag on any input (it compares and moves bits) and
    returns an ndarray at every rank: `ieee` gives it as it is, without numpy's error state."""
    _NO_FLAG.add(semantic)
    return semantic


def ieee(op_type: type[TapeOp]) -> Callable[..., np.ndarray]:
    """The op's numpy semantics under IEEE semantics, as `evaluate` computes it; for a caller
    that runs one op often (an eager op on small arrays costs little more than numpy's)."""
    found = _IEEE.get(op_type)
    if found is not None:
        return found
    semantic = SEMANTICS[op_type]
    if semantic in _NO_FLAG:
        found = semantic
    elif _extobj_contextvar is None:
        def found(*arrays: np.ndarray, **params: Any) -> np.ndarray:
            with np.errstate(all="ignore"):
                return np.asarray(semantic(*arrays, **params))  # rank 0 stays an array
    elif isinstance(semantic, np.ufunc) and semantic.nin == 2:  # the most frequent: no *args
        def found(x: np.ndarray, y: np.ndarray) -> np.ndarray:
            token = _extobj_contextvar.set(_QUIET)
            try:
                result = semantic(x, y)
            finally:
                _extobj_contextvar.reset(token)
            return result if type(result) is np.ndarray else np.asarray(result)
    elif isinstance(semantic, np.ufunc) and semantic.nin == 1:
        def found(x: np.ndarray) -> np.ndarray:
            token = _extobj_contextvar.set(_QUIET)
            try:
                result = semantic(x)
            finally:
                _extobj_contextvar.reset(token)
            return result if type(result) is np.ndarray else np.asarray(result)
    else:
        def found(*arrays: np.ndarray, **params: Any) -> np.ndarray:
            token = _extobj_contextvar.set(_QUIET)  # what np.errstate's __enter__ does
            try:
                return np.asarray(semantic(*arrays, **params))  # rank 0 stays an array
            finally:
                _extobj_contextvar.reset(token)
    _IEEE[op_type] = found
    return found


def is_ufunc(op_type: type[TapeOp]) -> bool:
    """The op's semantics is a numpy ufunc: it broadcasts as numpy does, and takes a Python
    float beside an array as numpy's weak scalar (cast to the array's dtype, NEP 50), so an
    eager caller may pass one as it is (where other semantics take operands of one shape)."""
    return isinstance(SEMANTICS[op_type], np.ufunc)
