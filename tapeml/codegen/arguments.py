"""A compiled program's arguments: their names, shapes and dtypes, and the check every call
makes before any buffer reaches compiled code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tapeml.dialects import tape
from tapeml.frontend.program import value_names


@dataclass
class Argument:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype


def arguments(module: ModuleOp) -> tuple[list[Argument], list[Argument]]:
    """The inputs and outputs of the (tape) function of `module`."""
    f = next(op for op in module.ops if op.name == "func.func")
    block = f.body.block
    inputs = [Argument(n, a.type.get_shape(), tape.dtype_of(a.type)) for n, a in
              zip(value_names(f.arg_attrs, list(block.args), "arg"), block.args, strict=True)]
    results = list(block.last_op.operands)
    outputs = [Argument(n, r.type.get_shape(), tape.dtype_of(r.type)) for n, r in
               zip(value_names(f.res_attrs, results, "result"), results, strict=True)]
    return inputs, outputs


def checked(value: Any, arg: Argument, name: str) -> np.ndarray:
    """`value` as a C-contiguous array of `arg`'s shape and dtype, or a clear error."""
    if (type(value) is np.ndarray and value.dtype == arg.dtype and value.shape == arg.shape
            and value.flags.c_contiguous):
        return value  # the common case, checked in one line
    typed = isinstance(value, np.ndarray | np.generic)
    array = np.asarray(value) if typed else np.asarray(value, dtype=arg.dtype)
    if array.dtype != arg.dtype:
        raise TypeError(f"@{name}: argument `{arg.name}` must be {arg.dtype}, got {array.dtype}")
    if array.shape != arg.shape:
        raise ValueError(f"@{name}: argument `{arg.name}` must have shape {arg.shape}, got "
                         f"{array.shape}")
    return np.ascontiguousarray(array)
