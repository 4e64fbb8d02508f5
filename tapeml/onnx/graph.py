"""An ONNX model as plain Python data: what reader.py makes of a ModelProto and the importer
walks. No onnx import here (reader.py is the only module that imports the onnx package)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tapeml.errors import OnnxError

ELEMENT_TYPES = {1: np.dtype(np.float32), 6: np.dtype(np.int32), 7: np.dtype(np.int64),
                 9: np.dtype(np.bool_), 11: np.dtype(np.float64)}
"""ONNX's element types (TensorProto.DataType) that tape tensors hold."""
TYPE_NAMES = {0: "undefined", 1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16",
              6: "int32", 7: "int64", 8: "string", 9: "bool", 10: "float16", 11: "double",
              12: "uint32", 13: "uint64", 14: "complex64", 15: "complex128", 16: "bfloat16",
              17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz",
              21: "uint4", 22: "int4", 23: "float4e2m1", 24: "float8e8m0", 25: "uint2",
              26: "int2"}


def type_name(elem_type: int) -> str:
    return TYPE_NAMES.get(elem_type, f"element type {elem_type}")


@dataclass(frozen=True)
class Input:
    """A graph input: its name, its dtype (None: one tape tensors cannot hold, named in
    `type_name`) and its dims (an int, a symbolic name, or None where the model leaves it
    open)."""

    name: str
    dtype: np.dtype | None
    dims: tuple[int | str | None, ...] | None
    type_name: str = ""


@dataclass
class Node:
    """One node: its op (`domain` "" for the standard ops), its inputs' and outputs' names
    ("" for an optional one left out), its attributes decoded to Python values (ints, floats,
    str, numpy arrays and lists of them) and the opset of its domain the model imports."""

    op_type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    opset: int
    domain: str = ""
    index: int = 0

    def __str__(self) -> str:
        named = f" '{self.name}'" if self.name else ""
        domain = f"{self.domain}." if self.domain else ""
        outputs = ", ".join(repr(o) for o in self.outputs if o)
        return f"{domain}{self.op_type} node{named} (#{self.index}, output {outputs}, " \
               f"opset {self.opset})"

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def fail(self, message: str) -> OnnxError:
        """An error about this node (raise it)."""
        return OnnxError(f"{self}: {message}")


@dataclass
class Graph:
    """The model's main graph: inputs in order (those an initializer does not define),
    outputs' names, initializers (name -> array), nodes in order, the standard opset."""

    name: str
    inputs: list[Input]
    outputs: list[str]
    initializers: dict[str, np.ndarray]
    nodes: list[Node]
    opset: int
    source: str = "<model>"
    unsupported_initializers: dict[str, str] = field(default_factory=dict)
    """Initializers of an element type tape tensors do not hold: name -> the type's name."""
