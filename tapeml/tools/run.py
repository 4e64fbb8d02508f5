"""`tapeml-run FILE [--symbol f] [--args A ...]`: interpret a function on given inputs.

Each argument is an MLIR literal (`'dense<[1.0, 2.0]> : tensor<2xf32>'`, `'2.5 : f32'`) or the
path of a `.npy` file. Results are printed one per line as MLIR literals. A mistake in the file
or the arguments is a located diagnostic on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    TensorType,
    i1,
)
from xdsl.printer import Printer
from xdsl.universe import Universe
from xdsl.utils.exceptions import DiagnosticException, ParseError
from xdsl.utils.mlir_lexer import MLIRTokenKind

from tapeml import universe
from tapeml.dialects.tape import dense_to_numpy, element_type, numpy_to_dense, print_dense
from tapeml.errors import InterpretError
from tapeml.tools.diagnostics import (
    LocatingParser,
    UserError,
    fail,
    format_parse_error,
    holds_nothing,
    located,
    require_utf8,
    verify_located,
)

TOOL = "tapeml-run"


def _context() -> Context:
    ctx = Context()
    for name, factory in (Universe.get_multiverse().all_dialects | universe.DIALECTS).items():
        if name not in ctx.registered_dialect_names:
            ctx.register_dialect(name, factory)
    return ctx


def _load_module(ctx: Context, path: str) -> ModuleOp:
    with open(path, "rb") as f:
        text = f.read()
    require_utf8(text, path)
    if holds_nothing(text):  # (tapeml-opt reads it as an empty module)
        raise UserError(f"{path}: the file holds no function to run (it is empty)")
    parser = LocatingParser(ctx, text, path)
    module = parser.parse_module()
    verify_located(module, parser.spans, parser.names, path)
    from tapeml.interpreters import scalar_op_on_tensors

    if (found := scalar_op_on_tensors(module)) is not None:
        op, message = found
        raise UserError(located(parser.spans[op], message) if op in parser.spans else message)
    return module


def _parse_arg(ctx: Context, text: str, index: int) -> Any:
    if text.endswith(".npy"):
        try:
            return np.load(text, allow_pickle=False)
        except ValueError as error:
            raise InterpretError(f"argument {index}: {text} is not a numeric .npy file "
                                 f"({error})") from None
    parser = LocatingParser(ctx, text, f"argument {index}")
    attr = parser.parse_attribute()
    if parser._current_token.kind != MLIRTokenKind.EOF:
        parser.raise_error("unexpected text after the literal")
    if isinstance(attr, DenseIntOrFPElementsAttr):
        if not isinstance(attr.type, TensorType):
            raise InterpretError(f"argument {index}: a dense literal is typed as a tensor "
                                 f"(dense<...> : tensor<...>), got {attr.type}")
        return dense_to_numpy(attr)
    if isinstance(attr, FloatAttr):  # typed, so the interpreter can check it
        return np.dtype(f"float{attr.type.bitwidth}").type(attr.value.data)
    if isinstance(attr, IntegerAttr):  # typed too: an i32 literal is no f32 tensor
        width = attr.type.width.data if hasattr(attr.type, "width") else 64
        return np.dtype(f"int{max(8, width)}").type(attr.value.data)
    raise InterpretError(f"argument {index}: expected a dense<...> literal, a number or a .npy "
                         f"file, got {text!r}")


def _format_result(value: Any) -> str:
    """A result as the MLIR literal that `--args` would accept back."""
    out = io.StringIO()
    printer = Printer(stream=out)
    if isinstance(value, np.ndarray) and value.dtype == np.bool_:
        t = TensorType(i1, value.shape)
        printer.print_attribute(DenseIntOrFPElementsAttr.from_list(t, value.ravel().tolist()))
    elif isinstance(value, np.ndarray):
        print_dense(printer, numpy_to_dense(value))
    elif isinstance(value, np.floating):
        t = element_type(value.dtype)
        printer.print_attribute(FloatAttr(float(value), t))
    else:
        printer.print_attribute(IntegerAttr(int(value), 64))
    return out.getvalue()


def _default_symbol(module: ModuleOp) -> str:
    names = [op.sym_name.data for op in module.walk() if isinstance(op, func.FuncOp)]
    if len(names) == 1:
        return names[0]
    return "main"


def _require_body(module: ModuleOp, symbol: str) -> None:
    """A UserError when @symbol is only declared: there is nothing to run."""
    for op in module.walk():
        if isinstance(op, func.FuncOp) and op.sym_name.data == symbol and not op.body.blocks:
            raise UserError(f"@{symbol} is only declared: it has no body to run")


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=TOOL, description=__doc__.split("\n\n")[0])
    parser.add_argument("input_file", help="an .mlir file")
    parser.add_argument("--symbol", help="the function to run (default: the only one, or main)")
    parser.add_argument("--args", nargs="*", default=[], metavar="ARG",
                        help="inputs: MLIR literals or .npy files")
    args = parser.parse_args(argv)
    ctx = _context()
    module = _load_module(ctx, args.input_file)
    inputs = [_parse_arg(ctx, a, i) for i, a in enumerate(args.args)]
    symbol = args.symbol or _default_symbol(module)
    _require_body(module, symbol)
    from tapeml.interpreters import interpret  # here: a mistake in the input is found sooner

    results = interpret(module, symbol, *inputs)
    for value in results:
        print(_format_result(value))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(argv)
    except ParseError as error:
        return fail(TOOL, format_parse_error(error))
    except (DiagnosticException, InterpretError, UserError) as error:
        return fail(TOOL, str(error))
    except OSError as error:
        return fail(TOOL, f"cannot open {error.filename}: {error.strerror}")


if __name__ == "__main__":
    sys.exit(main())
