"""`tapeml-opt`: xdsl-opt with the tape dialect and every tapeml pass and target.

Unlike stock xdsl-opt, a mistake in the input (malformed IR, an unknown op, pass or option, a
verifier failure) is reported as a located diagnostic on stderr with exit status 1, never as a
Python traceback. `--verify-diagnostics` / `--parsing-diagnostics` keep xDSL's behaviour for
FileCheck tests: the (located) diagnostic goes to stdout and the exit status is 0.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import IO

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError
from xdsl.utils.lexer import Span
from xdsl.xdsl_opt_main import xDSLOptMain

from tapeml import universe
from tapeml.tools.diagnostics import (
    LocatedParseError,
    LocatingParser,
    UserError,
    fail,
    format_parse_error,
    require_utf8,
    verify_located,
)


class TapeOptMain(xDSLOptMain):
    version_format = "tapeml-opt (xdsl {xdsl_version})"

    def __init__(self, description: str = "tapeml's modular optimizer driver",
                 args: Sequence[str] | None = None) -> None:
        self.spans: dict[Operation, Span] = {}
        super().__init__(description, args)

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

    def parse_chunk(self, chunk: IO[bytes], file_extension: str,
                    start_offset: int = 0) -> ModuleOp | None:
        if (self.args.frontend or file_extension) != "mlir":
            return super().parse_chunk(chunk, file_extension, start_offset)
        text = chunk.read()
        require_utf8(text, self.get_input_name())
        parser = LocatingParser(self.ctx, text, self.get_input_name(), line_offset=start_offset)
        try:
            module = parser.parse_module(not self.args.no_implicit_module)
        except ParseError as error:
            raise LocatedParseError(error.span, error.msg) from None
        self.spans = parser.spans
        return module

    def prepare_input(self) -> tuple[list[tuple[IO[bytes], int]], str]:
        try:
            return super().prepare_input()
        except ValueError as error:  # an input file extension no frontend reads
            raise UserError(f"{self.get_input_name()}: {error}") from None

    def apply_passes(self, prog: ModuleOp) -> None:
        if not self.args.disable_verify:
            verify_located(prog, self.spans, self.get_input_name())
        super().apply_passes(prog)

    def output_resulting_program(self, prog: ModuleOp) -> str:
        from tapeml.codegen.ptx import PTXError

        try:
            return super().output_resulting_program(prog)
        except PTXError as error:
            raise UserError(str(error)) from None
        except NotImplementedError as error:  # a target met ops it does not emit
            raise UserError(
                f"-t {self.args.target}: {error} (targets take the llvm dialect: "
                "lower first, e.g. -p tape-to-llvm)"
            ) from None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        tool = TapeOptMain(args=argv)
    except (ValueError, ArgSpecParseError) as error:  # an unknown pass, bad pass options
        return fail("tapeml-opt", str(error))
    try:
        tool.run()
    except UserError as error:
        return fail("tapeml-opt", str(error))
    except ParseError as error:
        return fail("tapeml-opt", format_parse_error(error))
    except DiagnosticException as error:
        return fail("tapeml-opt", str(error))
    except OSError as error:
        return fail("tapeml-opt", f"cannot open {error.filename}: {error.strerror}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
