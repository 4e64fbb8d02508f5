"""The elementwise tape ops: the binary and unary arithmetic ops, `tape.cmp`, `tape.select`,
`tape.cast` and `tape.stop_gradient`; and the tuples ELEMENTWISE_BINARY, ELEMENTWISE_UNARY,
NUMERIC_UNARY (abs, sign, floor, ceil, round, erf), NUMERIC_BINARY (fmod), IDENTITY_UNARY
(stop_gradient) and ELEMENTWISE (these and `tape.constant`: the ops a `tape.fused` body may
hold)."""

from __future__ import annotations

from typing import Any, ClassVar

from xdsl.dialects.builtin import TensorType, i1
from xdsl.ir import Attribute
from xdsl.irdl import irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import Commutative, Pure

from tapeml.dialects.base import Keyword, TapeOp
from tapeml.dialects.tape.constants import ConstantOp
from tapeml.dialects.tape.types import (
    ANY,
    FLOATS,
    INTEGERS,
    INTS,
    NUMBERS,
    any_tensor,
    bool_tensor,
    check,
    dtype_of,
    element_type,
    same_type,
    tensor_of,
    tensor_type,
)

__all__ = [
    "AbsOp",
    "CeilOp",
    "ErfOp",
    "FmodOp",
    "NUMERIC_BINARY",
    "FloorOp",
    "NUMERIC_UNARY",
    "RoundOp",
    "SignOp",
    "INTEGER_UNARY",
    "INTEGER_BINARY",
    "NotOp",
    "ShrOp",
    "ShlOp",
    "XorOp",
    "OrOp",
    "AndOp",
    "RemOp",
    "FloorDivOp",
    "AddOp",
    "CMP_PREDICATES",
    "CastOp",
    "CmpOp",
    "CosOp",
    "DivOp",
    "ELEMENTWISE",
    "ELEMENTWISE_BINARY",
    "ELEMENTWISE_UNARY",
    "IDENTITY_UNARY",
    "ExpOp",
    "LogOp",
    "MaximumOp",
    "MinimumOp",
    "MulOp",
    "NegOp",
    "PowOp",
    "ReluOp",
    "SelectOp",
    "SigmoidOp",
    "SinOp",
    "SqrtOp",
    "StopGradientOp",
    "SubOp",
    "TanhOp",
]


class _Unary(TapeOp):
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    ELEMENTS: ClassVar[frozenset[str]] = FLOATS
    """The kinds of element type the op takes (types.py)."""

    @classmethod
    def infer(cls, input: Attribute) -> Attribute:
        return tensor_of(cls.name, input, cls.ELEMENTS)


class _Binary(TapeOp):
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    ELEMENTS: ClassVar[frozenset[str]] = NUMBERS
    """The kinds of element type the op takes (types.py)."""

    @classmethod
    def infer(cls, lhs: Attribute, rhs: Attribute) -> Attribute:
        types = [tensor_of(cls.name, lhs, cls.ELEMENTS, "lhs"),
                 tensor_of(cls.name, rhs, cls.ELEMENTS, "rhs")]
        same_type(cls.name, types, "operands must have the same type (broadcast explicitly)")
        return lhs


@irdl_op_definition
class AddOp(_Binary):
    name = "tape.add"
    traits = traits_def(Commutative())


@irdl_op_definition
class SubOp(_Binary):
    name = "tape.sub"


@irdl_op_definition
class MulOp(_Binary):
    name = "tape.mul"
    traits = traits_def(Commutative())


@irdl_op_definition
class DivOp(_Binary):
    name = "tape.div"
    ELEMENTS: ClassVar = FLOATS


@irdl_op_definition
class MaximumOp(_Binary):
    """Elementwise maximum; NaN if either side is NaN (numpy's `maximum`)."""

    name = "tape.maximum"
    traits = traits_def(Commutative())


@irdl_op_definition
class MinimumOp(_Binary):
    """Elementwise minimum; NaN if either side is NaN (numpy's `minimum`)."""

    name = "tape.minimum"
    traits = traits_def(Commutative())


@irdl_op_definition
class PowOp(_Binary):
    name = "tape.pow"
    ELEMENTS: ClassVar = FLOATS


@irdl_op_definition
class NegOp(_Unary):
    name = "tape.neg"
    ELEMENTS: ClassVar = NUMBERS


@irdl_op_definition
class ExpOp(_Unary):
    name = "tape.exp"


@irdl_op_definition
class LogOp(_Unary):
    name = "tape.log"


@irdl_op_definition
class TanhOp(_Unary):
    name = "tape.tanh"


