"""The tape dialect's types and the checks every shape rule is written with: the element types
(i1, i32, i64, f32, f64) and their numpy dtypes, tensor types, and the verifier helpers
(`tensor_of` and its shorthands `float_tensor`, `any_tensor`, `bool_tensor`; `same_type`,
`same_element`, `check`, `check_ints`, `window_count`) that raise a `ShapeError` naming the
op."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import MemRefType, TensorType, f32, f64, i1, i32, i64
from xdsl.ir import Attribute

from tapeml.errors import ShapeError

__all__ = [
    "ELEMENT_TYPES",
    "dtype_of",
    "element_type",
    "tensor_type",
    "window_count",
]


ELEMENT_TYPES: dict[np.dtype, Attribute] = {
    np.dtype(np.bool_): i1, np.dtype(np.int32): i32, np.dtype(np.int64): i64,
    np.dtype(np.float32): f32, np.dtype(np.float64): f64,
}
"""The element types a tape tensor holds, by numpy dtype. Integers are signless in the IR and
signed in meaning (numpy's int32 and int64); i1 is numpy's bool."""
_DTYPES = {t: dt for dt, t in ELEMENT_TYPES.items()}

BOOL, INT, FLOAT = "bool", "int", "float"
"""The kinds of element type an op may accept (its `ELEMENTS`)."""
NUMBERS = frozenset({INT, FLOAT})
INTEGERS = frozenset({BOOL, INT})
INTS = frozenset({INT})
FLOATS = frozenset({FLOAT})
ANY = frozenset({BOOL, INT, FLOAT})
_NAMES = {BOOL: ["i1"], INT: ["i32", "i64"], FLOAT: ["f32", "f64"]}


def element_type(dtype: Any) -> Attribute:
    """The xDSL element type of a numpy dtype (bool, int32, int64, float32 or float64)."""
    dt = np.dtype(dtype)
    if dt not in ELEMENT_TYPES:
        raise ShapeError(f"tape tensors hold bool, int32, int64, float32 or float64, not {dt}")
    return ELEMENT_TYPES[dt]


def dtype_of(t: TensorType | MemRefType) -> np.dtype:
    """The numpy dtype of a tensor's (or a buffer's) element type."""
    el = t.get_element_type()
    if el not in _DTYPES:
        raise ShapeError(f"no numpy dtype for {t}")
    return _DTYPES[el]


def kind_of(element: Attribute) -> str | None:
    """BOOL, INT or FLOAT for a tape element type; None for any other type."""
    dt = _DTYPES.get(element)
    return None if dt is None else BOOL if dt == np.bool_ else INT if dt.kind == "i" else FLOAT


def tensor_type(shape: Sequence[int], dtype: Any) -> TensorType:
    el = dtype if isinstance(dtype, Attribute) else element_type(dtype)
    return _tensor_type(el, tuple(int(d) for d in shape))


@functools.lru_cache(maxsize=4096)
def _tensor_type(element: Attribute, shape: tuple[int, ...]) -> TensorType:
    """One TensorType per element type and shape: attributes are immutable, and building one
    (xDSL verifies it) was most of an eager op's time."""
    return TensorType(element, list(shape))


_CHECKED: dict[tuple[int, frozenset[str]], Attribute] = {}
"""The types `tensor_of` found statically shaped tensors of the kinds, by identity (each kept
here, so that its id is not another's)."""
_CHECKED_MOST = 1 << 14


def tensor_of(op: str, t: Attribute, kinds: frozenset[str], role: str = "operand"
              ) -> TensorType:
    """`t` as a statically shaped tensor whose element type is of one of `kinds`, or a
    ShapeError naming `op`, the role and the element types it takes. (A type found so once
    is remembered by identity, with the kinds: tracing checks every operand of every op, a
    fifth of the GPT step's trace when each check read the shape again.)"""
    if _CHECKED.get((id(t), kinds)) is t:
        return t  # type: ignore[return-value]  (checked before)
    ok = (isinstance(t, TensorType) and kind_of(t.get_element_type()) in kinds
          and all(d >= 0 for d in t.get_shape()))
    if ok:
        if len(_CHECKED) >= _CHECKED_MOST:
            _CHECKED.clear()
        _CHECKED[(id(t), kinds)] = t
    else:
        names = [name for k in (BOOL, INT, FLOAT) if k in kinds for name in _NAMES[k]]
        allowed = " or ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " or " + \
            names[-1]
        raise ShapeError(f"{op}: {role} must be a statically shaped tensor of {allowed}, "
                         f"got {t}")
    return t


def float_tensor(op: str, t: Attribute, role: str = "operand") -> TensorType:
    """`t` as a statically shaped f32/f64 tensor type, or a ShapeError naming `op`."""
    return tensor_of(op, t, FLOATS, role)


def any_tensor(op: str, t: Attribute, role: str = "operand") -> TensorType:
    """`t` as a statically shaped tensor of any tape element type (what layout ops move)."""
    return tensor_of(op, t, ANY, role)


def bool_tensor(op: str, t: Attribute, role: str) -> TensorType:
    return tensor_of(op, t, frozenset({BOOL}), role)


def same_type(op: str, types: Sequence[TensorType], rule: str) -> None:
    if any(t != types[0] for t in types):
        raise ShapeError(f"{op}: {rule}; got {', '.join(map(str, types))}")


def same_element(op: str, types: Sequence[TensorType]) -> None:
    if any(t.get_element_type() != types[0].get_element_type() for t in types):
        raise ShapeError(
            f"{op}: operands must share one element type (cast explicitly); "
            f"got {', '.join(map(str, types))}"
        )


def check(ok: bool, op: str, message: str | Callable[[], str]) -> None:
    """A ShapeError naming `op` unless `ok`. A message that prints types is given as a function,
    made only on failure: printing a type costs more than the rule it reports (tracing the
    4-layer GPT step printed 4,700 of them, 1.0 s of its 3.5 s)."""
    if not ok:
        raise ShapeError(f"{op}: {message if isinstance(message, str) else message()}")


def check_ints(op: str, name: str, values: Sequence[int], length: int, minimum: int) -> None:
    check(len(values) == length, op, lambda: f"{name} needs {length} values, got {list(values)}")
    check(all(v >= minimum for v in values), op, lambda: f"{name} values must be >= {minimum}, "
          f"got {list(values)}")


def window_count(size: int, kernel: int, stride: int, dilation: int) -> int:
    """Windows of `kernel` taps `dilation` apart, `stride` apart, that fit in `size`."""
    span = dilation * (kernel - 1) + 1
    return (size - span) // stride + 1 if size >= span else 0
