"""Fused elementwise groups: `tape.fused`, a group of elementwise ops as one op over broadcast
operands; `tape.yield`, the terminator of its body; and `tape.index`, the body's position in
the result (what a `tape.iota` inside a group becomes). The ops of a body may mix element
types (a compare feeding a select, casts, integer index arithmetic): each value has its own."""

from __future__ import annotations

from typing import Any, ClassVar, Self

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsTerminator, Pure

from tapeml.dialects.base import Int, TapeOp, one_of
from tapeml.dialects.tape.elementwise import ELEMENTWISE
from tapeml.dialects.tape.types import (
    NUMBERS,
    any_tensor,
    check,
    dtype_of,
    element_type,
    tensor_of,
    tensor_type,
)
from tapeml.errors import ShapeError

__all__ = [
    "FusedOp",
    "IndexOp",
    "YieldOp",
]


@irdl_op_definition
class YieldOp(IRDLOperation):
    """The value a `tape.fused` body computes for one element."""

    name = "tape.yield"
    value = operand_def(TensorType)
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(FusedOp), Pure()))
    assembly_format = "$value attr-dict `:` type($value)"

    def __init__(self, value: SSAValue | Operation) -> None:
        super().__init__(operands=[value])


@irdl_op_definition
class IndexOp(TapeOp):
    """Inside a `tape.fused` body: the index, along the result's dim `axis`, of the element the
    body computes, in its (numeric) element type. `tape.iota axis = k` feeding a group is
    `tape.index axis = k'` in it (k' = k + the dims the group's shape has in front): no buffer.

        %i = tape.index axis = 0 : tensor<i64>
    """

    name = "tape.index"
    result = result_def(TensorType)
    axis = Int.prop()
    traits = lazy_traits_def(lambda: (HasParent(FusedOp), Pure()))
    CLAUSES: ClassVar = (Int("axis"),)
    DERIVED: ClassVar = ("dtype",)

    @classmethod
    def infer(cls, *, axis: int, dtype: Any) -> Attribute:
        t = tensor_type((), element_type(dtype))
        tensor_of(cls.name, t, NUMBERS, "result")
        check(axis >= 0, cls.name, lambda: f"axis {axis} must be a dim of the group's result")
        return t

    def derived_params(self) -> dict[str, Any]:
        return {"dtype": dtype_of(self.result.type)}

    def print(self, printer: Printer) -> None:
        Int("axis").print(printer, self.properties.get("axis"))
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)


_in_a_body = one_of(*ELEMENTWISE, IndexOp, YieldOp)


@irdl_op_definition
class FusedOp(TapeOp):
    """A group of elementwise ops as one op, for one loop: the operands broadcast (numpy rules)
    to the result shape, and the body computes one element from one element of each, on rank-0
    tensors, with elementwise tape ops:

        %r = tape.fused %a, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32> {
        ^bb0(%x: tensor<f32>, %y: tensor<f32>):
          %0 = tape.mul %x, %y : tensor<f32>
          tape.yield %0 : tensor<f32>
        }

    The ops may mix element types, each value its own; `tape.index` gives the element's
    position, so a causal mask costs no buffer:

        %m = tape.fused %s : tensor<8x8xf32> -> tensor<8x8xf32> {
        ^bb0(%x: tensor<f32>):
          %i = tape.index axis = 0 : tensor<i64>
          %j = tape.index axis = 1 : tensor<i64>
          %ninf = tape.constant dense<"0x000080FF"> : tensor<f32>
          %keep = tape.cmp ge, %i, %j : tensor<i64> -> tensor<i1>
          %0 = tape.select %keep, %x, %ninf : tensor<i1>, tensor<f32>, tensor<f32> -> tensor<f32>
          tape.yield %0 : tensor<f32>
        }
    """

    name = "tape.fused"
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    body = region_def("single_block")
    traits = traits_def(Pure())
    DERIVED: ClassVar = ("body",)

    @classmethod
    def infer(cls, *inputs: Attribute, body: Block) -> Attribute:
        types = [any_tensor(cls.name, t, "input") for t in inputs]
        try:
            shape = np.broadcast_shapes(*(t.get_shape() for t in types))
        except ValueError:
            raise ShapeError(f"{cls.name}: inputs {', '.join(map(str, types))} do not "
                             "broadcast together") from None
        check(len(body.args) == len(types), cls.name,
              lambda: f"the body takes {len(body.args)} elements for {len(types)} inputs")
        for arg, t in zip(body.args, types, strict=True):
            check(arg.type == tensor_type((), t.get_element_type()), cls.name,
                  lambda arg=arg, t=t: f"body argument {arg.type} must be the rank-0 "
                  f"{t.get_element_type()} of input {t}")
        last = body.last_op
        check(isinstance(last, YieldOp), cls.name, "the body must end in tape.yield")
        for op in body.ops:
            check(not isinstance(op, IndexOp) or op.params["axis"] < len(shape), cls.name,
                  lambda op=op: "tape.index axis = "
                  f"{op.params['axis'] if isinstance(op, IndexOp) else 0} "
                  f"must be a dim of the result's shape {list(shape)}")
            check(_in_a_body(op) and all(
                r.type.get_shape() == () for r in op.results), cls.name,
                lambda op=op: f"the body holds rank-0 elementwise ops only, not {op.name}"
                f"{' of rank ' + str(len(op.results[0].type.get_shape())) if op.results else ''}")
            for v in op.operands:  # the body sees its arguments and its own values only
                check((v.owner is body) if isinstance(v, BlockArgument) else
                      (v.owner.parent is body), cls.name,
                      lambda v=v: f"the body uses {_named(v)}, defined outside it; pass it in "
                      "as an input (a rank-0 tensor broadcasts)")
        out = last.value.type
        return tensor_type(shape, out.get_element_type())

    def derived_params(self) -> dict[str, Any]:
        return {"body": self.body.block}

    @classmethod
    def build(cls, *operands: SSAValue | Operation, body: Block) -> Self:
        """A fused op over `operands` computing `body`: a copy of it when it belongs to a
        region already, else the block itself."""
        values = [SSAValue.get(o) for o in operands]
        region = body.parent.clone() if body.parent is not None else Region([body])
        result = cls.infer(*(v.type for v in values), body=region.block)
        return cls.create(operands=values, result_types=[result], regions=[region])

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        pos = parser.pos
        operands = parser.parse_comma_separated_list(parser.Delimiter.NONE,
                                                     parser.parse_unresolved_operand)
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        parser.parse_punctuation("->")
        result_type = parser.parse_type()
        resolved = parser.resolve_operands(operands, types, pos)
        region = parser.parse_region()
        attributes = parser.parse_optional_attr_dict()
        return cls.create(operands=resolved, result_types=[result_type], regions=[region],
                          attributes=attributes)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.inputs, printer.print_operand)
        printer.print_string(" : ")
        printer.print_list([o.type for o in self.inputs], printer.print_attribute)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)
        printer.print_string(" ")
        printer.print_region(self.body)
        printer.print_op_attributes(self.attributes)


def _named(v: SSAValue) -> str:
    return f"%{v.name_hint}" if v.name_hint else f"a {v.type} value"
