"""The reductions over axes: `tape.sum` and `tape.max`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute
from xdsl.irdl import irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import Pure

from tapeml.dialects.base import Flag, IntList, TapeOp
from tapeml.dialects.tape.types import NUMBERS, check, tensor_of, tensor_type

__all__ = [
    "MaxOp",
    "SumOp",
]


class _Reduce(TapeOp):
    input = operand_def(TensorType)
    result = result_def(TensorType)
    axes = IntList.prop()
    keepdims = Flag.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("axes"), Flag("keepdims"))

    @classmethod
    def normalize(cls, operand_types: Sequence[Attribute], params: dict[str, Any]) -> dict:
        t = operand_types[0]
        if not isinstance(t, TensorType):
            return params
        rank = t.get_num_dims()
        axes = params["axes"]
        axes = [axes] if isinstance(axes, int) else list(axes)
        for a in axes:
            check(-rank <= a < rank, cls.name, lambda a=a: f"axis {a} is out of range for {t}")
        normal = sorted(a % rank for a in axes)
        check(len(set(normal)) == len(normal), cls.name, lambda: f"axes {axes} repeat an axis")
        return params | {"axes": tuple(normal)}

    @classmethod
    def infer(cls, input: Attribute, *, axes: Sequence[int], keepdims: bool) -> Attribute:
        t = tensor_of(cls.name, input, NUMBERS)
        shape = t.get_shape()
        check(list(axes) == sorted(set(axes)) and all(0 <= a < len(shape) for a in axes),
              cls.name,
              lambda: f"axes {list(axes)} must be distinct dims of {t}, in increasing order")
        if keepdims:
            out = [1 if i in axes else d for i, d in enumerate(shape)]
        else:
            out = [d for i, d in enumerate(shape) if i not in axes]
        return tensor_type(out, t.get_element_type())


@irdl_op_definition
class SumOp(_Reduce):
    name = "tape.sum"


@irdl_op_definition
class MaxOp(_Reduce):
    """The largest element over `axes` (NaN if any is NaN); reduces, unlike `tape.maximum`."""

    name = "tape.max"

    @classmethod
    def infer(cls, input: Attribute, *, axes: Sequence[int], keepdims: bool) -> Attribute:
        result = super().infer(input, axes=axes, keepdims=keepdims)
        shape = input.get_shape()
        check(all(shape[a] > 0 for a in axes), cls.name,
              lambda: f"cannot take the max over an empty axis of {input} (it has no identity)")
        return result
