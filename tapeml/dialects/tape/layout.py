"""The layout tape ops, which move elements without computing on them: broadcast, reshape,
permute, pad, slice, unfold and fold (sliding windows and their adjoint), and concat. Broadcast,
reshape and permute have canonicalization patterns (`canonicalize.py`, imported lazily)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.interfaces import HasCanonicalizationPatternsInterface
from xdsl.ir import Attribute
from xdsl.irdl import irdl_op_definition, operand_def, result_def, traits_def, var_operand_def
from xdsl.traits import Pure

from tapeml.dialects.base import Float, Int, IntList, TapeOp
from tapeml.dialects.tape.types import (
    any_tensor,
    check,
    check_ints,
    dtype_of,
    float_tensor,
    same_element,
    tensor_type,
    window_count,
)

__all__ = [
    "BroadcastOp",
    "ConcatOp",
    "FoldOp",
    "PadOp",
    "PermuteOp",
    "ReshapeOp",
    "SliceOp",
    "UnfoldOp",
]


@irdl_op_definition
class BroadcastOp(TapeOp, HasCanonicalizationPatternsInterface):
    """Numpy broadcasting to the result shape: trailing dims align, each is equal or 1."""

    name = "tape.broadcast"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    DERIVED: ClassVar = ("shape",)

    @classmethod
    def get_canonicalization_patterns(cls) -> tuple:
        from tapeml.dialects.tape.canonicalize import LAYOUT_PATTERNS

        return LAYOUT_PATTERNS

    @classmethod
    def infer(cls, input: Attribute, *, shape: Sequence[int]) -> Attribute:
        t = any_tensor(cls.name, input)
        src, dst = t.get_shape(), tuple(shape)
        ok = len(src) <= len(dst) and all(
            s in (1, d) for s, d in zip(src[::-1], dst[::-1], strict=False)
        )
        check(ok and all(d >= 0 for d in dst), cls.name,
              lambda: f"cannot broadcast {t} to shape {list(dst)} (trailing dims must be equal "
              "or 1)")
        return tensor_type(dst, t.get_element_type())

    def derived_params(self) -> dict[str, Any]:
        return {"shape": self.result.type.get_shape()}


@irdl_op_definition
class ReshapeOp(TapeOp, HasCanonicalizationPatternsInterface):
    """Row-major reshape to the result shape (same number of elements)."""

    name = "tape.reshape"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    DERIVED: ClassVar = ("shape",)

    @classmethod
    def get_canonicalization_patterns(cls) -> tuple:
        from tapeml.dialects.tape.canonicalize import LAYOUT_PATTERNS

        return LAYOUT_PATTERNS

    @classmethod
    def normalize(cls, operand_types: Sequence[Attribute], params: dict[str, Any]) -> dict:
        shape = list(params["shape"])
        if shape.count(-1) == 1 and isinstance(operand_types[0], TensorType):
            known = math.prod(d for d in shape if d != -1)
            size = math.prod(operand_types[0].get_shape())
            if known and size % known == 0:
                shape[shape.index(-1)] = size // known
        return params | {"shape": tuple(shape)}

    @classmethod
    def infer(cls, input: Attribute, *, shape: Sequence[int]) -> Attribute:
        t = any_tensor(cls.name, input)
        check(all(d >= 0 for d in shape) and math.prod(shape) == math.prod(t.get_shape()),
              cls.name, lambda: f"cannot reshape {t} ({math.prod(t.get_shape())} elements) "
              f"to shape {list(shape)}")
        return tensor_type(shape, t.get_element_type())

    def derived_params(self) -> dict[str, Any]:
        return {"shape": self.result.type.get_shape()}


@irdl_op_definition
class PermuteOp(TapeOp, HasCanonicalizationPatternsInterface):
    """Transpose: result dim i is input dim perm[i]."""

    name = "tape.permute"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    perm = IntList.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("perm"),)

    @classmethod
    def get_canonicalization_patterns(cls) -> tuple:
        from tapeml.dialects.tape.canonicalize import LAYOUT_PATTERNS

        return LAYOUT_PATTERNS

    @classmethod
    def normalize(cls, operand_types: Sequence[Attribute], params: dict[str, Any]) -> dict:
        t, perm = operand_types[0], tuple(params["perm"])
        if isinstance(t, TensorType):
            rank = t.get_num_dims()
            perm = tuple(p + rank if -rank <= p < 0 else p for p in perm)
        return params | {"perm": perm}

    @classmethod
    def infer(cls, input: Attribute, *, perm: Sequence[int]) -> Attribute:
        t = any_tensor(cls.name, input)
        shape = t.get_shape()
        check(sorted(perm) == list(range(len(shape))), cls.name,
              lambda: f"perm {list(perm)} is not a permutation of the {len(shape)} dims of {t}")
        return tensor_type([shape[p] for p in perm], t.get_element_type())


@irdl_op_definition
class PadOp(TapeOp):
    """Pad each dim with `low` values before and `high` after, all equal to `value` (of the
    element type: an integer's a whole number in its range, a boolean's 0 or 1). Negative
    amounts crop instead (at most the whole dim between them)."""

    name = "tape.pad"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    low = IntList.prop()
    high = IntList.prop()
    value = Float.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("low"), IntList("high"), Float("value"))

    @classmethod
    def infer(cls, input: Attribute, *, low: Sequence[int], high: Sequence[int],
              value: float) -> Attribute:
        t = any_tensor(cls.name, input)
        dtype = dtype_of(t)
        if dtype.kind != "f":
            info = (0, 1) if dtype == np.bool_ else (np.iinfo(dtype).min, np.iinfo(dtype).max)
            check(float(value).is_integer() and info[0] <= value <= info[1], cls.name,
                  lambda: f"value {value} is not a {dtype} value, for {t}")
        shape = t.get_shape()
        check_ints(cls.name, "low", low, len(shape), -(2**62))
        check_ints(cls.name, "high", high, len(shape), -(2**62))
        for d, lo, hi in zip(shape, low, high, strict=True):
            check(max(0, -lo) + max(0, -hi) <= d, cls.name,
                  lambda: f"negative padding low={list(low)} high={list(high)} crops more "
                  f"than {t} has")
        return tensor_type([lo + d + hi for d, lo, hi in zip(shape, low, high, strict=True)],
                           t.get_element_type())


@irdl_op_definition
class SliceOp(TapeOp):
    """Elements start, start+step, ... < stop of each dim (0 <= start <= stop <= dim, step >= 1)."""

    name = "tape.slice"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    start = IntList.prop()
    stop = IntList.prop()
    step = IntList.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("start"), IntList("stop"), IntList("step"))

    @classmethod
    def infer(cls, input: Attribute, *, start: Sequence[int], stop: Sequence[int],
              step: Sequence[int]) -> Attribute:
        t = any_tensor(cls.name, input)
        shape = t.get_shape()
        check_ints(cls.name, "start", start, len(shape), 0)
        check_ints(cls.name, "stop", stop, len(shape), 0)
        check_ints(cls.name, "step", step, len(shape), 1)
        for d, a, b in zip(shape, start, stop, strict=True):
            check(a <= b <= d, cls.name, lambda: f"start {list(start)} and stop {list(stop)} must "
                  f"satisfy 0 <= start <= stop <= dim for {t}")
        out = [-(-(b - a) // s) for a, b, s in zip(start, stop, step, strict=True)]
        return tensor_type(out, t.get_element_type())


class _Windows(TapeOp):
    """Shared by unfold and fold: sliding windows over the trailing len(kernel) dims."""

    @classmethod
    def _windows(cls, spatial: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                 dilation: Sequence[int], where: TensorType) -> list[int]:
        k = len(kernel)
        check(k >= 1, cls.name, "kernel must have at least one dim")
        check_ints(cls.name, "kernel", kernel, k, 1)
        check_ints(cls.name, "stride", stride, k, 1)
        check_ints(cls.name, "dilation", dilation, k, 1)
        out = [window_count(*a) for a in zip(spatial, kernel, stride, dilation, strict=True)]
        check(all(o >= 1 for o in out), cls.name,
              lambda: f"kernel {list(kernel)} with dilation {list(dilation)} does not fit in the "
              f"spatial dims {list(spatial)} of {where}")
        return out


@irdl_op_definition
class UnfoldOp(_Windows):
    """Sliding windows (im2col's core): (*batch, *spatial) -> (*batch, *windows, *kernel),
    windows over the trailing len(kernel) dims, `stride` apart, taps `dilation` apart."""

    name = "tape.unfold"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kernel = IntList.prop()
    stride = IntList.prop()
    dilation = IntList.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("kernel"), IntList("stride"), IntList("dilation"))

    @classmethod
    def infer(cls, input: Attribute, *, kernel: Sequence[int], stride: Sequence[int],
              dilation: Sequence[int]) -> Attribute:
        t = any_tensor(cls.name, input)
        shape, k = t.get_shape(), len(kernel)
        check(k >= 1, cls.name, "kernel must have at least one dim")
        check(k <= len(shape), cls.name, lambda: f"kernel {list(kernel)} has more dims than {t}")
        batch, spatial = shape[: len(shape) - k], shape[len(shape) - k:]
        out = cls._windows(spatial, kernel, stride, dilation, t)
        return tensor_type([*batch, *out, *kernel], t.get_element_type())


@irdl_op_definition
class FoldOp(_Windows):
    """The adjoint of unfold: (*batch, *windows, *kernel) -> (*batch, *spatial), summing every
    window's taps back onto the positions they were read from."""

    name = "tape.fold"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kernel = IntList.prop()
    stride = IntList.prop()
    dilation = IntList.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("kernel"), IntList("stride"), IntList("dilation"))
    DERIVED: ClassVar = ("spatial",)

    @classmethod
    def infer(cls, input: Attribute, *, kernel: Sequence[int], stride: Sequence[int],
              dilation: Sequence[int], spatial: Sequence[int]) -> Attribute:
        t = float_tensor(cls.name, input)
        shape, k = t.get_shape(), len(kernel)
        check(k >= 1 and 2 * k <= len(shape), cls.name,
              lambda: f"{t} needs window and kernel dims for kernel {list(kernel)}")
        check(len(spatial) == k, cls.name, lambda: f"spatial {list(spatial)} needs {k} dims")
        out = cls._windows(spatial, kernel, stride, dilation, t)
        batch = shape[: len(shape) - 2 * k]
        expected = [*batch, *out, *kernel]
        check(list(shape) == expected, cls.name,
              lambda: f"input {t} must have shape {expected} to fold onto spatial dims "
              f"{list(spatial)}")
        return tensor_type([*batch, *spatial], t.get_element_type())

    def derived_params(self) -> dict[str, Any]:
        k = len(self.CLAUSES[0].to_python(self.kernel))
        return {"spatial": self.result.type.get_shape()[-k:]}


