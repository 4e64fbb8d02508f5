"""What every tape op shares: its parameters (clauses), its short syntax, its builder and verifier.

A tape op is defined by three things (see `tapeml/dialects/tape/`):
  - `CLAUSES`, the op's parameters as they are stored (properties) and printed;
  - `infer(*operand_types, **params)`, its shape rule: the result type, or a `ShapeError`;
  - `derived_params()`, parameters read off the result type rather than stored (e.g. a reshape's
    target shape), so that `op.params` is exactly what `Op.build(*operands, **params)` takes.

From these, `TapeOp` gives every op the same builder (`build` infers the result type), verifier
(re-running the shape rule against the stated result type) and custom syntax:

    %r = tape.<op> [<keyword>,] %a, %b <clause> = <value> ... {attrs} : <types> [-> <result type>]

where `: T` alone means every operand and the result have type T, and `: T -> R` with several
operands means every operand has type T.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np
from xdsl.dialects.builtin import (
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    UnitAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import IRDLOperation, VarOperandDef, opt_prop_def, prop_def
from xdsl.parser import Parser
from xdsl.printer import Printer

from tapeml.errors import ShapeError

# ----------------------------------------------------------------------------------------------
# Clauses: one parameter each, stored as a property under its own name.


@dataclass(frozen=True)
class Clause:
    name: str

    @staticmethod
    def prop() -> Any:
        """The property definition to declare on the op under the clause's name."""
        raise NotImplementedError

    def to_attr(self, value: Any) -> Attribute | None:
        raise NotImplementedError

    def takes(self, value: Any) -> bool:
        """Whether `value` is of the Python type the clause stores (build's check)."""
        return True

    KIND: ClassVar[str] = ""
    """What the clause takes, for build's error."""

    def to_python(self, attr: Attribute | None) -> Any:
        raise NotImplementedError

    def parse(self, parser: Parser) -> Attribute | None:
        parser.parse_keyword(self.name)
        parser.parse_punctuation("=")
        return self.parse_value(parser)

    def parse_value(self, parser: Parser) -> Attribute:
        raise NotImplementedError

    def print(self, printer: Printer, attr: Attribute | None) -> None:
        printer.print_string(f" {self.name} = ")
        self.print_value(printer, attr)

    def print_value(self, printer: Printer, attr: Attribute | None) -> None:
        raise NotImplementedError


_I64_RANGE = range(-(1 << 63), 1 << 63)


def _parse_i64(parser: Parser, name: str) -> int:
    """An integer of clause `name`, a parse error at it unless it fits the i64 it is stored as."""
    start = parser.pos
    value = parser.parse_integer(allow_boolean=False)
    if value not in _I64_RANGE:
        parser.raise_error(f"{name}: {value} does not fit i64", start, parser.pos)
    return value


def one_of(*kinds: type) -> Callable[[Any], bool]:
    """`lambda x: isinstance(x, kinds)`, decided once per type of x: isinstance against an
    xDSL op class goes through ABCMeta, a Python call per class of the tuple, and the passes
    ask it of every op (it was a tenth of tape-fuse)."""

    @functools.cache
    def of_kind(kind: type) -> bool:
        return issubclass(kind, kinds)

    return lambda x: of_kind(type(x))


@functools.lru_cache(maxsize=4096)
def _i64_array(values: tuple[int, ...]) -> DenseArrayBase:
    """The array of `values`, built once (attributes are immutable; xDSL's from_list was a
    tenth of tracing a GPT step)."""
    return DenseArrayBase.from_list(i64, values)


@functools.lru_cache(maxsize=4096)
def _i64_attr(value: int) -> IntegerAttr:
    return IntegerAttr(value, i64)


def _is_int(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)


@dataclass(frozen=True)
class IntList(Clause):
    """`name = [1, 2]`: a tuple of ints."""

    KIND: ClassVar[str] = "a sequence of ints"

    def takes(self, value: Any) -> bool:
        return not isinstance(value, str | bytes) and isinstance(value, Sequence | np.ndarray) \
            and all(map(_is_int, value))

    @staticmethod
    def prop() -> Any:
        return prop_def(DenseArrayBase.constr(i64))

    def to_attr(self, value: Sequence[int]) -> Attribute:
        return _i64_array(tuple(int(v) for v in value))

    def to_python(self, attr: Attribute | None) -> tuple[int, ...]:
        assert isinstance(attr, DenseArrayBase)
        return tuple(attr.get_values())

    def parse_value(self, parser: Parser) -> Attribute:
        values = parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE, lambda: _parse_i64(parser, self.name))
        return self.to_attr(values)

    def print_value(self, printer: Printer, attr: Attribute | None) -> None:
        printer.print_string("[" + ", ".join(str(v) for v in self.to_python(attr)) + "]")


