"""`tapeml-opt`: xdsl-opt with the tape dialect and every tapeml pass and target.

Unlike stock xdsl-opt, a mistake in the input (malformed IR, an unknown op, pass or option, a
verifier failure) is reported as a located diagnostic on stderr with exit status 1, never as a
Python traceback. `--verify-diagnostics` / `--parsing-diagnostics` keep xDSL's behaviour for
FileCheck tests: the (located) diagnostic goes to stdout and the exit status is 0. FILE `-`, or
none, is stdin; a write that fails names stdout or the -o file, and a reader that has gone from
stdout (`| head`) ends it quietly, with status 141.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable, Sequence
from typing import IO, get_type_hints

from xdsl.backend.assembly_printer import AssemblyPrintable
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass, get_pass_option_infos
from xdsl.utils.arg_spec import _convert_arg_to_type, parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.utils.hints import type_repr
from xdsl.utils.lexer import Span
from xdsl.xdsl_opt_main import xDSLOptMain

from tapeml import universe
from tapeml.errors import OnnxError, PTXError, StableHLOError
from tapeml.tools.diagnostics import (
    LocatedParseError,
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
from tapeml.tools.help import tapeml_help


class TapeOptMain(xDSLOptMain):
    version_format = "tapeml-opt (xdsl {xdsl_version})"

    def __init__(self, description: str = "tapeml's modular optimizer driver",
                 args: Sequence[str] | None = None) -> None:
        self.spans: dict[Operation, Span] = {}
        self.names: dict[SSAValue, str] = {}
        super().__init__(description, args)
        if self.args.input_file == "-":  # stdin, as for mlir-opt: what xDSL reads for no file
            self.args.input_file = None

    def register_all_dialects(self) -> None:
        super().register_all_dialects()  # includes ours when the entry point is installed
        for name, factory in universe.DIALECTS.items():
            if name not in self.ctx.registered_dialect_names:
                self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, factory in universe.PASSES.items():
            self.available_passes.setdefault(name, factory)
        self.available_passes["convert-scf-to-cf"] = universe.scf_to_cf

    def register_all_targets(self) -> None:
        super().register_all_targets()
        for name, factory in universe.TARGETS.items():
            self.available_targets.setdefault(name, factory)
        self.available_targets["llvm"] = universe.llvm_ir

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.formatter_class = argparse.RawDescriptionHelpFormatter
        plain = arg_parser.format_help

        def format_help() -> str:  # tapeml's passes and targets first, imported only here
            passes = {**universe.PASSES, "convert-scf-to-cf": universe.scf_to_cf}
            arg_parser.description = tapeml_help(passes, {**universe.TARGETS,
                                                          "llvm": universe.llvm_ir})
            return plain()

        arg_parser.format_help = format_help  # type: ignore[method-assign]
        arg_parser.add_argument(
            "--input-shape", action="append", default=[], metavar="NAME=DIMS",
            help="an ONNX model's input shape, for the dims the file leaves open "
                 "(tapeml.onnx.load's input_shapes): --input-shape bytes=8x2048; repeatable")

    def setup_pipeline(self) -> None:
        check_pass_options(self.available_passes, self.args.passes)
        super().setup_pipeline()

    def register_all_frontends(self) -> None:
        super().register_all_frontends()
        for name, factory in universe.FRONTENDS.items():
            self.available_frontends.setdefault(name, factory)

    def parse_chunk(self, chunk: IO[bytes], file_extension: str,
                    start_offset: int = 0) -> ModuleOp | None:
        shapes = input_shapes(self.args.input_shape)
        if (self.args.frontend or file_extension) == "onnx":
            from tapeml.onnx.importer import import_graph
            from tapeml.onnx.reader import read

            try:
                return import_graph(read(chunk.read(), self.get_input_name()),
                                    input_shapes=shapes).module
            except OnnxError as error:  # the model's mistake or an op tapeml does not import
                wanted = re.search(r"input_shapes=\{'(.*)': \(\.\.\.\)\}", str(error))
                hint = (f"; on the command line: --input-shape {wanted.group(1)}=DIMS "
                        "(sizes joined by x)" if wanted else "")
                raise UserError(f"{error}{hint}") from None  # (it names the file)
        if shapes:
            raise UserError(f"--input-shape gives an ONNX model's input shapes; "
                            f"{self.get_input_name()} is read as MLIR")
        if (self.args.frontend or file_extension) != "mlir":
            return super().parse_chunk(chunk, file_extension, start_offset)
        text = chunk.read()
        require_utf8(text, self.get_input_name())
        if not self.args.no_implicit_module and holds_nothing(text):
            return ModuleOp([])  # (an empty file is an empty module, as for mlir-opt)
        try:  # the parser lexes the first token as it starts
            parser = LocatingParser(self.ctx, text, self.get_input_name(),
                                    line_offset=start_offset)
            module = parser.parse_module(not self.args.no_implicit_module)
        except ParseError as error:
            raise LocatedParseError(error.span, error.msg) from None
        self.spans, self.names = parser.spans, parser.names
        return module

    def get_input_stream(self) -> tuple[IO[bytes], str]:
        """The input and its format: -f's where given, whatever the file's extension (xDSL's
        took the extension first: `-f mlir model.txt` was 'Unrecognized file extension')."""
        stream, extension = super().get_input_stream()
        return stream, self.args.frontend or extension

    def prepare_output(self) -> NamedOutput:
        return NamedOutput(super().prepare_output(), self.args.output_file or "stdout")

    def prepare_input(self) -> tuple[list[tuple[IO[bytes], int]], str]:
        try:
            return super().prepare_input()
        except ValueError as error:  # an input file extension no frontend reads
            raise UserError(f"{self.get_input_name()}: {error}") from None

    def apply_passes(self, prog: ModuleOp) -> None:
        if not self.args.disable_verify:
            verify_located(prog, self.spans, self.names, self.get_input_name())
        try:
            super().apply_passes(prog)
        except DiagnosticException as error:
            raise self.located_pass_error(error) from None

    def located_pass_error(self, error: DiagnosticException) -> DiagnosticException:
        """A pass's `error` at the source line of the op it names (a LoweringErrorAt's), where
        the input has it; else `error` itself. (A DiagnosticException still, which
        --verify-diagnostics prints.)"""
        from tapeml.transforms.to_loops import LoweringErrorAt  # (only once a pass failed)

        if isinstance(error, LoweringErrorAt) and error.op in self.spans:
            return DiagnosticException(located(self.spans[error.op], str(error)))
        return error

    def output_resulting_program(self, prog: ModuleOp) -> str:
        check_target_input(self.args.target, prog)
        try:
            return super().output_resulting_program(prog)
        except PTXError as error:
            raise UserError(str(error)) from None
        except StableHLOError as error:
            raise UserError(f"-t {self.args.target}: {error}") from None
        except NotImplementedError as error:  # a target met ops it does not emit
            hint = (" (targets take the llvm dialect: lower first, e.g. -p tape-to-llvm)"
                    if self.args.target in ("llvm", "host-asm") else "")
            raise UserError(f"-t {self.args.target}: {error}{hint}") from None


class NamedOutput:
    """The output stream, stdout or -o's file, under its name: a failed write names it
    (`writing`). xDSL writes, flushes and closes it (one that is not sys.stdout): stdout is
    flushed, not closed."""

    def __init__(self, stream: IO[str], name: str) -> None:
        self.stream, self.name = stream, name

    def write(self, text: str) -> int:
        with writing(self.name):
            return self.stream.write(text)

    def flush(self) -> None:
        with writing(self.name):
            self.stream.flush()

    def close(self) -> None:
        with writing(self.name):
            if self.stream is sys.stdout:
                self.stream.flush()
            else:
                self.stream.close()


_ASSEMBLY_TARGETS = ("arm-asm", "riscv-asm", "x86-asm")
_MODULE_TARGETS = {"csl": "csl.module", "wat": "wasm.module", "wgsl": "gpu.module"}


def check_target_input(target: str, module: ModuleOp) -> None:
    """A UserError for a module one of xDSL's targets cannot print: the assembly targets print
    their dialect's instructions alone (xDSL fails on an assertion at any other op); csl, wat
    and wgsl print their dialect's modules, and nothing where there is none."""
    if target in _ASSEMBLY_TARGETS:
        other = next((op for op in module.body.walk() if not isinstance(op, AssemblyPrintable)),
                     None)
        if other is not None:
            isa = target.removesuffix("-asm")
            raise UserError(f"-t {target} prints a module of {isa} dialect instructions alone, "
                            f"not {other.name} (xDSL's {isa} lowerings write them)")
    wanted = _MODULE_TARGETS.get(target)
    if wanted is not None and not any(op.name == wanted for op in module.walk()):
        raise UserError(f"-t {target} prints the module's {wanted} ops, and it holds none")