@irdl_op_definition
class SinOp(_Unary):
    name = "tape.sin"


@irdl_op_definition
class CosOp(_Unary):
    name = "tape.cos"


@irdl_op_definition
class SigmoidOp(_Unary):
    """1 / (1 + exp(-x))."""

    name = "tape.sigmoid"


@irdl_op_definition
class ReluOp(_Unary):
    """maximum(x, 0)."""

    name = "tape.relu"
    ELEMENTS: ClassVar = NUMBERS


@irdl_op_definition
class SqrtOp(_Unary):
    name = "tape.sqrt"


@irdl_op_definition
class AbsOp(_Unary):
    """|x|, as numpy's `absolute`: abs(-0.0) is +0.0, the sign of a NaN is cleared, and
    abs(INT_MIN) wraps to INT_MIN."""

    name = "tape.abs"
    ELEMENTS: ClassVar = NUMBERS


@irdl_op_definition
class SignOp(_Unary):
    """-1, 0 or 1 by the sign of x, as numpy's `sign`: sign(+-0.0) is +0.0 and sign(NaN) is
    that NaN."""

    name = "tape.sign"
    ELEMENTS: ClassVar = NUMBERS


@irdl_op_definition
class FloorOp(_Unary):
    """The largest integer <= x (numpy's `floor`; integers are their own floor)."""

    name = "tape.floor"
    ELEMENTS: ClassVar = NUMBERS


@irdl_op_definition
class CeilOp(_Unary):
    """The smallest integer >= x (numpy's `ceil`; integers are their own ceiling)."""

    name = "tape.ceil"
    ELEMENTS: ClassVar = NUMBERS


@irdl_op_definition
class RoundOp(_Unary):
    """x rounded to the nearest integer, halves to even (numpy's `round` with no decimals,
    `rint`: round(0.5) is 0.0, round(-0.5) is -0.0, round(2.5) is 2.0); integers are kept."""

    name = "tape.round"
    ELEMENTS: ClassVar = NUMBERS


@irdl_op_definition
class ErfOp(_Unary):
    """The error function 2/sqrt(pi) * integral from 0 to x of exp(-t^2) dt (Python's
    math.erf, rounded to the element type; numpy has none)."""

    name = "tape.erf"


@irdl_op_definition
class FmodOp(_Binary):
    """C's fmod, as numpy's `fmod` (floats only): a - n*b for n = trunc(a / b), computed exactly,
    with the sign of a and magnitude below |b|; fmod(x, +-0) and fmod(+-inf, y) are NaN,
    fmod(x, +-inf) is x for finite x, fmod(+-0, y) is +-0, NaN propagates."""

    name = "tape.fmod"
    ELEMENTS: ClassVar = FLOATS


@irdl_op_definition
class FloorDivOp(_Binary):
    """Integer division rounding toward -inf, as numpy's `floor_divide`: x // 0 is 0 and
    INT_MIN // -1 wraps to INT_MIN."""

    name = "tape.floordiv"
    ELEMENTS: ClassVar = INTS


@irdl_op_definition
class RemOp(_Binary):
    """The remainder of `floordiv`, with the divisor's sign, as numpy's `remainder`: x % 0 is
    0."""

    name = "tape.rem"
    ELEMENTS: ClassVar = INTS


@irdl_op_definition
class AndOp(_Binary):
    """Bitwise and (logical on i1)."""

    name = "tape.and"
    traits = traits_def(Commutative())
    ELEMENTS: ClassVar = INTEGERS


@irdl_op_definition
class OrOp(_Binary):
    """Bitwise or (logical on i1)."""

    name = "tape.or"
    traits = traits_def(Commutative())
    ELEMENTS: ClassVar = INTEGERS


@irdl_op_definition
class XorOp(_Binary):
    """Bitwise exclusive or (logical on i1)."""

    name = "tape.xor"
    traits = traits_def(Commutative())
    ELEMENTS: ClassVar = INTEGERS


@irdl_op_definition
class ShlOp(_Binary):
    """`lhs << rhs`, as numpy's `left_shift`: a shift of the bit width or more, or negative,
    gives 0."""

    name = "tape.shl"
    ELEMENTS: ClassVar = INTS


@irdl_op_definition
class ShrOp(_Binary):
    """`lhs >> rhs` (arithmetic), as numpy's `right_shift`: a shift of the bit width or more,
    or negative, gives 0 or -1 (the sign)."""

    name = "tape.shr"
    ELEMENTS: ClassVar = INTS


