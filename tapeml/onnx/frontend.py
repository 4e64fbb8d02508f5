"""ONNX as an input format of xDSL's tools: `tapeml-opt model.onnx` (or `-f onnx`) reads the
model as its tape program, so every pass and target applies to it. Here its shapes must be
static in the file; tapeml-opt's `--input-shape NAME=DIMS` (tapeml/tools/opt.py) and
tapeml.onnx.load's input_shapes bind the dims it leaves open."""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.frontend import Frontend


@dataclass(frozen=True)
class OnnxFrontend(Frontend):
    name: ClassVar[str] = "onnx"

    def parse(self, ctx: Context, input: IO[bytes], input_name: str) -> ModuleOp:
        from tapeml.onnx.importer import import_graph
        from tapeml.onnx.reader import read

        return import_graph(read(input.read(), input_name)).module
