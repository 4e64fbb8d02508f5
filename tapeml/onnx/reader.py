"""A ModelProto (or a file of one) as a `Graph` (graph.py): the one module that imports onnx.

Initializers and attribute tensors become numpy arrays (external data is read by onnx.load, from
the model's folder); attributes become Python values; graph inputs that an initializer defines
(older exporters list every weight as an input) are not inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tapeml.errors import OnnxError
from tapeml.onnx.graph import ELEMENT_TYPES, Graph, Input, Node, type_name

try:
    import onnx
    from onnx import helper, numpy_helper
except ImportError as error:  # pragma: no cover - the onnx extra is not installed
    raise ImportError("tapeml.onnx needs the onnx package: pip install 'tapeml[onnx]'") \
        from error


def model_proto(model: Any, source: str | None = None) -> tuple[Any, str]:
    """The ModelProto `model` is (a path, bytes, or one already) and where it came from
    (`source`, if given: the file the bytes were read from)."""
    if isinstance(model, onnx.ModelProto):
        return model, source or f"<{model.graph.name or 'model'}>"
    if isinstance(model, bytes | bytearray):
        source = source or "<bytes>"
        try:
            return onnx.load_model_from_string(bytes(model)), source
        except Exception as error:  # noqa: BLE001 (protobuf's DecodeError and others)
            raise OnnxError(f"onnx: {source} is not an ONNX model ({error})") from None
    path = Path(model)
    if not path.is_file():
        raise OnnxError(f"onnx: no such file: {path}")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as error:  # noqa: BLE001
        raise OnnxError(f"onnx: {path} is not an ONNX model ({error})") from None
    _read_external_data(proto, path)
    return proto, str(path)


def _read_external_data(proto: Any, path: Path) -> None:
    """The tensors the model at `path` keeps in files beside it, read into `proto` (as
    onnx.load does), so that a missing or short data file is said to be one: the model
    itself was read."""
    try:
        onnx.load_external_data_for_model(proto, str(path.parent))
    except Exception as error:  # noqa: BLE001 (FileNotFoundError, onnx's ValidationError...)
        raise OnnxError(f"onnx: {path}: its external data cannot be read ({error})") from None


def read(model: Any, source: str | None = None) -> Graph:
    """The main graph of `model` (a path, bytes or a ModelProto; `source`: where it came
    from, for messages and locations)."""
    proto, source = model_proto(model, source)
    if not proto.HasField("graph"):  # protobuf reads an empty file as an empty message
        raise OnnxError(f"onnx: {source} holds no graph (an empty file, or not an ONNX model)")
    opsets = {(o.domain or "ai.onnx"): o.version for o in proto.opset_import}
    opset = opsets.get("ai.onnx", 1)
    g = proto.graph
    initializers: dict[str, np.ndarray] = {}
    unsupported: dict[str, str] = {}
    for tensor in g.initializer:
        initializers[tensor.name] = _array(tensor, source)
        if tensor.data_type not in ELEMENT_TYPES:
            unsupported[tensor.name] = type_name(tensor.data_type)
    inputs = [_input(v) for v in g.input if v.name not in initializers]
    nodes = [_node(n, i, opsets) for i, n in enumerate(g.node)]
    return Graph(g.name or "model", inputs, [v.name for v in g.output], initializers, nodes,
                 opset, source, unsupported)


def _array(tensor: Any, source: str) -> np.ndarray:
    try:
        return np.array(numpy_helper.to_array(tensor))
    except Exception as error:  # noqa: BLE001
        raise OnnxError(f"onnx: {source}: tensor '{tensor.name}' cannot be read ({error})") \
            from None


def _input(value: Any) -> Input:
    t = value.type
    if not t.HasField("tensor_type"):
        return Input(value.name, None, None, t.WhichOneof("value") or "unknown")
    tensor = t.tensor_type
    dims = None
    if tensor.HasField("shape"):
        dims = tuple(d.dim_value if d.HasField("dim_value") else
                     (d.dim_param or None) for d in tensor.shape.dim)
    return Input(value.name, ELEMENT_TYPES.get(tensor.elem_type), dims, type_name(tensor.elem_type))


def _node(proto: Any, index: int, opsets: dict[str, int]) -> Node:
    domain = proto.domain if proto.domain not in ("", "ai.onnx") else ""
    return Node(proto.op_type, proto.name, list(proto.input), list(proto.output),
                {a.name: _attribute(a) for a in proto.attribute},
                opsets.get(domain or "ai.onnx", 1), domain, index)


class Subgraph:
    """An attribute holding a graph (If's, Loop's, Scan's bodies): not imported."""

    def __repr__(self) -> str:
        return "<subgraph>"


def _attribute(attr: Any) -> Any:
    value = helper.get_attribute_value(attr)
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, onnx.TensorProto):
        return np.array(numpy_helper.to_array(value))
    if isinstance(value, onnx.GraphProto):
        return Subgraph()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
