"""ONNX models in: `tapeml.onnx.load` makes a model a tape `Program`, and from there everything
tapeml does to a traced function applies — interpret, `eval_shape`, `summary()`, fuse, compile
for the CPU or the GPU, differentiate, print, `tapeml-opt`.

    program = tapeml.onnx.load("model.onnx")                 # initializers as constants
    y = tapeml.jit(program)(x)                                # arguments: the graph's inputs
    program, params = tapeml.onnx.load("model.onnx", params=True)
    grads = tapeml.grad(lambda p, x: loss(program(p, x)))(params, x)

Needs the `onnx` extra (`pip install 'tapeml[onnx]'`); reader.py is the one module that imports
onnx. The package, in the order a load runs through it:

    reader.py     a ModelProto (or a file) as a Graph: initializers and attributes as numpy
                  arrays and Python values
    graph.py      Graph, Node, Input: the model as plain data
    importer.py   the graph traced into a Program: inputs as tracers, names kept
    convert/      one converter per ONNX op, written against tapeml's ops (`CONVERTERS`)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["load", "supported_ops"]


def load(model: Any, input_shapes: Mapping[str, Any] | None = None, params: bool = False,
         constants: Mapping[str, Any] | None = None) -> Any:
    """The ONNX `model` (a path, the bytes of a file, or an onnx.ModelProto) as a Program.

    Its arguments are the graph's inputs in order (those no initializer defines), named as
    they are; its result is the graph's output, or a tuple of them. Shapes are static: a
    dim the model leaves open is given by `input_shapes` ({input name: shape}), and shape
    computations (Shape, ConstantOfShape, Range, a Reshape's target) fold at import.
    `constants` ({input name: array}) binds inputs to values at import, as initializers.
    With `params=True` the floating initializers become the program's first argument, a dict
    by initializer name, and `load` returns (program, that dict): the model can be trained.
    An op tapeml does not import, an element type tape tensors do not hold, or a shape that
    is not static is an `OnnxError` naming the node, its op and its opset."""
    from tapeml.onnx.importer import import_graph
    from tapeml.onnx.reader import read

    return import_graph(read(model), input_shapes, params, constants)


def supported_ops() -> list[str]:
    """The ONNX op types (standard domain) tapeml imports."""
    from tapeml.onnx.convert import CONVERTERS

    return sorted(CONVERTERS)