@dataclass(frozen=True)
class Int(Clause):
    """`name = 3`."""

    KIND: ClassVar[str] = "an int"

    def takes(self, value: Any) -> bool:
        return _is_int(value)

    @staticmethod
    def prop() -> Any:
        return prop_def(IntegerAttr.constr(type=i64))

    def to_attr(self, value: int) -> Attribute:
        return _i64_attr(int(value))

    def to_python(self, attr: Attribute | None) -> int:
        assert isinstance(attr, IntegerAttr)
        return attr.value.data

    def parse_value(self, parser: Parser) -> Attribute:
        return self.to_attr(_parse_i64(parser, self.name))

    def print_value(self, printer: Printer, attr: Attribute | None) -> None:
        printer.print_string(str(self.to_python(attr)))


_SPECIAL_FLOATS = {"inf": math.inf, "nan": math.nan}


@dataclass(frozen=True)
class Float(Clause):
    """`name = 0.5` (an f64; `inf`, `-inf` and `nan` are written as words)."""

    KIND: ClassVar[str] = "a number"

    def takes(self, value: Any) -> bool:
        return isinstance(value, int | float | np.integer | np.floating) and \
            not isinstance(value, bool | np.bool_)

    @staticmethod
    def prop() -> Any:
        return prop_def(FloatAttr.constr(f64))

    def to_attr(self, value: float) -> Attribute:
        return FloatAttr(float(value), f64)

    def to_python(self, attr: Attribute | None) -> float:
        assert isinstance(attr, FloatAttr)
        return attr.value.data

    def parse_value(self, parser: Parser) -> Attribute:
        negative = parser.parse_optional_punctuation("-") is not None
        if word := parser.parse_optional_keyword_in(tuple(_SPECIAL_FLOATS)):
            value = _SPECIAL_FLOATS[word]
        elif (value := parser.parse_optional_float(allow_negative=False)) is None:
            value = parser.parse_integer(allow_boolean=False, allow_negative=False,
                                         context_msg=f" or float for {self.name}")
        return self.to_attr(-value if negative else value)

    def print_value(self, printer: Printer, attr: Attribute | None) -> None:
        value = self.to_python(attr)
        text = repr(value)  # the shortest text that reads back to the same f64
        if math.isfinite(value) and "." not in text:
            mantissa, exponent = text.split("e")  # MLIR floats need a '.': 1e+20 -> 1.0e+20
            text = f"{mantissa}.0e{exponent}"
        printer.print_string(text)


@dataclass(frozen=True)
class Flag(Clause):
    """A bare keyword `name`, present or absent: a bool."""

    KIND: ClassVar[str] = "True or False"

    def takes(self, value: Any) -> bool:
        return isinstance(value, bool | np.bool_)

    @staticmethod
    def prop() -> Any:
        return opt_prop_def(UnitAttr)

    def to_attr(self, value: bool) -> Attribute | None:
        return UnitAttr() if value else None

    def to_python(self, attr: Attribute | None) -> bool:
        return attr is not None

    def parse(self, parser: Parser) -> Attribute | None:
        return self.to_attr(parser.parse_optional_keyword(self.name) is not None)

    def print(self, printer: Printer, attr: Attribute | None) -> None:
        if attr is not None:
            printer.print_string(f" {self.name}")


@dataclass(frozen=True)
class Keyword(Clause):
    """One of a fixed set of words, written first: `tape.cmp lt, %a, %b`."""

    choices: tuple[str, ...] = ()

    @staticmethod
    def prop() -> Any:
        return prop_def(StringAttr)

    def to_attr(self, value: str) -> Attribute:
        if value not in self.choices:
            raise ShapeError(f"{self.name} must be one of {', '.join(self.choices)}, not {value!r}")
        return StringAttr(value)

    def to_python(self, attr: Attribute | None) -> str:
        assert isinstance(attr, StringAttr)
        return attr.data

    def parse(self, parser: Parser) -> Attribute | None:
        word = parser.parse_keyword_in(self.choices, f" (the {self.name})")
        parser.parse_punctuation(",")
        return StringAttr(word)

    def print(self, printer: Printer, attr: Attribute | None) -> None:
        printer.print_string(f" {self.to_python(attr)},")


# ----------------------------------------------------------------------------------------------
# The op base class.


def _type_of(value: SSAValue | Operation) -> Attribute:
    return SSAValue.get(value).type