_OPTION_VALUES = {"bool": "true or false", "int": "an integer", "float": "a number",
                  "str": "a string"}


def check_pass_options(passes: dict[str, Callable[[], type[ModulePass]]], pipeline: str) -> None:
    """A UserError naming the pass and the option for an option a pass does not have, a value
    of the wrong type, or options it refuses (xDSL's ValueError names neither)."""
    for spec in parse_pipeline(pipeline):
        if spec.name not in passes:
            near = difflib.get_close_matches(spec.name, passes, n=3)
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            raise UserError(f"unknown pass {spec.name}{hint} (tapeml-opt --help lists them)")
        pass_class = passes[spec.name]()
        options = [info.name for info in get_pass_option_infos(pass_class)]
        hints = get_type_hints(pass_class)
        for key, values in spec.parameters.items():
            field = key.replace("-", "_")
            if field not in options:
                takes = f"its options: {', '.join(options)}" if options else "it takes none"
                raise UserError(f"pass {spec.name} has no option {key} ({takes})")
            try:
                _convert_arg_to_type(values, hints[field])
            except ValueError:
                expected = _OPTION_VALUES.get(type_repr(hints[field]), type_repr(hints[field]))
                if not values:
                    raise UserError(f"pass {spec.name}: option {key} needs a value "
                                    f"({expected})") from None
                given = ",".join(str(v) for v in values)
                raise UserError(f"pass {spec.name}: option {key} takes {expected}, "
                                f"not {given}") from None
        try:
            pass_class.from_pass_spec(spec)
        except ValueError as error:  # a required option, or one the pass itself refuses
            raise UserError(f"pass {spec.name}: {error}") from None


