"""The contraction: `tape.matmul`, plain or batched."""

from __future__ import annotations

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute
from xdsl.irdl import irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import Pure

from tapeml.dialects.base import TapeOp
from tapeml.dialects.tape.types import NUMBERS, check, same_element, tensor_of, tensor_type

__all__ = [
    "MatmulOp",
]


@irdl_op_definition
class MatmulOp(TapeOp):
    """(m, k) x (k, n) -> (m, n), or batched (b, m, k) x (b, k, n) -> (b, m, n), of floats or
    of integers (whose products and sums wrap around, as numpy's and XLA's do)."""

    name = "tape.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, lhs: Attribute, rhs: Attribute) -> Attribute:
        a, b = tensor_of(cls.name, lhs, NUMBERS, "lhs"), tensor_of(cls.name, rhs, NUMBERS, "rhs")
        same_element(cls.name, [a, b])
        sa, sb = a.get_shape(), b.get_shape()
        check(len(sa) == len(sb) and len(sa) in (2, 3), cls.name,
              lambda: f"operands must both be rank 2, or both rank 3 (batched); got {a} and {b}")
        check(sa[:-2] == sb[:-2], cls.name,
              lambda: f"batch dims must be equal (broadcast explicitly); got {a} and {b}")
        check(sa[-1] == sb[-2], cls.name,
              lambda: f"contraction dims differ: {a} has {sa[-1]} columns, {b} has {sb[-2]} rows")
        return tensor_type([*sa[:-1], sb[-1]], a.get_element_type())
