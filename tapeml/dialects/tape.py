"""The `tape` dialect: value-semantics ops on statically shaped f32/f64 tensors.

Each op is its definition, its parameters (`CLAUSES`) and its shape rule (`infer`); the shape rule
is both the builder's result-type inference and the verifier (see `tapeml/dialects/base.py`).
Numpy semantics live in `tapeml/interpreters/tape.py` under the same op class.

Broadcasting is explicit: elementwise ops take operands of one type, `tape.broadcast` makes them so.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Self

import numpy as np
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    TensorType,
    f32,
    f64,
    i1,
)
from xdsl.interfaces import HasCanonicalizationPatternsInterface
from xdsl.ir import Attribute, Block, Dialect, Operation, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Commutative, HasParent, IsTerminator, Pure
from xdsl.utils.exceptions import ParseError
from xdsl.utils.lexer import Position, Span, Token
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRTokenKind

from tapeml.dialects.base import Flag, Float, Int, IntList, Keyword, TapeOp
from tapeml.errors import ShapeError

# ----------------------------------------------------------------------------------------------
# Types


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


def _float(op: str, t: Attribute, role: str = "operand") -> TensorType:
    """`t` as a statically shaped f32/f64 tensor type, or a ShapeError naming `op`."""
    ok = (
        isinstance(t, TensorType)
        and isinstance(t.get_element_type(), Float32Type | Float64Type)
        and all(d >= 0 for d in t.get_shape())
    )
    if not ok:
        raise ShapeError(f"{op}: {role} must be a statically shaped tensor of f32 or f64, got {t}")
    return t


def _any(op: str, t: Attribute, role: str = "operand") -> TensorType:
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


def _bool(op: str, t: Attribute, role: str) -> TensorType:
    ok = isinstance(t, TensorType) and t.get_element_type() == i1
    if not ok or any(d < 0 for d in t.get_shape()):
        raise ShapeError(f"{op}: {role} must be a statically shaped tensor of i1, got {t}")
    return t


def _same(op: str, types: Sequence[TensorType], rule: str) -> None:
    if any(t != types[0] for t in types):
        raise ShapeError(f"{op}: {rule}; got {', '.join(map(str, types))}")


def _same_element(op: str, types: Sequence[TensorType]) -> None:
    if any(t.get_element_type() != types[0].get_element_type() for t in types):
        raise ShapeError(
            f"{op}: operands must share one element type (cast explicitly); "
            f"got {', '.join(map(str, types))}"
        )


def _check(ok: bool, op: str, message: str) -> None:
    if not ok:
        raise ShapeError(f"{op}: {message}")


def _ints(op: str, name: str, values: Sequence[int], length: int, minimum: int) -> None:
    _check(len(values) == length, op, f"{name} needs {length} values, got {list(values)}")
    _check(all(v >= minimum for v in values), op, f"{name} values must be >= {minimum}, "
           f"got {list(values)}")


def window_count(size: int, kernel: int, stride: int, dilation: int) -> int:
    """Windows of `kernel` taps `dilation` apart, `stride` apart, that fit in `size`."""
    span = dilation * (kernel - 1) + 1
    return (size - span) // stride + 1 if size >= span else 0


# ----------------------------------------------------------------------------------------------
# Elementwise


class _Unary(TapeOp):
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, input: Attribute) -> Attribute:
        return _float(cls.name, input)


class _Binary(TapeOp):
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, lhs: Attribute, rhs: Attribute) -> Attribute:
        types = [_float(cls.name, lhs, "lhs"), _float(cls.name, rhs, "rhs")]
        _same(cls.name, types, "operands must have the same type (broadcast explicitly)")
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


@irdl_op_definition
class NegOp(_Unary):
    name = "tape.neg"


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
class SigmoidOp(_Unary):
    """1 / (1 + exp(-x))."""

    name = "tape.sigmoid"


@irdl_op_definition
class ReluOp(_Unary):
    """maximum(x, 0)."""

    name = "tape.relu"


@irdl_op_definition
class SqrtOp(_Unary):
    name = "tape.sqrt"


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
        _check(predicate in CMP_PREDICATES, cls.name,
               f"predicate must be one of {', '.join(CMP_PREDICATES)}, got {predicate!r}")
        types = [_float(cls.name, lhs, "lhs"), _float(cls.name, rhs, "rhs")]
        _same(cls.name, types, "operands must have the same type (broadcast explicitly)")
        return TensorType(i1, lhs.get_shape())


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
        c = _bool(cls.name, cond, "condition")
        types = [_float(cls.name, on_true, "true value"), _float(cls.name, on_false, "false value")]
        _same(cls.name, types, "both values must have the same type")
        _check(c.get_shape() == on_true.get_shape(), cls.name,
               f"condition shape {c} must match the values' shape {on_true}")
        return on_true


@irdl_op_definition
class ConstantOp(TapeOp):
    """A dense literal: `tape.constant dense<[1.0, 2.0]> : tensor<2xf32>`."""

    name = "tape.constant"
    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, *, value: np.ndarray) -> Attribute:
        return tensor_type(np.shape(value), element_type(np.asarray(value).dtype))

    @property
    def params(self) -> dict[str, Any]:
        return {"value": dense_to_numpy(self.value)}

    @classmethod
    def build(cls, *, value: Any) -> Self:
        array = np.asarray(value)
        t = cls.infer(value=array)
        return cls.create(result_types=[t], properties={"value": numpy_to_dense(array)})

    def verify_(self) -> None:
        t = self.value.type
        _float(self.name, t, "value")
        _check(t == self.result.type, self.name,
               f"value type {t} does not match the result type {self.result.type}")

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        start = parser.pos
        with dense_literal_errors(parser, f"{cls.name}: "):
            value = parser.parse_attribute()
        if not isinstance(value, DenseIntOrFPElementsAttr):
            parser.raise_error("expected a dense literal such as dense<1.0> : tensor<2xf32>",
                               start, parser.pos)
        attributes = parser.parse_optional_attr_dict()
        return cls.create(result_types=[value.type], properties={"value": value},
                          attributes=attributes)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        print_dense(printer, self.value)
        printer.print_op_attributes(self.attributes)


def numpy_to_dense(array: np.ndarray) -> DenseIntOrFPElementsAttr:
    """A dense attribute holding `array` (a single value when every element is equal)."""
    t = tensor_type(array.shape, element_type(array.dtype))
    flat = np.ascontiguousarray(array).reshape(-1)
    bits = flat.view(np.uint32 if flat.dtype == np.float32 else np.uint64)
    if flat.size > 1 and np.all(bits == bits[0]):
        flat = flat[:1]  # splat (every element the same bits): printed dense<v>
    return DenseIntOrFPElementsAttr(t, BytesAttr(flat.tobytes()))


def print_dense(printer: Printer, attr: DenseIntOrFPElementsAttr) -> None:
    """`dense<...> : tensor<...>`, in a form that parses back to the same bits."""
    text = io.StringIO()
    Printer(stream=text).print_attribute(attr)
    if "0x" not in text.getvalue().rpartition(" : ")[0]:  # (the type may read tensor<0x3xf32>)
        printer.print_string(text.getvalue())
        return
    # xDSL prints inf, nan and some finite floats (1048576.0 in f32) as hex bit patterns but
    # parses those back as integers; MLIR's hex blob form, dense<"0x...">, keeps every bit
    printer.print_string(f'dense<"0x{attr.data.data.hex().upper()}"> : ')
    printer.print_attribute(attr.type)


def dense_to_numpy(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The array a dense attribute holds (a fresh, writable copy)."""
    t = attr.type
    assert isinstance(t, TensorType)
    flat = np.frombuffer(attr.data.data, dtype=dtype_of(t))
    shape = t.get_shape()
    if flat.size == 1 and math.prod(shape) != 1:
        return np.full(shape, flat[0], dtype=flat.dtype)
    return flat.reshape(shape).copy()