@irdl_op_definition
class NotOp(_Unary):
    """Bitwise not (logical on i1), as numpy's `invert`."""

    name = "tape.not"
    ELEMENTS: ClassVar = INTEGERS


@irdl_op_definition
class StopGradientOp(_Unary):
    """Its operand, unchanged, which differentiation takes for a constant: no cotangent flows
    back through it, at any order (JAX's `lax.stop_gradient`, torch's `detach`). Every other
    stage computes the identity (compiled, it is its operand's value)."""

    name = "tape.stop_gradient"
    ELEMENTS: ClassVar = ANY


CMP_PREDICATES = ("lt", "le", "gt", "ge", "eq", "ne")


@irdl_op_definition
class CmpOp(TapeOp):
    """Elementwise comparison, an i1 tensor: `tape.cmp lt, %a, %b : tensor<2xf32> -> tensor<2xi1>`.
    Ordered for all predicates but `ne` (NaN compares false, and `ne` true), as numpy does."""

    name = "tape.cmp"
    predicate = Keyword.prop()
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (Keyword("predicate", CMP_PREDICATES),)

    @classmethod
    def infer(cls, lhs: Attribute, rhs: Attribute, *, predicate: str) -> Attribute:
        check(predicate in CMP_PREDICATES, cls.name,
              lambda: f"predicate must be one of {', '.join(CMP_PREDICATES)}, got {predicate!r}")
        types = [any_tensor(cls.name, lhs, "lhs"), any_tensor(cls.name, rhs, "rhs")]
        same_type(cls.name, types, "operands must have the same type (broadcast explicitly)")
        return tensor_type(lhs.get_shape(), i1)


@irdl_op_definition
class SelectOp(TapeOp):
    """`cond ? a : b` elementwise."""

    name = "tape.select"
    cond = operand_def(TensorType)
    on_true = operand_def(TensorType)
    on_false = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, cond: Attribute, on_true: Attribute, on_false: Attribute) -> Attribute:
        c = bool_tensor(cls.name, cond, "condition")
        types = [any_tensor(cls.name, on_true, "true value"),
                 any_tensor(cls.name, on_false, "false value")]
        same_type(cls.name, types, "both values must have the same type")
        check(c.get_shape() == on_true.get_shape(), cls.name,
              lambda: f"condition shape {c} must match the values' shape {on_true}")
        return on_true



@irdl_op_definition
class CastOp(TapeOp):
    """Convert between any two element types, as numpy's `astype` does: floats round to nearest
    even; floats to integers truncate toward zero, saturating, NaN to 0 (numpy on x86 gives
    the minimum integer for NaN and out-of-range values; LLVM's fptosi.sat, the GPU and XLA
    saturate); integers wrap to a narrower one; anything to i1 is `!= 0` (NaN is true)."""

    name = "tape.cast"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    DERIVED: ClassVar = ("dtype",)

    @classmethod
    def infer(cls, input: Attribute, *, dtype: Any) -> Attribute:
        t = any_tensor(cls.name, input)
        return tensor_type(t.get_shape(), element_type(dtype))

    def derived_params(self) -> dict[str, Any]:
        return {"dtype": dtype_of(self.result.type)}

    def verify_(self) -> None:
        any_tensor(self.name, self.result.type, "result")
        super().verify_()


ELEMENTWISE_BINARY = (AddOp, SubOp, MulOp, DivOp, MaximumOp, MinimumOp, PowOp)
ELEMENTWISE_UNARY = (NegOp, ExpOp, LogOp, TanhOp, SinOp, CosOp, SigmoidOp, ReluOp, SqrtOp)
NUMERIC_UNARY = (AbsOp, SignOp, FloorOp, CeilOp, RoundOp, ErfOp)
"""abs, sign, floor, ceil and round (of integers and floats) and erf (of floats)."""
NUMERIC_BINARY = (FmodOp,)
"""fmod (of floats)."""
INTEGER_BINARY = (FloorDivOp, RemOp, AndOp, OrOp, XorOp, ShlOp, ShrOp)
INTEGER_UNARY = (NotOp,)
"""The elementwise ops of integers (and i1) only."""
IDENTITY_UNARY = (StopGradientOp,)
"""stop_gradient: the identity on every element type, but to differentiation."""
ELEMENTWISE = (*ELEMENTWISE_BINARY, *ELEMENTWISE_UNARY, *NUMERIC_UNARY, *NUMERIC_BINARY,
               *INTEGER_BINARY, *INTEGER_UNARY, *IDENTITY_UNARY, CmpOp, SelectOp, CastOp,
               ConstantOp)
"""The ops a `tape.fused` body may hold: each result element depends on the same element of
each operand only."""
