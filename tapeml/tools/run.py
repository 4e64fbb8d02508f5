"""`tapeml-run FILE [--symbol f] [--args A ...]`: interpret a function on given inputs.

FILE `-` is stdin. Each argument is an MLIR literal (`'dense<[1.0, 2.0]> : tensor<2xf32>'`,
`'2.5 : f32'`, `true`) or the path of a `.npy` file. Results are printed one per line as MLIR
literals, then, for a function on buffers (memref arguments, as `-p tape-to-loops` writes it),
the output buffers it wrote in place: those named out.*, or every memref argument where none
is. A mistake in the file or the arguments, or an op the interpreter fails on, is a located
diagnostic on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.format import MAGIC_PREFIX
from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    Signedness,
    TensorType,
    i1,
)
from xdsl.interpreter import Interpreter
from xdsl.ir import Attribute, Operation
from xdsl.printer import Printer
from xdsl.universe import Universe
from xdsl.utils.exceptions import DiagnosticException, ParseError
from xdsl.utils.lexer import Span
from xdsl.utils.mlir_lexer import MLIRTokenKind

from tapeml import universe
from tapeml.dialects.names import value_names
from tapeml.dialects.tape import dense_to_numpy, numpy_to_dense, print_dense
from tapeml.errors import InterpretError
from tapeml.tools.diagnostics import (
    LocatingParser,
    UserError,
    broken_pipe,
    fail,
    format_parse_error,
    holds_nothing,
    located,
    require_utf8,
    verify_located,
    writing,
)

TOOL = "tapeml-run"


def _context() -> Context:
    ctx = Context()
    for name, factory in (Universe.get_multiverse().all_dialects | universe.DIALECTS).items():
        if name not in ctx.registered_dialect_names:
            ctx.register_dialect(name, factory)
    return ctx


def _load_module(ctx: Context, path: str, spans: dict[Operation, Span] | None = None
                 ) -> ModuleOp:
    """The verified module in the file at `path` (stdin for `-`); `spans`, where given, gets
    its ops' source."""
    text, path = _read(path)
    require_utf8(text, path)
    if holds_nothing(text):  # (tapeml-opt reads it as an empty module)
        raise UserError(f"{path}: the file holds no function to run (it is empty)")
    parser = LocatingParser(ctx, text, path)
    module = parser.parse_module()
    verify_located(module, parser.spans, parser.names, path)
    if spans is not None:
        spans.update(parser.spans)
    from tapeml.interpreters import scalar_op_on_tensors

    if (found := scalar_op_on_tensors(module)) is not None:
        op, message = found
        raise UserError(located(parser.spans[op], message) if op in parser.spans else message)
    return module


def _read(path: str) -> tuple[bytes, str]:
    """The program's text and its name in messages: `-` is stdin, as for tapeml-opt."""
    if path == "-":
        return sys.stdin.buffer.read(), "stdin"
    with open(path, "rb") as f:
        return f.read(), path


def _parse_arg(ctx: Context, text: str, index: int) -> Any:
    if text.endswith(".npy"):
        return _load_npy(text, index)
    if text.endswith(".npz"):  # (else read as a literal: "attribute expected")
        raise InterpretError(f"argument {index}: {text}: tapeml-run takes one array per .npy "
                             "file, not an .npz archive of several")
    parser = LocatingParser(ctx, text, f"argument {index}")
    attr = parser.parse_attribute()
    if parser._current_token.kind != MLIRTokenKind.EOF:
        parser.raise_error("unexpected text after the literal")
    if isinstance(attr, DenseIntOrFPElementsAttr):
        if not isinstance(attr.type, TensorType):
            raise InterpretError(f"argument {index}: a dense literal is typed as a tensor "
                                 f"(dense<...> : tensor<...>), got {attr.type}")
        return dense_to_numpy(attr)
    if isinstance(attr, FloatAttr | IntegerAttr):  # typed: an i32 literal is no f32 tensor
        if (dtype := _scalar_dtype(attr.type)) is None:
            raise InterpretError(f"argument {index}: tapeml-run passes numbers of type i1, i8, "
                                 f"i16, i32, i64, index, f16, f32 or f64, not {attr.type}")
        return dtype.type(attr.value.data != 0 if dtype == np.bool_ else attr.value.data)
    raise InterpretError(f"argument {index}: expected a dense<...> literal, a number or a .npy "
                         f"file, got {text!r}")