def input_shapes(given: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """`--input-shape NAME=DIMS` arguments as tapeml.onnx.load's input_shapes: DIMS are
    sizes joined by x (8x2048), as in an MLIR tensor type; empty for a scalar."""
    shapes = {}
    for text in given:
        name, equals, dims = text.rpartition("=")
        parts = dims.split("x") if dims else []
        if not equals or not name or not all(p.isdigit() for p in parts):
            raise UserError(f"--input-shape wants NAME=DIMS, the dims sizes joined by x "
                            f"(bytes=8x2048), got {text!r}")
        if name in shapes:
            raise UserError(f"--input-shape gives {name!r} twice")
        shapes[name] = tuple(int(p) for p in parts)
    return shapes


def main(argv: Sequence[str] | None = None) -> int:
    try:
        tool = TapeOptMain(args=argv)
    except (ValueError, ArgSpecParseError, UserError) as error:  # a bad pass or pass option
        return fail("tapeml-opt", str(error))
    try:
        tool.run()
        with writing("stdout"):  # what xDSL printed (--verify-diagnostics' diagnostics)
            sys.stdout.flush()
    except BrokenPipeError:
        return broken_pipe()
    except UserError as error:
        return fail("tapeml-opt", str(error))
    except ParseError as error:
        return fail("tapeml-opt", format_parse_error(error))
    except DiagnosticException as error:
        return fail("tapeml-opt", str(error))
    except OSError as error:
        return fail("tapeml-opt", f"cannot open {error.filename}: {error.strerror}")
    except MemoryError as error:  # (a splat of a huge type expands as it is parsed)
        return fail("tapeml-opt", f"out of memory{': ' + str(error) if str(error) else ''} (a "
                    "tensor too large for this machine?)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