# xDSL's checks of a whole dense literal: it makes them once the literal's type is read, and so
# reports them at the token after the literal (often on the next line).
_WHOLE_LITERAL_CHECKS = (
    "Shape mismatch in dense literal",
    "Expected at least one element in the dense literal",
    "Hex string in denseAttr is invalid",
    "Expected memref, vector or tensor type",
    "Dense literal attribute should have a static shape",
    "No conversion from complex to float",
)
_OPENING = {MLIRTokenKind.LESS, MLIRTokenKind.L_SQUARE, MLIRTokenKind.L_PAREN,
            MLIRTokenKind.L_BRACE}
_CLOSING = {MLIRTokenKind.GREATER, MLIRTokenKind.R_SQUARE, MLIRTokenKind.R_PAREN,
            MLIRTokenKind.R_BRACE}
_NARROW_FLOATS = {Float16Type: np.float16, Float32Type: np.float32}


class DenseLiteralError(ParseError):
    """A mistake in a dense literal, located at the literal."""


@contextmanager
def dense_literal_errors(parser: Parser, what: str = "",
                         start: Position | None = None) -> Iterator[None]:
    """Report a mistake in the dense literal parsed inside the `with` (beginning at `start`,
    default the next token) at the literal itself, `what` (e.g. an op's name) first: xDSL
    reports its checks of a whole literal (element count against shape, its type) at the token
    after it, and raises an OverflowError (a float) or a ValueError (an integer) for a value too
    large for the element type."""
    start = parser.pos if start is None else start
    try:
        yield
    except DenseLiteralError as error:  # found by an inner check: say `what` too
        raise DenseLiteralError(error.span, what + error.msg) from None
    except OverflowError:
        tokens = _tokens_before_current(parser, start)
        message = _overflow_message(parser, tokens)
        raise DenseLiteralError(_span(parser, start, tokens), what + message) from None
    except ValueError as error:  # xDSL's: an integer its element type cannot hold
        tokens = _tokens_before_current(parser, start)
        raise DenseLiteralError(_span(parser, start, tokens), what + str(error)) from None
    except ParseError as error:
        if error.span.start != parser.pos or not error.msg.startswith(_WHOLE_LITERAL_CHECKS):
            raise
        tokens = _tokens_before_current(parser, start)
        raise DenseLiteralError(_span(parser, start, tokens), what + error.msg) from None


