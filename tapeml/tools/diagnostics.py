"""Located diagnostics for the command-line tools, in MLIR's `file:line:col: error: message` form.

xDSL's parser knows where a syntax error is but forgets where each op came from, so a verifier
failure would only print the op. `LocatingParser` remembers every op's source span, and
`verify_located` verifies op by op so the first failure is reported at its line.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Span


class UserError(Exception):
    """A mistake in the tool's input or arguments; reported as one message, no traceback."""


def require_utf8(text: bytes, name: str) -> None:
    """A UserError unless `text` is UTF-8 (the parser would fail with a traceback)."""
    try:
        text.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserError(f"{name}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def located(span: Span | None, message: str, name: str = "<input>") -> str:
    """`file:line:col: error: message` and the source line with the span underlined."""
    if span is None:
        return f"{name}: error: {message}"
    loc = span.get_location()
    context = span.print_with_context().split("\n", 1)[1]  # drop xDSL's own location line
    return f"{loc}: error: {message}\n{context}".rstrip("\n")


def format_parse_error(error: ParseError) -> str:
    return located(error.span, error.msg)


class LocatedParseError(ParseError):
    """A ParseError that prints as `file:line:col: error: message` (xDSL prints it itself under
    --parsing-diagnostics)."""

    def __str__(self) -> str:
        return format_parse_error(self)


class LocatingParser(Parser):
    """A Parser that records the source span of every op it parses."""

    def __init__(self, *args, line_offset: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.spans: dict[Operation, Span] = {}
        self.line_offset = line_offset

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        op = super().parse_operation()
        self.spans[op] = replace(start, line_offset=self.line_offset)
        return op


def verify_located(module: ModuleOp, spans: dict[Operation, Span], name: str) -> None:
    """Verify `module`; on failure raise a VerifyException whose message is located at the
    innermost failing op's source line (or names the op when it has no source)."""
    try:
        module.verify()
    except VerifyException as error:
        for op in module.walk(region_first=True):  # innermost first: a region reports its ops
            try:
                op.verify(verify_nested_ops=False)
            except VerifyException as inner:
                message = str(inner).split("\n", 1)[0]
                if op in spans:
                    raise VerifyException(located(spans[op], message, name)) from None
                raise VerifyException(f"{name}: error: {message}\n  in: {op}") from None
        raise VerifyException(located(None, str(error), name)) from None


def fail(tool: str, message: str) -> int:
    """Print a diagnostic on stderr; the exit status for a user's mistake."""
    print(message if ": error: " in message else f"{tool}: error: {message}", file=sys.stderr)
    return 1
