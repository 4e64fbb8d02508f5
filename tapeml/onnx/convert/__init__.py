"""ONNX ops as tapeml ops: one converter per op type, registered in `CONVERTERS`.

A converter takes the node (graph.py's `Node`: attributes decoded, the opset) and its inputs —
numpy arrays where the value is known at import (initializers, constants, shapes, and whatever
is computed from them alone), tracers where it is not, None for an optional input left out —
and returns its outputs. It calls tapeml's ops (tapeml/tracing/ops), which compute at once on
arrays and record tape ops on tracers: so a shape computation folds while the importer runs,
and the program holds only what depends on the model's inputs. `static` names the inputs that
must be known at import (a Reshape's target, a Slice's bounds, a Resize's scales); the
importer reports one that is not, and keeps initializers read there out of `params=True`'s
arguments.

    elementwise.py  arithmetic, comparisons, activations, Cast, Clip, Where, Dropout
    layout.py       Reshape, Transpose, Slice, Gather, Concat, Split, Pad, Expand, Tile, ...,
                    and the shape ops (Shape, Size, Constant, ConstantOfShape, Range)
    reductions.py   Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax, CumSum, MatMul, Gemm, Einsum
    nn.py           Conv, ConvTranspose, the pools, the normalizations, Resize
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tapeml.onnx.graph import ELEMENT_TYPES, Node, type_name
from tapeml.tracing.trace import Tracer

Converter = Callable[[Node, list[Any]], Any]


@dataclass(frozen=True)
class Rule:
    convert: Converter
    static: tuple[int, ...] = ()
    """Inputs that must be known at import."""


CONVERTERS: dict[str, Rule] = {}
"""ONNX op type (standard domain) -> how it becomes tapeml ops."""


def converts(*op_types: str, static: Sequence[int] = ()) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for op_type in op_types:
            assert op_type not in CONVERTERS, op_type
            CONVERTERS[op_type] = Rule(fn, tuple(static))
        return fn
    return register


def known(node: Node, x: Any, what: str) -> np.ndarray:
    """`x` (an input that must be known at import) as an array."""
    if isinstance(x, Tracer):
        raise node.fail(f"{what} must be known when the model is imported (a constant, an "
                        "initializer, or computed from shapes), not computed from the inputs")
    return np.asarray(x)


def ints(node: Node, x: Any, what: str) -> list[int]:
    """A known 1-D (or scalar) integer input as a list."""
    return [int(v) for v in known(node, x, what).reshape(-1)]


def axis_of(node: Node, axis: int, rank: int, what: str = "axis") -> int:
    """`axis` in [0, rank), from ONNX's [-rank, rank)."""
    if not -rank <= axis < rank:
        raise node.fail(f"{what} {axis} is out of range for an input of rank {rank}")
    return axis % rank


def element_type(node: Node, code: int) -> np.dtype:
    """The dtype an attribute's TensorProto.DataType code names."""
    dtype = ELEMENT_TYPES.get(int(code))
    if dtype is None:
        raise node.fail(f"element type {type_name(int(code))} is not one tape tensors hold "
                        "(bool, int32, int64, float32 (ONNX float), float64 (double))")
    return dtype


def recorded(x: Any, like: Any) -> Any:
    """`x`, an array, as a constant of `like`'s trace (where `like` is a tracer), so that the
    layout ops a converter applies to it are recorded, not folded: a convolution's weight must
    reach its matmul through the reshape and permute the conv2d idiom matches."""
    if isinstance(like, Tracer) and not isinstance(x, Tracer):
        return Tracer(like.trace.operand(np.asarray(x)), like.trace)
    return x


def present(x: Any) -> bool:
    """An optional input given (not left out, not empty: some exporters pass an empty
    tensor for 'none')."""
    return x is not None and not (isinstance(x, np.ndarray) and x.size == 0 and x.ndim == 1)


from tapeml.onnx.convert import elementwise, layout, nn, reductions  # noqa: E402,F401 (register)