def _span(parser: Parser, start: Position, tokens: list[Token]) -> Span:
    return Span(start, tokens[-1].span.end, parser.lexer.input)


def _tokens_before_current(parser: Parser, start: Position) -> list[Token]:
    """The tokens the parser consumed from `start` on (re-lexed: the parser keeps none)."""
    lexer = MLIRLexer(parser.lexer.input)
    lexer.pos = start
    tokens = []
    while (token := lexer.lex()).span.start < parser.pos:
        tokens.append(token)
    return tokens


def _overflow_message(parser: Parser, tokens: list[Token]) -> str:
    """Which number of the dense literal `tokens` (`dense<...> : type`) its element type
    cannot hold."""
    depth, colon = 0, len(tokens) - 1
    for i, token in enumerate(tokens):
        depth += (token.kind in _OPENING) - (token.kind in _CLOSING)
        if depth == 0 and token.kind == MLIRTokenKind.COLON:
            colon = i
            break
    type_text = parser.lexer.input.content[tokens[colon].span.end:tokens[-1].span.end].strip()
    fallback = f"a value is too large for the element type of {type_text}"
    try:
        element = Parser(parser.ctx, type_text).parse_type().get_element_type()
    except (ParseError, AttributeError):
        return fallback
    if (dtype := _NARROW_FLOATS.get(type(element))) is None:
        return fallback
    for before, token in zip(tokens, tokens[1:colon], strict=False):
        if token.kind == MLIRTokenKind.FLOAT_LIT:
            value = token.kind.get_float_value(token.span)
        elif token.kind == MLIRTokenKind.INTEGER_LIT:
            value = token.kind.get_int_value(token.span)
        else:
            continue
        if not _fits(value, dtype):
            sign = "-" if before.kind == MLIRTokenKind.MINUS else ""
            return (f"{sign}{token.text} does not fit {element} (the largest finite {element} "
                    f"is {np.format_float_scientific(np.finfo(dtype).max)})")
    return fallback