def _load_npy(path: str, index: int) -> np.ndarray:
    """The array of the .npy file at `path`, in this machine's byte order (a big-endian file's
    values are the same numbers, of the dtype the function takes)."""
    with open(path, "rb") as f:
        start = f.read(len(MAGIC_PREFIX))
        if start and start != MAGIC_PREFIX:  # numpy reads it as a pickle, which it refuses
            raise InterpretError(f"argument {index}: {path} is not an .npy file (it does not "
                                 "start as one does)")
        f.seek(0)
        try:
            array = np.load(f, allow_pickle=False)
        except (ValueError, EOFError) as error:  # EOFError: an empty file
            raise InterpretError(f"argument {index}: {path} is not a numeric .npy file "
                                 f"({error})") from None
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def _scalar_dtype(t: Attribute) -> np.dtype | None:
    """The numpy dtype of a number of type `t` (i1 is bool, as in a tensor), if it has one."""
    if t == i1:
        return np.dtype(np.bool_)
    if isinstance(t, IndexType):
        return np.dtype(np.int64)
    if isinstance(t, IntegerType) and t.width.data in (8, 16, 32, 64):
        sign = "u" if t.signedness.data == Signedness.UNSIGNED else ""
        return np.dtype(f"{sign}int{t.width.data}")
    if isinstance(t, Float16Type | Float32Type | Float64Type):
        return np.dtype(f"float{t.bitwidth}")
    return None


def _argument(f: func.FuncOp, index: int) -> str:
    """How messages name @f's argument `index` (as tapeml.interpret's do)."""
    arg = f.body.blocks[0].args[index]
    name = f" (%{arg.name_hint})" if arg.name_hint else ""
    return f"argument {index}{name} of @{f.sym_name.data}"


def _number(value: Any, t: Attribute, where: str) -> Any:
    """`value` for an argument of type `t` where that is a number, checked: it must be of
    that type (interpret checks a float's width, but takes any integer for an integer
    argument: '4294967295 : i64' for an i32 was -1). An i1 is passed as an integer (a
    tensor<i1> as bools); a rank-0 array (an .npy file's) as its number. Tensors go through."""
    wanted = _scalar_dtype(t)
    if wanted is None:
        return value
    if np.ndim(value) != 0:
        raise UserError(f"{where} must be {t}, got an array of shape {np.shape(value)}")
    given = np.asarray(value).dtype
    if given != wanted:
        article = "an" if given.name.startswith("int") else "a"
        raise UserError(f"{where} must be {t}, got {article} {given.name} value")
    number = np.asarray(value)[()]
    return int(number) if t == i1 else number


def _check_sizes(f: func.FuncOp, spans: dict[Operation, Span]) -> None:
    """A UserError, at its op (the function, for an argument), for a tensor of more elements
    than an index counts, which no array holds (its literal was said to hold too large a
    value)."""
    from tapeml.transforms.to_loops import TooManyElements, oversized

    if isinstance(found := oversized(f), TooManyElements):  # (a dynamic dim: the interpreter's)
        op, message = found.op, str(found).removeprefix("tape-to-loops: ")
        raise UserError(located(spans[op], message) if op in spans else message)


def _format_result(value: Any, t: Attribute) -> str:
    """A result of type `t` as the MLIR literal that `--args` would accept back."""
    out = io.StringIO()
    printer = Printer(stream=out)
    if isinstance(value, np.ndarray) and value.dtype == np.bool_:
        t = TensorType(i1, value.shape)
        printer.print_attribute(DenseIntOrFPElementsAttr.from_list(t, value.ravel().tolist()))
    elif isinstance(value, np.ndarray):
        print_dense(printer, numpy_to_dense(value))
    elif isinstance(value, np.floating):
        printer.print_attribute(FloatAttr(float(value), t))
    else:  # i1 prints as true or false
        printer.print_attribute(IntegerAttr(int(value), t))
    return out.getvalue()


def _default_symbol(module: ModuleOp) -> str:
    names = [op.sym_name.data for op in module.walk() if isinstance(op, func.FuncOp)]
    if len(names) == 1:
        return names[0]
    return "main"


