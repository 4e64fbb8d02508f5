"""`-t stablehlo`: tapeml-opt's (and xdsl-opt's, through tapeml's universe) StableHLO output."""

from __future__ import annotations

from typing import IO

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target

from tapeml.errors import StableHLOError
from tapeml.stablehlo import emit


class StableHLOTarget(Target):
    """`-t stablehlo`: the module's tape function as upstream StableHLO (after the passes
    given with -p: `-p tape-fuse` raises convolutions and pools first)."""

    name = "stablehlo"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        defined = [op.sym_name.data for op in module.ops
                   if isinstance(op, func.FuncOp) and not op.is_declaration]
        if len(defined) > 1:  # (the first alone was written, and nothing said)
            raise StableHLOError(f"the module defines {len(defined)} functions ("
                                 f"{', '.join('@' + name for name in defined)}); StableHLO is "
                                 "written from one tape function: keep one in the file")
        output.write(emit(module))