def _fits(value: int | float, dtype: type[np.floating]) -> bool:
    """Whether `value` rounds to a finite number of `dtype` (what xDSL can pack)."""
    try:
        magnitude = abs(float(value))
    except OverflowError:  # an integer beyond any double
        return False
    with np.errstate(over="ignore"):
        return bool(np.isfinite(dtype(magnitude)))


@irdl_op_definition
class CastOp(TapeOp):
    """Convert between f32 and f64 (round to nearest even)."""

    name = "tape.cast"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())
    DERIVED: ClassVar = ("dtype",)

    @classmethod
    def infer(cls, input: Attribute, *, dtype: Any) -> Attribute:
        t = _float(cls.name, input)
        return TensorType(element_type(dtype), t.get_shape())

    def derived_params(self) -> dict[str, Any]:
        return {"dtype": dtype_of(self.result.type)}

    def verify_(self) -> None:
        _float(self.name, self.result.type, "result")
        super().verify_()


# ----------------------------------------------------------------------------------------------
# Layout


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
        from tapeml.dialects.tape_canonicalize import LAYOUT_PATTERNS

        return LAYOUT_PATTERNS

    @classmethod
    def infer(cls, input: Attribute, *, shape: Sequence[int]) -> Attribute:
        t = _any(cls.name, input)
        src, dst = t.get_shape(), tuple(shape)
        ok = len(src) <= len(dst) and all(
            s in (1, d) for s, d in zip(src[::-1], dst[::-1], strict=False)
        )
        _check(ok and all(d >= 0 for d in dst), cls.name,
               f"cannot broadcast {t} to shape {list(dst)} (trailing dims must be equal or 1)")
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
        from tapeml.dialects.tape_canonicalize import LAYOUT_PATTERNS

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
        t = _any(cls.name, input)
        _check(all(d >= 0 for d in shape) and math.prod(shape) == math.prod(t.get_shape()),
               cls.name, f"cannot reshape {t} ({math.prod(t.get_shape())} elements) "
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
        from tapeml.dialects.tape_canonicalize import LAYOUT_PATTERNS

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
        t = _any(cls.name, input)
        shape = t.get_shape()
        _check(sorted(perm) == list(range(len(shape))), cls.name,
               f"perm {list(perm)} is not a permutation of the {len(shape)} dims of {t}")
        return tensor_type([shape[p] for p in perm], t.get_element_type())


@irdl_op_definition
class PadOp(TapeOp):
    """Pad each dim with `low` values before and `high` after, all equal to `value`.
    Negative amounts crop instead (at most the whole dim between them)."""

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
        t = _float(cls.name, input)
        shape = t.get_shape()
        _ints(cls.name, "low", low, len(shape), -(2**62))
        _ints(cls.name, "high", high, len(shape), -(2**62))
        for d, lo, hi in zip(shape, low, high, strict=True):
            _check(max(0, -lo) + max(0, -hi) <= d, cls.name,
                   f"negative padding low={list(low)} high={list(high)} crops more than {t} has")
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
        t = _any(cls.name, input)
        shape = t.get_shape()
        _ints(cls.name, "start", start, len(shape), 0)
        _ints(cls.name, "stop", stop, len(shape), 0)
        _ints(cls.name, "step", step, len(shape), 1)
        for d, a, b in zip(shape, start, stop, strict=True):
            _check(a <= b <= d, cls.name, f"start {list(start)} and stop {list(stop)} must "
                   f"satisfy 0 <= start <= stop <= dim for {t}")
        out = [-(-(b - a) // s) for a, b, s in zip(start, stop, step, strict=True)]
        return tensor_type(out, t.get_element_type())


class _Windows(TapeOp):
    """Shared by unfold and fold: sliding windows over the trailing len(kernel) dims."""

    @classmethod
    def _windows(cls, spatial: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                 dilation: Sequence[int], where: TensorType) -> list[int]:
        k = len(kernel)
        _check(k >= 1, cls.name, "kernel must have at least one dim")
        _ints(cls.name, "kernel", kernel, k, 1)
        _ints(cls.name, "stride", stride, k, 1)
        _ints(cls.name, "dilation", dilation, k, 1)
        out = [window_count(*a) for a in zip(spatial, kernel, stride, dilation, strict=True)]
        _check(all(o >= 1 for o in out), cls.name,
               f"kernel {list(kernel)} with dilation {list(dilation)} does not fit in the "
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
        t = _float(cls.name, input)
        shape, k = t.get_shape(), len(kernel)
        _check(k >= 1, cls.name, "kernel must have at least one dim")
        _check(k <= len(shape), cls.name, f"kernel {list(kernel)} has more dims than {t}")
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
        t = _float(cls.name, input)
        shape, k = t.get_shape(), len(kernel)
        _check(k >= 1 and 2 * k <= len(shape), cls.name,
               f"{t} needs window and kernel dims for kernel {list(kernel)}")
        _check(len(spatial) == k, cls.name, f"spatial {list(spatial)} needs {k} dims")
        out = cls._windows(spatial, kernel, stride, dilation, t)
        batch = shape[: len(shape) - 2 * k]
        expected = [*batch, *out, *kernel]
        _check(list(shape) == expected, cls.name,
               f"input {t} must have shape {expected} to fold onto spatial dims {list(spatial)}")
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
        if operand_types and isinstance(operand_types[0], TensorType) and axis < 0:
            axis += operand_types[0].get_num_dims()
        return params | {"axis": axis}

    @classmethod
    def infer(cls, *inputs: Attribute, axis: int) -> Attribute:
        _check(len(inputs) >= 1, cls.name, "needs at least one operand")
        types = [_any(cls.name, t) for t in inputs]
        _same_element(cls.name, types)
        rank = types[0].get_num_dims()
        _check(0 <= axis < rank, cls.name, f"axis {axis} is out of range for {types[0]}")
        for t in types:
            shape = list(t.get_shape())
            ok = len(shape) == rank and all(
                a == b
                for i, (a, b) in enumerate(zip(shape, types[0].get_shape(), strict=True))
                if i != axis
            )
            _check(ok, cls.name, f"operands must agree on every dim but axis {axis}; "
                   f"got {', '.join(map(str, types))}")
        shape = list(types[0].get_shape())
        shape[axis] = sum(t.get_shape()[axis] for t in types)
        return tensor_type(shape, types[0].get_element_type())


# ----------------------------------------------------------------------------------------------
# Reductions


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
            _check(-rank <= a < rank, cls.name, f"axis {a} is out of range for {t}")
        normal = sorted(a % rank for a in axes)
        _check(len(set(normal)) == len(normal), cls.name, f"axes {axes} repeat an axis")
        return params | {"axes": tuple(normal)}

    @classmethod
    def infer(cls, input: Attribute, *, axes: Sequence[int], keepdims: bool) -> Attribute:
        t = _float(cls.name, input)
        shape = t.get_shape()
        _check(list(axes) == sorted(set(axes)) and all(0 <= a < len(shape) for a in axes),
               cls.name, f"axes {list(axes)} must be distinct dims of {t}, in increasing order")
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
        _check(all(shape[a] > 0 for a in axes), cls.name,
               f"cannot take the max over an empty axis of {input} (it has no identity)")
        return result


# ----------------------------------------------------------------------------------------------
# Contraction and the fused ops


@irdl_op_definition
class MatmulOp(TapeOp):
    """(m, k) x (k, n) -> (m, n), or batched (b, m, k) x (b, k, n) -> (b, m, n)."""

    name = "tape.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    @classmethod
    def infer(cls, lhs: Attribute, rhs: Attribute) -> Attribute:
        a, b = _float(cls.name, lhs, "lhs"), _float(cls.name, rhs, "rhs")
        _same_element(cls.name, [a, b])
        sa, sb = a.get_shape(), b.get_shape()
        _check(len(sa) == len(sb) and len(sa) in (2, 3), cls.name,
               f"operands must both be rank 2, or both rank 3 (batched); got {a} and {b}")
        _check(sa[:-2] == sb[:-2], cls.name,
               f"batch dims must be equal (broadcast explicitly); got {a} and {b}")
        _check(sa[-1] == sb[-2], cls.name,
               f"contraction dims differ: {a} has {sa[-1]} columns, {b} has {sb[-2]} rows")
        return tensor_type([*sa[:-1], sb[-1]], a.get_element_type())


def _rank4(op: str, t: Attribute, role: str, layout: str) -> tuple[int, ...]:
    t = _float(op, t, role)
    _check(t.get_num_dims() == 4, op, f"{role} must be rank 4 ({layout}), got {t}")
    return t.get_shape()


def _padded_windows(op: str, hw: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                    padding: Sequence[int], dilation: Sequence[int], where: TensorType) -> list:
    _ints(op, "stride", stride, 2, 1)
    _ints(op, "padding", padding, 4, 0)
    _ints(op, "dilation", dilation, 2, 1)
    padded = [hw[0] + padding[0] + padding[2], hw[1] + padding[1] + padding[3]]
    out = [window_count(*a) for a in zip(padded, kernel, stride, dilation, strict=True)]
    _check(all(o >= 1 for o in out), op,
           f"window {list(kernel)} (dilation {list(dilation)}) does not fit in the padded "
           f"spatial dims {padded} of {where}")
    return out


@irdl_op_definition
class Conv2dOp(TapeOp):
    """2-D cross-correlation, NCHW input, OIHW weight -> NOHW. `padding` is
    [top, left, bottom, right] (zeros); each of `groups` groups of C/groups input channels feeds
    O/groups output channels."""

    name = "tape.conv2d"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    result = result_def(TensorType)
    stride = IntList.prop()
    padding = IntList.prop()
    dilation = IntList.prop()
    groups = Int.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("stride"), IntList("padding"), IntList("dilation"), Int("groups"))

    @classmethod
    def infer(cls, input: Attribute, weight: Attribute, *, stride: Sequence[int],
              padding: Sequence[int], dilation: Sequence[int], groups: int) -> Attribute:
        n, c, h, w = _rank4(cls.name, input, "input", "N, C, H, W")
        o, cg, kh, kw = _rank4(cls.name, weight, "weight", "O, C/groups, KH, KW")
        _same_element(cls.name, [input, weight])
        _check(groups >= 1 and c % groups == 0 and o % groups == 0, cls.name,
               f"groups={groups} must divide the input channels of {input} and the output "
               f"channels of {weight}")
        _check(cg == c // groups and kh >= 1 and kw >= 1, cls.name,
               f"weight {weight} must have C/groups = {c // groups} input channels for {input}")
        oh, ow = _padded_windows(cls.name, (h, w), (kh, kw), stride, padding, dilation, input)
        return tensor_type([n, o, oh, ow], input.get_element_type())


class _Pool2d(TapeOp):
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kernel = IntList.prop()
    stride = IntList.prop()
    padding = IntList.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("kernel"), IntList("stride"), IntList("padding"))

    @classmethod
    def infer(cls, input: Attribute, *, kernel: Sequence[int], stride: Sequence[int],
              padding: Sequence[int]) -> Attribute:
        n, c, h, w = _rank4(cls.name, input, "input", "N, C, H, W")
        _ints(cls.name, "kernel", kernel, 2, 1)
        oh, ow = _padded_windows(cls.name, (h, w), kernel, stride, padding, (1, 1), input)
        return tensor_type([n, c, oh, ow], input.get_element_type())


@irdl_op_definition
class MaxPool2dOp(_Pool2d):
    """Max over each window; padding counts as -inf. `padding` is [top, left, bottom, right]."""

    name = "tape.maxpool2d"


@irdl_op_definition
class AvgPool2dOp(_Pool2d):
    """Mean over each window, padding counted as zeros (the divisor is always kh * kw)."""

    name = "tape.avgpool2d"


# The backward ops of the convolution and the poolings: what their pullbacks produce, and what
# tape-fuse raises the pullbacks of their unfold idioms to. Each states its shape rule through
# the forward op's: its cotangent operand must have the forward result's type.


def _expect_forward(op: str, ct: Attribute, forward: Attribute, role: str) -> None:
    _check(ct == forward, op, f"{role} {ct} must have the type of the forward result, {forward}")


@irdl_op_definition
class Conv2dBackwardInputOp(TapeOp):
    """The input cotangent of `tape.conv2d` (a transposed convolution): given the result's
    cotangent (N, O, OH, OW) and the weight (O, C/groups, KH, KW), the (N, C, H, W) cotangent of
    the input, H and W read off the result type."""

    name = "tape.conv2d_backward_input"
    cotangent = operand_def(TensorType)
    weight = operand_def(TensorType)
    result = result_def(TensorType)
    stride = IntList.prop()
    padding = IntList.prop()
    dilation = IntList.prop()
    groups = Int.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("stride"), IntList("padding"), IntList("dilation"), Int("groups"))
    DERIVED: ClassVar = ("spatial",)

    @classmethod
    def infer(cls, cotangent: Attribute, weight: Attribute, *, stride: Sequence[int],
              padding: Sequence[int], dilation: Sequence[int], groups: int,
              spatial: Sequence[int]) -> Attribute:
        n, _, _, _ = _rank4(cls.name, cotangent, "cotangent", "N, O, OH, OW")
        _, cg, _, _ = _rank4(cls.name, weight, "weight", "O, C/groups, KH, KW")
        _check(len(spatial) == 2, cls.name, f"spatial {list(spatial)} needs 2 dims")
        x = tensor_type([n, cg * groups, *spatial], weight.get_element_type())
        forward = Conv2dOp.infer(x, weight, stride=stride, padding=padding, dilation=dilation,
                                 groups=groups)
        _expect_forward(cls.name, cotangent, forward, "cotangent")
        return x

    def derived_params(self) -> dict[str, Any]:
        return {"spatial": self.result.type.get_shape()[2:]}


@irdl_op_definition
class Conv2dBackwardWeightOp(TapeOp):
    """The weight cotangent of `tape.conv2d`: given the input (N, C, H, W) and the result's
    cotangent (N, O, OH, OW), the (O, C/groups, KH, KW) cotangent of the weight, the kernel size
    read off the result type."""

    name = "tape.conv2d_backward_weight"
    input = operand_def(TensorType)
    cotangent = operand_def(TensorType)
    result = result_def(TensorType)
    stride = IntList.prop()
    padding = IntList.prop()
    dilation = IntList.prop()
    groups = Int.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("stride"), IntList("padding"), IntList("dilation"), Int("groups"))
    DERIVED: ClassVar = ("kernel",)

    @classmethod
    def infer(cls, input: Attribute, cotangent: Attribute, *, stride: Sequence[int],
              padding: Sequence[int], dilation: Sequence[int], groups: int,
              kernel: Sequence[int]) -> Attribute:
        _, c, _, _ = _rank4(cls.name, input, "input", "N, C, H, W")
        _, o, _, _ = _rank4(cls.name, cotangent, "cotangent", "N, O, OH, OW")
        _check(len(kernel) == 2, cls.name, f"kernel {list(kernel)} needs 2 dims")
        _check(groups >= 1 and c % groups == 0, cls.name,
               f"groups={groups} must divide the input channels of {input}")
        w = tensor_type([o, c // groups, *kernel], input.get_element_type())
        forward = Conv2dOp.infer(input, w, stride=stride, padding=padding, dilation=dilation,
                                 groups=groups)
        _expect_forward(cls.name, cotangent, forward, "cotangent")
        return w

    def derived_params(self) -> dict[str, Any]:
        return {"kernel": self.result.type.get_shape()[2:]}


@irdl_op_definition
class MaxPool2dBackwardOp(TapeOp):
    """The input cotangent of `tape.maxpool2d`: each window's cotangent goes to the elements
    that attain its max, split evenly among ties."""

    name = "tape.maxpool2d_backward"
    input = operand_def(TensorType)
    cotangent = operand_def(TensorType)
    result = result_def(TensorType)
    kernel = IntList.prop()
    stride = IntList.prop()
    padding = IntList.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("kernel"), IntList("stride"), IntList("padding"))

    @classmethod
    def infer(cls, input: Attribute, cotangent: Attribute, *, kernel: Sequence[int],
              stride: Sequence[int], padding: Sequence[int]) -> Attribute:
        forward = MaxPool2dOp.infer(input, kernel=kernel, stride=stride, padding=padding)
        _expect_forward(cls.name, cotangent, forward, "cotangent")
        return input


@irdl_op_definition
class AvgPool2dBackwardOp(TapeOp):
    """The input cotangent of `tape.avgpool2d`: each window's cotangent, divided by kh * kw,
    added to every element of the window (H and W read off the result type)."""

    name = "tape.avgpool2d_backward"
    cotangent = operand_def(TensorType)
    result = result_def(TensorType)
    kernel = IntList.prop()
    stride = IntList.prop()
    padding = IntList.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (IntList("kernel"), IntList("stride"), IntList("padding"))
    DERIVED: ClassVar = ("spatial",)

    @classmethod
    def infer(cls, cotangent: Attribute, *, kernel: Sequence[int], stride: Sequence[int],
              padding: Sequence[int], spatial: Sequence[int]) -> Attribute:
        n, c, _, _ = _rank4(cls.name, cotangent, "cotangent", "N, C, OH, OW")
        _check(len(spatial) == 2, cls.name, f"spatial {list(spatial)} needs 2 dims")
        x = tensor_type([n, c, *spatial], cotangent.get_element_type())
        forward = AvgPool2dOp.infer(x, kernel=kernel, stride=stride, padding=padding)
        _expect_forward(cls.name, cotangent, forward, "cotangent")
        return x

    def derived_params(self) -> dict[str, Any]:
        return {"spatial": self.result.type.get_shape()[2:]}


# ----------------------------------------------------------------------------------------------
# Fused elementwise groups


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
class FusedOp(TapeOp):
    """A group of elementwise ops as one op, for one loop: the operands broadcast (numpy rules)
    to the result shape, and the body computes one element from one element of each, on rank-0
    tensors, with elementwise tape ops:

        %r = tape.fused %a, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32> {
        ^bb0(%x: tensor<f32>, %y: tensor<f32>):
          %0 = tape.mul %x, %y : tensor<f32>
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
        types = [_any(cls.name, t, "input") for t in inputs]
        try:
            shape = np.broadcast_shapes(*(t.get_shape() for t in types))
        except ValueError:
            raise ShapeError(f"{cls.name}: inputs {', '.join(map(str, types))} do not "
                             "broadcast together") from None
        _check(len(body.args) == len(types), cls.name,
               f"the body takes {len(body.args)} elements for {len(types)} inputs")
        for arg, t in zip(body.args, types, strict=True):
            _check(arg.type == TensorType(t.get_element_type(), []), cls.name,
                   f"body argument {arg.type} must be the rank-0 {t.get_element_type()} of "
                   f"input {t}")
        last = body.last_op
        _check(isinstance(last, YieldOp), cls.name, "the body must end in tape.yield")
        for op in body.ops:
            _check(isinstance(op, (*ELEMENTWISE, YieldOp)) and all(
                r.type.get_shape() == () for r in op.results), cls.name,
                f"the body holds rank-0 elementwise ops only, not {op.name}")
        out = last.value.type
        return TensorType(out.get_element_type(), shape)

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


ELEMENTWISE_BINARY = (AddOp, SubOp, MulOp, DivOp, MaximumOp, MinimumOp, PowOp)
ELEMENTWISE_UNARY = (NegOp, ExpOp, LogOp, TanhOp, SigmoidOp, ReluOp, SqrtOp)
ELEMENTWISE = (*ELEMENTWISE_BINARY, *ELEMENTWISE_UNARY, CmpOp, SelectOp, CastOp, ConstantOp)
"""The ops a `tape.fused` body may hold: each result element depends on the same element of
each operand only."""
OPS: tuple[type[TapeOp], ...] = (
    *ELEMENTWISE_BINARY,
    *ELEMENTWISE_UNARY,
    CmpOp,
    SelectOp,
    ConstantOp,
    CastOp,
    BroadcastOp,
    ReshapeOp,
    PermuteOp,
    PadOp,
    SliceOp,
    UnfoldOp,
    FoldOp,
    ConcatOp,
    SumOp,
    MaxOp,
    MatmulOp,
    Conv2dOp,
    MaxPool2dOp,
    AvgPool2dOp,
    Conv2dBackwardInputOp,
    Conv2dBackwardWeightOp,
    MaxPool2dBackwardOp,
    AvgPool2dBackwardOp,
    FusedOp,
)

Tape = Dialect("tape", [*OPS, YieldOp], [])

