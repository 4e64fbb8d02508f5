"""Located diagnostics for the command-line tools, in MLIR's `file:line:col: error: message` form.

xDSL's parser knows where a syntax error is but forgets where each op came from, so a verifier
failure would only print the op. `LocatingParser` remembers every op's source span (and reports
some parse errors where they are rather than where xDSL does), and `verify_located` verifies op
by op, dominance included, so the first failure is reported at its line.
"""

from __future__ import annotations

import math
import os
import re
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace

from xdsl.dialects.builtin import (
    AnyDenseElement,
    DenseIntOrFPElementsAttr,
    ModuleOp,
    RankedStructure,
    StringAttr,
)
from xdsl.ir import Attribute, AttributeInvT, Block, Operation, Region, SSAValue
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.traits import SymbolTable
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Span, Token
from xdsl.utils.mlir_lexer import MLIRTokenKind

from tapeml.dialects.dominance import Dominance, dominance_error
from tapeml.dialects.tape import dense_literal_errors


class UserError(Exception):
    """A mistake in the tool's input or arguments; reported as one message, no traceback."""


def require_utf8(text: bytes, name: str) -> None:
    """A UserError unless `text` is UTF-8 (the parser would fail with a traceback)."""
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserError(f"{name}: not UTF-8 text ({error.reason} at byte {error.start})") from None


_COMMENT = re.compile(rb"//[^\n]*")


def holds_nothing(text: bytes) -> bool:
    """`text` (MLIR) is empty but for comments and white space."""
    return not _COMMENT.sub(b"", text).strip()


def located(span: Span, message: str) -> str:
    """`file:line:col: error: message` and the source line with the span underlined."""
    loc = span.get_location()
    context = span.print_with_context().split("\n", 1)[1]  # drop xDSL's own location line
    return f"{loc}: error: {message}\n{context}".rstrip("\n")


def format_parse_error(error: ParseError) -> str:
    # xDSL 0.75's lexer leaves a placeholder of one message unformatted
    message = error.msg.replace("{first_char}", f"'{error.span.text[:1]}'")
    return located(error.span, message)


class LocatedParseError(ParseError):
    """A ParseError that prints as `file:line:col: error: message` (xDSL prints it itself under
    --parsing-diagnostics)."""

    def __str__(self) -> str:
        return format_parse_error(self)


