"""A compiled program's arguments: their names, shapes and dtypes, and the check every call
makes before any buffer reaches compiled code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from tapeml.dialects import tape
from tapeml.dialects.names import argument_fits, value_names


@dataclass
class Argument:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fits: np.dtype | None = None
    """For a Python int argument (a weak scalar) that meets narrower integers in the program:
    their dtype, which its value must fit in (tapeml.fits)."""


def signature(module: ModuleOp) -> tuple[str, list[Argument], list[Argument]]:
    """The name, inputs and outputs of the tape function of `module`: what a backend compiles
    (a traced Program's module, or one parsed from a file: its first defined function)."""
    f = next((op for op in module.ops if isinstance(op, func.FuncOp) and not op.is_declaration),
             None)
    if f is None:
        raise ValueError("the module defines no function to compile")
    block = f.body.block
    fits = argument_fits(f.arg_attrs, len(block.args))
    inputs = [Argument(n, a.type.get_shape(), tape.dtype_of(a.type), t and np.dtype(t))
              for n, a, t in zip(value_names(f.arg_attrs, list(block.args), "arg"), block.args,
                                 fits, strict=True)]
    results = list(block.last_op.operands)
    outputs = [Argument(n, r.type.get_shape(), tape.dtype_of(r.type)) for n, r in
               zip(value_names(f.res_attrs, results, "result"), results, strict=True)]
    return f.sym_name.data, inputs, outputs


def checked(value: Any, arg: Argument, name: str) -> np.ndarray:
    """`value` as an aligned C-contiguous array of `arg`'s shape and dtype, or a TypeError
    (not an array, or another dtype) or ValueError (another shape) naming the argument, what it
    must be and what it is. An argument is a numpy array or scalar of its dtype, or anything
    that makes one with `__array__` (a device array), copied first if it is a view, in Fortran
    order, misaligned or in the other byte order; or a Python number for a rank-0 one, as when
    tracing. Nothing else is converted: None, a string or a list would become an array of
    something else."""
    if (type(value) is np.ndarray and value.dtype == arg.dtype and value.shape == arg.shape
            and (flags := value.flags).c_contiguous and flags.aligned):
        return value if value.dtype != _BOOL else canonical_bools(value)  # the common case
    expected = f"{arg.dtype} array of shape {arg.shape}"
    if isinstance(value, np.ma.MaskedArray):  # its masked elements would be read as values
        raise TypeError(f"@{name}: argument `{arg.name}` must be a {expected}, got a masked "
                        "array (fill it: .filled())")
    if isinstance(value, np.ndarray | np.generic) or hasattr(value, "__array__"):
        array = np.asarray(value)  # an array, or one that converts itself (a device array)
    elif isinstance(value, bool | int | float):
        array = np.asarray(value, dtype=arg.dtype)
    else:
        kind = type(value)
        what = "None" if value is None else "a value of type " + (
            kind.__qualname__ if kind.__module__ == "builtins" else
            f"{kind.__module__}.{kind.__qualname__}")
        raise TypeError(f"@{name}: argument `{arg.name}` must be a {expected}, got {what}")
    got = f"got a {array.dtype} array of shape {array.shape}"
    if array.dtype.newbyteorder("=") != arg.dtype:
        raise TypeError(f"@{name}: argument `{arg.name}` must be {arg.dtype}, got {array.dtype} "
                        f"(expected a {expected}, {got})")
    if array.shape != arg.shape:
        raise ValueError(f"@{name}: argument `{arg.name}` must have shape {arg.shape}, got "
                         f"{array.shape} (expected a {expected}, {got})")
    if arg.fits is not None and not (info := np.iinfo(arg.fits)).min <= array <= info.max:
        raise OverflowError(f"@{name}: argument `{arg.name}`, the Python integer {int(array)}, "
                            f"does not fit in {arg.fits}, the dtype it meets")
    array = np.require(array, arg.dtype, ["C_CONTIGUOUS", "ALIGNED"])
    return array if array.dtype != _BOOL else canonical_bools(array)


_BOOL = np.dtype(np.bool_)


def canonical_bools(array: np.ndarray) -> np.ndarray:
    """A (C-contiguous) boolean array whose every byte is 0 or 1, as compiled code reads it
    (astype, sum and ~ read the byte as a number; a select tests its low bit): `array`, or
    where a byte is another non-zero value (numpy's True, made by a view of other bytes),
    `array != 0`. A small array's bytes are checked as bytes (0.2 us; numpy's max costs 1.5 us
    on any array)."""
    if array.size <= SMALL_BOOLS:
        if not array.tobytes().translate(None, b"\x00\x01"):
            return array
    elif array.view(np.uint8).max() <= 1:
        return array
    return array.view(np.uint8) != 0


SMALL_BOOLS = 4096
