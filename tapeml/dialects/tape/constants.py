"""`tape.constant` and its dense literals: numpy arrays to dense attributes and back
(`numpy_to_dense`, `dense_to_numpy`), printing them so that they parse back to the same bits
(`print_dense`), and locating a mistake in one at the literal itself (`dense_literal_errors`,
`DenseLiteralError`)."""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Self

import numpy as np
from xdsl.dialects.builtin import (
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    TensorType,
)
from xdsl.ir import Attribute
from xdsl.irdl import irdl_op_definition, prop_def, result_def, traits_def
from xdsl.parser import Parser
from xdsl.parser.attribute_parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import ParseError
from xdsl.utils.lexer import Position, Span, Token
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRTokenKind

from tapeml.dialects.base import TapeOp
from tapeml.dialects.tape.types import any_tensor, check, dtype_of, element_type, tensor_type

__all__ = [
    "ConstantOp",
    "DenseLiteralError",
    "dense_literal_errors",
    "dense_to_numpy",
    "first_element",
    "is_splat",
    "numpy_to_dense",
    "print_dense",
]


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
        any_tensor(self.name, t, "value")
        check(t == self.result.type, self.name,
              lambda: f"value type {t} does not match the result type {self.result.type}")

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
    bits = flat.view(f"u{flat.dtype.itemsize}")  # each element's bits
    if flat.size > 1 and np.all(bits == bits[0]):
        flat = flat[:1]  # splat (every element the same bits): printed dense<v>
    return DenseIntOrFPElementsAttr(t, BytesAttr(flat.tobytes()))


def is_splat(attr: DenseIntOrFPElementsAttr) -> bool:
    """Every element of the literal the same bits (-0.0 is not 0.0; NaN is NaN), found from
    its bytes without making the array (a splat made by numpy_to_dense holds one element)."""
    t = attr.type
    assert isinstance(t, TensorType)
    data = attr.data.data
    width = np.dtype(dtype_of(t)).itemsize
    if math.prod(t.get_shape()) == 0 or len(data) < width:
        return False
    if len(data) == width:
        return True
    bits = np.frombuffer(data, dtype=f"u{width}")
    if bits.dtype == np.uint8 and dtype_of(t) == np.bool_:
        bits = bits != 0  # a parsed i1 true is all ones
    return bool((bits == bits[0]).all())


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


_FLOAT_BITS = {Float16Type: np.float16, Float32Type: np.float32, Float64Type: np.float64}


def _hex_elements_as_bits() -> None:
    """A hex element of a float dense literal (`dense<[0x7FC00000, 1.0]> : tensor<2xf32>`) is
    MLIR's spelling of the float's bit pattern, and xDSL's printer writes one for inf, NaN and
    some finite floats (1048576.0 in f32) in the forms print_dense does not print: the generic
    op form, a memref.global's initial value. xDSL 0.75's parser reads it as the integer's
    value (NaN became 2143289344.0); this makes its tensor literals read it as MLIR does, for
    every parser in the process (tapeml-opt, tapeml-run, Program.parse, stock xdsl-opt)."""
    element = AttrParser._TensorLiteralElement
    to_type = element.to_type
    if getattr(to_type, "reads_hex_as_bits", False):
        return

    def bits_aware(self: Any, parser: AttrParser, t: Any) -> Any:
        dtype = _FLOAT_BITS.get(type(t))
        value = self.value
        if dtype is not None and isinstance(value, int) and not isinstance(value, bool) and \
                self.span.text.lstrip("-")[:2] in ("0x", "0X"):
            if self.span.text.startswith("-"):  # (MLIR's: a bit pattern takes no sign)
                parser.raise_error(f"hex literal {self.span.text} of {t} is a bit pattern: "
                                   "it takes no sign", at_position=self.span)
            width = np.dtype(dtype).itemsize * 8
            if not 0 <= value < 2**width:
                parser.raise_error(f"hex literal {self.span.text} does not fit in {t}'s "
                                   f"{width} bits", at_position=self.span)
            return float(np.array(value, np.dtype(f"uint{width}")).view(dtype))
        return to_type(self, parser, t)

    bits_aware.reads_hex_as_bits = True  # type: ignore[attr-defined]
    element.to_type = bits_aware


_hex_elements_as_bits()


def dense_to_numpy(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The array a dense attribute holds (a fresh, writable copy)."""
    t = attr.type
    assert isinstance(t, TensorType)
    flat = np.frombuffer(attr.data.data, dtype=dtype_of(t))
    if flat.dtype == np.bool_:  # a parsed i1 true is all ones (0xFF); numpy compares the bytes
        flat = flat.view(np.uint8) != 0
    shape = t.get_shape()
    if flat.size == 1 and math.prod(shape) != 1:
        return np.full(shape, flat[0], dtype=flat.dtype)
    return flat.reshape(shape).copy()


def first_element(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The literal's first element as a rank-0 array (a splat's value), read from its bytes
    without making the array (dense_to_numpy of a splat makes all of it)."""
    t = attr.type
    assert isinstance(t, TensorType)
    dtype = np.dtype(dtype_of(t))
    first = np.frombuffer(attr.data.data[:dtype.itemsize], dtype=dtype)
    if first.dtype == np.bool_:  # (as dense_to_numpy: a parsed i1 true is all ones)
        first = first.view(np.uint8) != 0
    return first.reshape(()).copy()


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