class TapeOp(IRDLOperation):
    """Base of all tape ops: one result, parameters in `CLAUSES`, shape rule in `infer`."""

    CLAUSES: ClassVar[tuple[Clause, ...]] = ()
    DERIVED: ClassVar[tuple[str, ...]] = ()
    """Names of the parameters `derived_params` reads off the result type."""

    @classmethod
    def infer(cls, *operand_types: Attribute, **params: Any) -> Attribute:
        """The result type for these operand types and parameters; raises `ShapeError`."""
        raise NotImplementedError

    def derived_params(self) -> dict[str, Any]:
        """Parameters that live in the result type rather than in a property."""
        return {}

    @property
    def params(self) -> dict[str, Any]:
        """The op's parameters as Python values: `type(op).build(*op.operands, **op.params)`
        rebuilds an equal op."""
        stored = {c.name: c.to_python(self.properties.get(c.name)) for c in self.CLAUSES}
        return stored | self.derived_params()

    @classmethod
    def normalize(cls, operand_types: Sequence[Attribute], params: dict[str, Any]) -> dict:
        """Bring user-given parameters to canonical form (e.g. negative axes); default: as is."""
        return params

    @classmethod
    def build(cls, *operands: SSAValue | Operation, **params: Any) -> Self:
        """Create the op, its result type inferred by the shape rule."""
        expected = {c.name for c in cls.CLAUSES} | set(cls.DERIVED)
        if unknown := set(params) - expected:
            raise TypeError(f"{cls.name} got unexpected parameters {sorted(unknown)}")
        params = {c.name: False for c in cls.CLAUSES if isinstance(c, Flag)} | params
        if missing := expected - set(params):
            raise TypeError(f"{cls.name} needs the parameters {sorted(missing)}")
        types = [_type_of(o) for o in operands]
        params = cls.normalize(types, params)
        for clause in cls.CLAUSES:  # (after normalize: axes=-1 is (-1,) there)
            if not clause.takes(params[clause.name]):
                raise TypeError(f"{cls.name}: {clause.name} must be {clause.KIND}, got "
                                f"{params[clause.name]!r}")
        result_type = cls.infer(*types, **params)
        properties = {}
        for clause in cls.CLAUSES:
            attr = clause.to_attr(params[clause.name])
            if attr is not None:
                properties[clause.name] = attr
        return cls.create(
            operands=[SSAValue.get(o) for o in operands],
            result_types=[result_type],
            properties=properties,
        )

    def verify_(self) -> None:
        actual = self.results[0].type
        if self.DERIVED and any(d < 0 for d in getattr(actual, "get_shape", tuple)()):
            # the result type carries parameters (e.g. a reshape's shape): they must be static
            raise ShapeError(f"{self.name}: dynamic dims are not supported; the result is "
                             f"{actual}")
        expected = self.infer(*(o.type for o in self.operands), **self.params)
        if expected != actual:
            raise ShapeError(
                f"{self.name}: result type {actual} does not match {expected}, "
                f"the type its operands and parameters give"
            )

    # -- syntax --------------------------------------------------------------------------------

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        properties: dict[str, Attribute] = {}
        for clause in cls.CLAUSES:
            if isinstance(clause, Keyword):
                properties[clause.name] = clause.parse(parser)
        pos = parser.pos
        operands = []
        if (first := parser.parse_optional_unresolved_operand()) is not None:
            operands.append(first)
            while parser.parse_optional_punctuation(","):
                operands.append(parser.parse_unresolved_operand())
        defs = cls.get_irdl_definition().operands
        if not any(isinstance(d, VarOperandDef) for _, d in defs) and len(operands) != len(defs):
            parser.raise_error(f"{cls.name} takes {len(defs)} operand"
                               f"{'s' if len(defs) != 1 else ''}, got {len(operands)}", pos,
                               parser.pos)
        for clause in cls.CLAUSES:
            if not isinstance(clause, Keyword) and (attr := clause.parse(parser)) is not None:
                properties[clause.name] = attr
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        types_start = parser.pos
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        types_end = parser.pos
        if parser.parse_optional_punctuation("->"):
            result_type = parser.parse_type()
            if len(types) == 1 and len(operands) > 1:
                types = types * len(operands)
        else:
            if len(types) != 1:
                parser.raise_error("expected '->' and a result type after several operand types",
                                   types_start, types_end)
            result_type = types[0]
            types = types * len(operands)
        resolved = parser.resolve_operands(operands, types, pos)
        return cls.create(
            operands=resolved,
            result_types=[result_type],
            properties=properties,
            attributes=attributes,
        )

    def print(self, printer: Printer) -> None:
        for clause in self.CLAUSES:
            if isinstance(clause, Keyword):
                clause.print(printer, self.properties.get(clause.name))
        if self.operands:
            printer.print_string(" ")
            printer.print_list(self.operands, printer.print_operand)
        for clause in self.CLAUSES:
            if not isinstance(clause, Keyword):
                clause.print(printer, self.properties.get(clause.name))
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        operand_types = [o.type for o in self.operands]
        result_type = self.results[0].type
        if operand_types and all(t == result_type for t in operand_types):
            printer.print_attribute(result_type)
            return
        if len(operand_types) > 1 and all(t == operand_types[0] for t in operand_types):
            operand_types = operand_types[:1]
        printer.print_list(operand_types, printer.print_attribute)
        printer.print_string(" -> ")
        printer.print_attribute(result_type)
