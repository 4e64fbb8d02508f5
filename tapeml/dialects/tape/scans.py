"""The ops along one axis that neither map elements nor fold them to one value: `tape.argmax`
and `tape.argmin` (the index of the largest or smallest element, i64), `tape.cumsum` (running
sums) and `tape.iota` (each element's index along an axis, no operands)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import TensorType, i64
from xdsl.ir import Attribute
from xdsl.irdl import irdl_op_definition, operand_def, result_def, traits_def
from xdsl.printer import Printer
from xdsl.traits import Pure

from tapeml.dialects.base import Flag, Int, TapeOp
from tapeml.dialects.tape.types import (
    ANY,
    NUMBERS,
    check,
    dtype_of,
    tensor_of,
    tensor_type,
)

__all__ = [
    "ArgMaxOp",
    "ArgMinOp",
    "CumsumOp",
    "IotaOp",
    "SCANS",
]


def _normal_axis(op: str, axis: int, rank: int, t: Any) -> int:
    check(-rank <= axis < rank, op, lambda: f"axis {axis} is out of range for {t}")
    return axis % rank


class _AlongAxis(TapeOp):
    """An op on one tensor along one of its axes (a negative axis counts from the end)."""

    @classmethod
    def normalize(cls, operand_types: Sequence[Attribute], params: dict[str, Any]) -> dict:
        t = operand_types[0] if operand_types else None
        if not isinstance(t, TensorType):
            return params
        return params | {"axis": _normal_axis(cls.name, params["axis"], t.get_num_dims(), t)}


class _Arg(_AlongAxis):
    input = operand_def(TensorType)
    result = result_def(TensorType)
    axis = Int.prop()
    keepdims = Flag.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (Int("axis"), Flag("keepdims"))

    @classmethod
    def infer(cls, input: Attribute, *, axis: int, keepdims: bool) -> Attribute:
        t = tensor_of(cls.name, input, ANY)
        shape = t.get_shape()
        check(0 <= axis < len(shape), cls.name, lambda: f"axis {axis} must be a dim of {t}")
        check(shape[axis] > 0, cls.name,
              lambda: f"cannot take the {cls.name.removeprefix('tape.')} over the empty axis "
              f"{axis} of {t}")
        out = [1 if i == axis else d for i, d in enumerate(shape)] if keepdims else \
            [d for i, d in enumerate(shape) if i != axis]
        return tensor_type(out, i64)


@irdl_op_definition
class ArgMaxOp(_Arg):
    """The index (i64) of the largest element along `axis`, as numpy's `argmax`: the first on
    ties (-0.0 ties +0.0), and the first NaN wherever there is one."""

    name = "tape.argmax"


@irdl_op_definition
class ArgMinOp(_Arg):
    """The index (i64) of the smallest element along `axis`, as numpy's `argmin`: the first on
    ties, and the first NaN wherever there is one."""

    name = "tape.argmin"


@irdl_op_definition
class CumsumOp(_AlongAxis):
    """Running sums along `axis` in the input's type, as numpy's `cumsum(x, axis, dtype=x.dtype)`
    (integers wrap; floats add in order, one after another); `reverse` sums from the end:
    flip(cumsum(flip(x)))."""

    name = "tape.cumsum"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    axis = Int.prop()
    reverse = Flag.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (Int("axis"), Flag("reverse"))

    @classmethod
    def infer(cls, input: Attribute, *, axis: int, reverse: bool) -> Attribute:
        t = tensor_of(cls.name, input, NUMBERS)
        check(0 <= axis < t.get_num_dims(), cls.name, lambda: f"axis {axis} must be a dim of {t}")
        return t


@irdl_op_definition
class IotaOp(TapeOp):
    """Each element's index along `axis`, in the result's type:
    `tape.iota axis = 1 : tensor<2x3xi64>` is [[0, 1, 2], [0, 1, 2]]."""

    name = "tape.iota"
    result = result_def(TensorType)
    axis = Int.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (Int("axis"),)
    DERIVED: ClassVar = ("shape", "dtype")

    @classmethod
    def normalize(cls, operand_types: Sequence[Attribute], params: dict[str, Any]) -> dict:
        shape = tuple(params["shape"])
        return params | {"shape": shape, "axis": _normal_axis(
            cls.name, params["axis"], len(shape), f"shape {list(shape)}")}

    @classmethod
    def infer(cls, *, shape: Sequence[int], dtype: Any, axis: int) -> Attribute:
        check(all(isinstance(d, int) and d >= 0 for d in shape), cls.name,
              lambda: f"shape {list(shape)} must be static, non-negative dims")
        t = tensor_type(shape, dtype)
        tensor_of(cls.name, t, NUMBERS, "result")
        check(0 <= axis < len(shape), cls.name, lambda: f"axis {axis} must be a dim of {t}")
        return t

    def derived_params(self) -> dict[str, Any]:
        return {"shape": tuple(self.result.type.get_shape()), "dtype": dtype_of(self.result.type)}

    def verify_(self) -> None:
        tensor_of(self.name, self.result.type, NUMBERS, "result")
        super().verify_()

    def print(self, printer: Printer) -> None:
        Int("axis").print(printer, self.properties.get("axis"))
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)


SCANS = (ArgMaxOp, ArgMinOp, CumsumOp, IotaOp)
