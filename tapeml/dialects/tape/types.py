"""The tape dialect's types and the checks every shape rule is written with: the element types
(f32, f64, and i1 for comparisons) and their numpy dtypes, tensor types, and the verifier helpers
(`float_tensor`, `any_tensor`, `bool_tensor`, `same_type`, `same_element`, `check`, `check_ints`,
`window_count`) that raise a `ShapeError` naming the op."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import Float32Type, Float64Type, TensorType, f32, f64, i1
from xdsl.ir import Attribute

from tapeml.errors import ShapeError

__all__ = [
    "dtype_of",
    "element_type",
    "tensor_type",
    "window_count",
]


def element_type(dtype: Any) -> Float32Type | Float64Type:
    """The xDSL element type of a numpy dtype (float32 or float64 only)."""
    dt = np.dtype(dtype)
    if dt == np.float32:
        return f32
    if dt == np.float64:
        return f64
    raise ShapeError(f"tape tensors hold float32 or float64, not {dt}")


def dtype_of(t: TensorType) -> np.dtype:
    """The numpy dtype of a tensor type's element type."""
    el = t.get_element_type()
    if isinstance(el, Float32Type):
        return np.dtype(np.float32)
    if isinstance(el, Float64Type):
        return np.dtype(np.float64)
    if el == i1:
        return np.dtype(np.bool_)
    raise ShapeError(f"no numpy dtype for {t}")


def tensor_type(shape: Sequence[int], dtype: Any) -> TensorType:
    el = dtype if isinstance(dtype, Attribute) else element_type(dtype)
    return TensorType(el, [int(d) for d in shape])


def float_tensor(op: str, t: Attribute, role: str = "operand") -> TensorType:
    """`t` as a statically shaped f32/f64 tensor type, or a ShapeError naming `op`."""
    ok = (
        isinstance(t, TensorType)
        and isinstance(t.get_element_type(), Float32Type | Float64Type)
        and all(d >= 0 for d in t.get_shape())
    )
    if not ok:
        raise ShapeError(f"{op}: {role} must be a statically shaped tensor of f32 or f64, got {t}")
    return t


def any_tensor(op: str, t: Attribute, role: str = "operand") -> TensorType:
    """`t` as a statically shaped tensor of f32, f64 or i1 (what layout ops move around)."""
    ok = (
        isinstance(t, TensorType)
        and (isinstance(t.get_element_type(), Float32Type | Float64Type)
             or t.get_element_type() == i1)
        and all(d >= 0 for d in t.get_shape())
    )
    if not ok:
        raise ShapeError(f"{op}: {role} must be a statically shaped tensor of f32, f64 or i1, "
                         f"got {t}")
    return t


def bool_tensor(op: str, t: Attribute, role: str) -> TensorType:
    ok = isinstance(t, TensorType) and t.get_element_type() == i1
    if not ok or any(d < 0 for d in t.get_shape()):
        raise ShapeError(f"{op}: {role} must be a statically shaped tensor of i1, got {t}")
    return t


def same_type(op: str, types: Sequence[TensorType], rule: str) -> None:
    if any(t != types[0] for t in types):
        raise ShapeError(f"{op}: {rule}; got {', '.join(map(str, types))}")


def same_element(op: str, types: Sequence[TensorType]) -> None:
    if any(t.get_element_type() != types[0].get_element_type() for t in types):
        raise ShapeError(
            f"{op}: operands must share one element type (cast explicitly); "
            f"got {', '.join(map(str, types))}"
        )


def check(ok: bool, op: str, message: str) -> None:
    if not ok:
        raise ShapeError(f"{op}: {message}")


def check_ints(op: str, name: str, values: Sequence[int], length: int, minimum: int) -> None:
    check(len(values) == length, op, f"{name} needs {length} values, got {list(values)}")
    check(all(v >= minimum for v in values), op, f"{name} values must be >= {minimum}, "
          f"got {list(values)}")


def window_count(size: int, kernel: int, stride: int, dilation: int) -> int:
    """Windows of `kernel` taps `dilation` apart, `stride` apart, that fit in `size`."""
    span = dilation * (kernel - 1) + 1
    return (size - span) // stride + 1 if size >= span else 0