class LocatingParser(Parser):
    """A Parser that records the source span of every op it parses and the source name of every
    value it defines, and reports these mistakes where they are, which xDSL does not:
      - an unknown op at its name (xDSL: at the token after it);
      - a dense literal's count or type mismatch, or a value its element type cannot hold, at
        the literal (xDSL: at the next token, or an OverflowError);
      - an undefined value at its first use (xDSL: at the end of the input);
      - a region that is never closed with a message (xDSL: an empty one);
      - a block label declared twice after a use (xDSL: a KeyError);
      - a float literal beyond the range of f64 (xDSL: inf);
      - an attribute whose values its type refuses (`1000 : i8`) at the attribute, and an op
        whose operand or attribute its syntax refuses as it is read, at the op (xDSL: not
        located)."""

    def __init__(self, *args, line_offset: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.spans: dict[Operation, Span] = {}
        self.names: dict[SSAValue, str] = {}
        self.line_offset = line_offset
        self._last_token: Token | None = None
        self._first_uses: dict[str, Span] = {}
        self._op_names: list[str] = []
        """The names of the ops being parsed, outermost first."""
        self._open_regions: list[tuple[Span, dict[str, Span]]] = []
        """Where each region being parsed opens, and its block labels so far."""

    def _consume_token(self, expected_kind: MLIRTokenKind | None = None) -> Token:
        token = super()._consume_token(expected_kind)
        if token.kind == MLIRTokenKind.FLOAT_LIT and math.isinf(float(token.text)):
            self.raise_error("floating point value too large", token.span)  # MLIR's words
        self._last_token = token
        return token

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        depth = len(self._op_names)
        try:
            op = super().parse_operation()
        except VerifyException as error:  # a constraint checked as the op is read
            assert self._last_token is not None
            name = self._op_names[depth] if len(self._op_names) > depth else "operation"
            span = Span(start.start, self._last_token.span.end, self.lexer.input)
            raise ParseError(span, f"{name}: {error}") from None
        finally:
            del self._op_names[depth:]
        self.spans[op] = replace(start, line_offset=self.line_offset)
        return op

    def _get_op_by_name(self, name: str) -> type[Operation]:
        self._op_names.append(name)
        try:
            return super()._get_op_by_name(name)
        except ParseError as error:  # raised after the name: point at the name
            assert self._last_token is not None
            raise ParseError(self._last_token.span, error.msg) from None

    def parse_dense_int_or_fp_elements_attr(
        self, type: RankedStructure[AnyDenseElement] | None
    ) -> DenseIntOrFPElementsAttr:
        # called once `dense` is read (the last token) when the literal's type comes after it
        start = None if self._last_token is None else self._last_token.span.start
        with dense_literal_errors(self, start=start if type is None else None):
            return super().parse_dense_int_or_fp_elements_attr(type)

    def parse_optional_attribute(self) -> Attribute | None:
        start = self.pos
        try:
            return super().parse_optional_attribute()
        except VerifyException as error:  # an attribute built as it is read refuses its values
            assert self._last_token is not None
            span = Span(start, self._last_token.span.end, self.lexer.input)
            raise ParseError(span, str(error)) from None

    def _register_ssa_definition(self, name: str, values: Sequence[SSAValue], span: Span) -> None:
        super()._register_ssa_definition(name, values, span)
        for i, value in enumerate(values):
            self.names[value] = f"%{name}" if len(values) == 1 else f"%{name}#{i}"

    def resolve_operand(self, operand: UnresolvedOperand, type: AttributeInvT
                        ) -> SSAValue[AttributeInvT]:
        if operand.operand_name not in self.ssa_values:
            self._first_uses.setdefault(operand.operand_name, operand.span)
        return super().resolve_operand(operand, type)

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        try:
            return super().parse_module(allow_implicit_module)
        except ParseError as error:
            if not error.msg.startswith("values used but not defined"):
                raise
            name = min(self.forward_ssa_references, key=lambda n: self._first_uses[n].start)
            raise ParseError(self._first_uses[name], f"use of undefined value %{name}") from None

    def parse_optional_region(self, arguments: Sequence[Parser.Argument] | None = None
                              ) -> Region | None:
        self._open_regions.append((self._current_token.span, {}))
        try:
            return super().parse_optional_region(arguments)
        finally:
            self._open_regions.pop()

    def _where(self, span: Span) -> str:
        line, column = span.get_location()[1:]
        return f"{line + self.line_offset}:{column}"

    def _parse_block(self) -> Block:
        # a region's parser calls this for anything but its closing '}'
        opened, labels = self._open_regions[-1]
        label = self._current_token
        if label.kind != MLIRTokenKind.CARET_IDENT:
            what = ("the end of the input" if label.kind == MLIRTokenKind.EOF
                    else f"'{label.text}'")
            self.raise_error(f"expected an operation or '}}' to close the region opened at "
                             f"{self._where(opened)}, found {what}")
        if label.text in labels:  # xDSL's own check misses a block referenced before both
            self.raise_error(f"re-declaration of block '{label.text[1:]}', first declared at "
                             f"{self._where(labels[label.text])}", label.span)
        labels[label.text] = label.span
        return super()._parse_block()


def verify_located(module: ModuleOp, spans: Mapping[Operation, Span],
                   names: Mapping[SSAValue, str], name: str) -> None:
    """Verify `module`, and that every operand's definition dominates its use (xDSL checks
    no dominance); on failure raise a VerifyException whose message is located at the innermost
    failing op's source line (or names the op when it has no source). `names` are the values'
    source names."""
    try:
        module.verify()
    except Exception as error:
        if not _verify_failure(error):
            raise
        if (twice := _redefined_symbol(module)) is not None:  # else reported at the module
            first, second, symbol = twice
            where = f" (first defined at {_line_col(spans[first])})" if first in spans else ""
            message = f"redefinition of symbol @{symbol}{where}"
            raise VerifyException(_at(second, message, spans, name)) from None
        op, message = _first_failure(module)
        raise VerifyException(_at(op, message, spans, name)) from None
    dominance = Dominance()
    for op in module.walk():
        if (message := dominance_error(op, dominance, names)) is not None:
            raise VerifyException(_at(op, message, spans, name))


def _redefined_symbol(module: ModuleOp) -> tuple[Operation, Operation, str] | None:
    """The first two ops of a symbol table that define the same symbol, and the symbol."""
    for table in module.walk():
        if not table.has_trait(SymbolTable) or len(table.regions[0].blocks) != 1:
            continue
        seen: dict[str, Operation] = {}
        for op in table.regions[0].block.ops:
            if not isinstance(symbol := op.get_attr_or_prop("sym_name"), StringAttr):
                continue
            if symbol.data in seen:
                return seen[symbol.data], op, symbol.data
            seen[symbol.data] = op
    return None


def _line_col(span: Span) -> str:
    _, line, column = span.get_location()
    return f"{line}:{column}"


def _first_failure(module: ModuleOp) -> tuple[Operation, str]:
    """The innermost op that fails to verify on its own, else with its regions (the structure
    of their blocks), and the first line of its message."""
    for nested in (False, True):
        for op in module.walk(region_first=True):
            try:
                op.verify(verify_nested_ops=nested)
            except Exception as error:
                if not _verify_failure(error):
                    raise
                return op, str(error).split("\n", 1)[0]
    raise AssertionError("called on a module that verifies")


def _verify_failure(error: Exception) -> bool:
    """Whether `error`, raised by verify(), says the IR is invalid: a VerifyException, or a
    bare Exception, which some of xDSL's verifiers raise (memref.store with too few indices:
    "Expected an index for each dimension"); any other type is a bug, not the input's."""
    return isinstance(error, VerifyException) or type(error) is Exception


def _at(op: Operation, message: str, spans: Mapping[Operation, Span], name: str) -> str:
    if op in spans:
        return located(spans[op], message)
    return f"{name}: error: {message} (in {op.name})"


def fail(tool: str, message: str) -> int:
    """Print a diagnostic on stderr; the exit status for a user's mistake."""
    print(message if ": error: " in message else f"{tool}: error: {message}", file=sys.stderr)
    return 1


BROKEN_PIPE = 128 + signal.SIGPIPE
"""The exit status when stdout's reader has gone (`tapeml-opt f.mlir | head -1`): 141, what the
shell reports for cat or grep, which SIGPIPE ends, quietly. Not 0: under `set -o pipefail` the
output was cut short (LLVM's tools, mlir-opt's, exit quietly with another non-zero status, 74).
Python ignores SIGPIPE, and raises a BrokenPipeError instead."""


def broken_pipe() -> int:
    """Quiet the exit after a BrokenPipeError on stdout; its exit status."""
    discard_stdout()
    return BROKEN_PIPE


def discard_stdout() -> None:
    """Point stdout at /dev/null: what Python holds for it, which could not be written, would
    fail again as Python flushes it at exit (a message, and exit status 120)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


@contextmanager
def writing(name: str) -> Iterator[None]:
    """Writes to `name` (stdout, or the output file): a failed one is a UserError that names it,
    which the OSError of a write does not (`cannot write out.mlir: No space left on device`).
    A BrokenPipeError goes through: the reader has gone, and broken_pipe ends quietly."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as error:
        if name == "stdout":
            discard_stdout()
        raise UserError(f"cannot write {name}: {error.strerror}") from None