def _function(module: ModuleOp, symbol: str) -> func.FuncOp | None:
    """@symbol (None where there is none: interpret names those there are); a UserError when it
    is only declared: there is nothing to run, or is an llvm.func (or the module has only
    those): the interpreter runs no llvm dialect."""
    functions = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    for op in functions:
        if op.sym_name.data == symbol:
            if not op.body.blocks:
                raise UserError(f"@{symbol} is only declared: it has no body to run")
            return op
    lowered = [op.sym_name.data for op in module.walk() if isinstance(op, llvm.FuncOp)]
    if symbol in lowered or (lowered and not functions):
        name = symbol if symbol in lowered else lowered[0]
        raise UserError(f"the module holds llvm.func @{name}: "
                        "tapeml-run runs tape and func programs (tapeml-opt's before "
                        "convert-loops-to-llvm), not the llvm dialect")
    return None


def _output_buffers(f: func.FuncOp) -> list[int]:
    """The indices of @f's output buffers: the memref arguments tape-to-loops names out.*, or
    every memref argument where none is so named."""
    buffers = [i for i, t in enumerate(f.function_type.inputs) if isinstance(t, MemRefType)]
    names = value_names(f.arg_attrs, list(f.body.blocks[0].args), "arg")
    return [i for i in buffers if names[i].startswith("out.")] or buffers


def _failure(error: Exception, spans: dict[Operation, Span]) -> str | None:
    """What the interpreter failed on, at the op: xDSL re-raises an op's failure (an assertion,
    often) with the whole module as a note, naming the op only there; None when no op failed."""
    frames, tb = [], error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is Interpreter._run_op.__code__:
            frames.append(tb.tb_frame.f_locals)
        tb = tb.tb_next
    # the innermost op that failed (its frame's names are xDSL's: none where they change)
    op, operands = (frames[-1].get("op"), frames[-1].get("inputs", ())) if frames else (None, ())
    if not isinstance(op, Operation):
        return None
    on = (f" on ({', '.join(map(str, operands))})"
          if all(isinstance(v, IntegerAttr | FloatAttr) for v in operands) else "")
    why = str(error).split("\n", 1)[0] or type(error).__name__
    message = f"{op.name}: the interpreter failed{on}: {why}"
    return located(spans[op], message) if op in spans else message


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=TOOL, description=__doc__.split("\n\n")[0])
    parser.add_argument("input_file", help="an .mlir file (- reads stdin)")
    parser.add_argument("--symbol", help="the function to run (default: the only one, or main)")
    parser.add_argument("--args", nargs="*", default=[], metavar="ARG",
                        help="inputs: MLIR literals or .npy files")
    args = parser.parse_args(argv)
    ctx = _context()
    spans: dict[Operation, Span] = {}
    module = _load_module(ctx, args.input_file, spans)
    symbol = args.symbol or _default_symbol(module)
    f = _function(module, symbol)
    if f is not None:
        _check_sizes(f, spans)
    inputs = [_parse_arg(ctx, a, i) for i, a in enumerate(args.args)]
    types = list(f.function_type.inputs) if f else []
    where = [_argument(f, i) for i in range(len(types))] if f else []
    inputs = [_number(v, t, w) for v, t, w in zip(inputs, types, where, strict=False)
              ] + inputs[len(types):]
    from tapeml.interpreters import interpret  # here: a mistake in the input is found sooner

    try:
        results = interpret(module, symbol, *inputs)
    except Exception as error:  # (an argument's mistake is raised before any op runs)
        if (message := _failure(error, spans)) is None:
            raise
        raise UserError(message) from None
    assert f is not None  # (else interpret said there is no @symbol)
    with writing("stdout"):  # flushed here: a failed write is reported, not Python's at exit
        for value, t in zip(results, f.function_type.outputs, strict=True):
            print(_format_result(value, t))
        for i in _output_buffers(f):  # written in place
            print(_format_result(inputs[i], types[i]))
        sys.stdout.flush()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return run(argv)
    except BrokenPipeError:
        return broken_pipe()
    except ParseError as error:
        return fail(TOOL, format_parse_error(error))
    except (DiagnosticException, InterpretError, UserError) as error:
        return fail(TOOL, str(error))
    except OSError as error:
        return fail(TOOL, f"cannot open {error.filename}: {error.strerror}")
    except MemoryError as error:  # (a splat of a huge type expands as it is parsed)
        return fail(TOOL, f"out of memory{': ' + str(error) if str(error) else ''} (a "
                    "tensor too large for this machine?)")


if __name__ == "__main__":
    sys.exit(main())