@irdl_op_definition
class ConcatOp(TapeOp):
    """Join tensors along `axis`; every other dim must agree."""

    name = "tape.concat"
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    axis = Int.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (Int("axis"),)

    @classmethod
    def normalize(cls, operand_types: Sequence[Attribute], params: dict[str, Any]) -> dict:
        axis = params["axis"]
        # (an axis out of range stays as given: the shape rule names it)
        if operand_types and isinstance(operand_types[0], TensorType) and \
                -operand_types[0].get_num_dims() <= axis < 0:
            axis += operand_types[0].get_num_dims()
        return params | {"axis": axis}

    @classmethod
    def infer(cls, *inputs: Attribute, axis: int) -> Attribute:
        check(len(inputs) >= 1, cls.name, "needs at least one operand")
        types = [any_tensor(cls.name, t) for t in inputs]
        same_element(cls.name, types)
        rank = types[0].get_num_dims()
        check(0 <= axis < rank, cls.name, lambda: f"axis {axis} is out of range for {types[0]}")
        for t in types:
            shape = list(t.get_shape())
            ok = len(shape) == rank and all(
                a == b
                for i, (a, b) in enumerate(zip(shape, types[0].get_shape(), strict=True))
                if i != axis
            )
            check(ok, cls.name, lambda: f"operands must agree on every dim but axis {axis}; "
                  f"got {', '.join(map(str, types))}")
        shape = list(types[0].get_shape())
        shape[axis] = sum(t.get_shape()[axis] for t in types)
        return tensor_type(shape, types[0].get_element_type())
