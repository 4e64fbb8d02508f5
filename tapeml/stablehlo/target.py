"""`-t stablehlo`: tapeml-opt's (and xdsl-opt's, through tapeml's universe) StableHLO output."""

from __future__ import annotations

from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target

from tapeml.stablehlo import emit


class StableHLOTarget(Target):
    """`-t stablehlo`: the module's tape function as upstream StableHLO (after the passes
    given with -p: `-p tape-fuse` raises convolutions and pools first)."""

    name = "stablehlo"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        output.write(emit(module))
