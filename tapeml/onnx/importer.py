"""A `Graph` (graph.py) as a tape `Program`: the graph's nodes run once, in order, on tracers
standing for its inputs, each through its converter (convert/), so the program is traced like
any function and everything tapeml does to a traced function applies to it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, FileLineColLoc, IntAttr, StringAttr

from tapeml.dialects.names import NAME_ATTR, ssa_name
from tapeml.errors import OnnxError, ShapeError, TracingError
from tapeml.frontend.program import Program, Spec, trace_with
from tapeml.onnx.convert import CONVERTERS
from tapeml.onnx.graph import Graph, Input, Node
from tapeml.tracing.pytree import flatten
from tapeml.tracing.trace import Tracer

_PASSED_THROUGH = {"Identity", "Shape", "Size", "Cast", "CastLike", "Constant"}
"""Ops that may read a value of a dtype tape tensors do not hold (they fold at import)."""


def import_graph(graph: Graph, input_shapes: Mapping[str, Any] | None = None,
                 params: bool = False, constants: Mapping[str, Any] | None = None
                 ) -> Program | tuple[Program, dict[str, np.ndarray]]:
    """The program computing `graph` (see tapeml.onnx.load)."""
    _check_ops(graph)
    constants = {name: np.asarray(v) for name, v in (constants or {}).items()}
    known_inputs = {i.name for i in graph.inputs}
    for what, names in (("input_shapes", input_shapes or {}), ("constants", constants)):
        unknown = sorted(set(names) - known_inputs)
        if unknown:
            raise OnnxError(f"onnx: {what} names {unknown}, not inputs of the graph (its inputs: "
                            f"{sorted(known_inputs)})")
    inputs = [i for i in graph.inputs if i.name not in constants]
    specs = [_spec(i, (input_shapes or {}).get(i.name)) for i in inputs]
    _check_symbols(inputs, specs)
    trained = _trainable(graph) if params else {}
    fixed = {name: v for name, v in graph.initializers.items() if name not in trained}
    fixed.update(constants)

    def run(*args: Any) -> Any:
        values = dict(fixed)
        trace = next((x.trace for x in flatten(args)[0] if isinstance(x, Tracer)), None)
        if params:
            values.update(args[0])
            args = args[1:]
        values.update(zip((i.name for i in inputs), args, strict=True))
        for node in graph.nodes:
            if trace is not None:
                trace.location = FileLineColLoc(StringAttr(graph.source), IntAttr(node.index + 1),
                                                IntAttr(0))
            _run_node(graph, node, values)
        if trace is not None:
            trace.location = None
        missing = [o for o in graph.outputs if o not in values]
        if missing:
            raise OnnxError(f"onnx: no node computes the graph's outputs {missing}")
        results = tuple(values[o] for o in graph.outputs)
        return results[0] if len(results) == 1 else results

    run.__name__ = ssa_name(graph.name) or "model"
    example = ((dict(trained),) if params else ()) + tuple(specs)
    program = trace_with(run, example, {})
    order = flatten({name: name for name in trained})[0]  # the params dict's leaves, in order
    _name_values(program, [*order, *(i.name for i in inputs)], graph.outputs)
    return (program, dict(trained)) if params else program


def _check_ops(graph: Graph) -> None:
    """Every node's op is one tapeml imports; if not, all that are not, with node and opset."""
    unknown = [n for n in graph.nodes if n.domain or n.op_type not in CONVERTERS]
    if unknown:
        listed = "; ".join(str(n) for n in unknown[:10])
        more = f"; and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        kinds = sorted({(n.domain + "." if n.domain else "") + n.op_type for n in unknown})
        raise OnnxError(f"onnx: {graph.source}: {len(unknown)} node(s) of ops tapeml does not "
                        f"import ({', '.join(kinds)}): {listed}{more}")


def _spec(i: Input, given: Any) -> Spec:
    if i.dtype is None:
        raise OnnxError(f"onnx: input '{i.name}' is of type {i.type_name}, not one tape tensors "
                        "hold (bool, int32, int64, float32 (ONNX float), float64 (double))")
    if given is not None:
        dims = _given_dims(i, given)
        if not all(isinstance(d, int | np.integer) and d >= 0 for d in dims):
            raise OnnxError(f"onnx: input_shapes gives '{i.name}' the shape {dims}: dims are "
                            "integers, 0 or more")
        if i.dims is not None and (len(dims) != len(i.dims) or any(
                isinstance(d, int) and d != g for d, g in zip(i.dims, dims, strict=False))):
            raise OnnxError(f"onnx: input_shapes gives '{i.name}' the shape {dims}; the model "
                            f"says {_dims_text(i.dims)}")
        return Spec(dims, i.dtype)
    if i.dims is None:
        raise OnnxError(f"onnx: input '{i.name}' has no shape in the model: give it with "
                        f"input_shapes={{'{i.name}': (...)}}")
    for axis, d in enumerate(i.dims):
        if not isinstance(d, int):
            raise OnnxError(f"onnx: dim {axis} of input '{i.name}' "
                            f"{'(' + repr(d) + ') ' if d else ''}is not static "
                            f"({_dims_text(i.dims)}): give the shape with "
                            f"input_shapes={{'{i.name}': (...)}}")
    return Spec(i.dims, i.dtype)


def _given_dims(i: Input, given: Any) -> tuple[Any, ...]:
    """input_shapes' entry for `i` as a tuple: an int is a 1-D shape, as tapeml.Spec reads
    one."""
    if isinstance(given, int | np.integer):
        return (given,)
    try:
        return tuple(given)
    except TypeError:
        raise OnnxError(f"onnx: input_shapes gives '{i.name}' {given!r}, not a shape (a tuple "
                        "of dims)") from None


def _check_symbols(inputs: list[Input], specs: list[Spec]) -> None:
    """A dim symbol the model writes in several inputs ('N' in a's (N, 3) and b's (N, 3))
    stands for one size, as ONNX's IR says of a dim_param: input_shapes may not bind it to
    two."""
    bound: dict[str, tuple[int, str]] = {}
    for i, spec in zip(inputs, specs, strict=True):
        for symbol, size in zip(i.dims or (), spec.shape, strict=False):
            if not isinstance(symbol, str):
                continue
            first, where = bound.setdefault(symbol, (size, i.name))
            if first != size:
                raise OnnxError(f"onnx: input_shapes makes the dim '{symbol}' {first} in input "
                                f"'{where}' and {size} in input '{i.name}': the model names "
                                "one size by it")


def _dims_text(dims: tuple[Any, ...]) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in dims) + ")"


_SHAPE_ONLY = {"Shape", "Size"}
"""Ops whose result is known at import whatever their input holds: they read its shape."""


def _trainable(graph: Graph) -> dict[str, np.ndarray]:
    """The initializers `params=True` makes arguments: floating ones, unless a value a node
    must know at import (a Resize's scales) is computed from one (see `_known_at_import`)."""
    static = _known_at_import(graph)
    return {name: v for name, v in graph.initializers.items()
            if v.dtype.kind == "f" and name not in static
            and name not in graph.unsupported_initializers}


def _known_at_import(graph: Graph) -> set[str]:
    """The values that must be known at import: the inputs nodes take as `static`, and back
    through the nodes computing them everything they are computed from (a Resize's scales
    from Mul(s0, two): s0 and two), except through Shape and Size, which read only a shape."""
    producers = {name: node for node in graph.nodes for name in node.outputs if name}
    pending = [node.inputs[i] for node in graph.nodes if node.op_type in CONVERTERS
               for i in CONVERTERS[node.op_type].static if i < len(node.inputs)]
    needed: set[str] = set()
    while pending:
        name = pending.pop()
        if not name or name in needed:
            continue
        needed.add(name)
        producer = producers.get(name)
        if producer is not None and producer.op_type not in _SHAPE_ONLY:
            pending.extend(producer.inputs)
    return needed


def _run_node(graph: Graph, node: Node, values: dict[str, Any]) -> None:
    rule = CONVERTERS[node.op_type]
    ins = []
    for name in node.inputs:
        if not name:
            ins.append(None)
            continue
        if name not in values:
            raise node.fail(f"its input '{name}' is not computed before it (nor an input or "
                            "initializer of the graph)")
        if name in graph.unsupported_initializers and node.op_type not in _PASSED_THROUGH:
            raise node.fail(f"its input '{name}' is of type "
                            f"{graph.unsupported_initializers[name]}, not one tape tensors hold")
        ins.append(values[name])
    for i in rule.static:
        if i < len(ins) and isinstance(ins[i], Tracer):
            raise node.fail(f"input {i} ('{node.inputs[i]}') must be known when the model is "
                            "imported (a constant, an initializer, or computed from shapes); "
                            "here it is computed from the graph's inputs")
    try:
        outs = rule.convert(node, ins)
    except OnnxError:
        raise
    except (ShapeError, TracingError, ValueError, TypeError, IndexError,
            NotImplementedError) as error:
        raise node.fail(str(error).split("\n  at ")[0]) from None
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    for k, name in enumerate(node.outputs):
        if not name:
            continue
        if k >= len(outs):
            raise node.fail(f"its output {k} ('{name}') is not imported")
        values[name] = outs[k]


def _name_values(program: Program, inputs: list[str], outputs: list[str]) -> None:
    """The program's arguments and results named as the graph's initializers (params=True's),
    inputs and outputs."""
    f = program.function
    for arg, name in zip(f.body.block.args, inputs, strict=True):
        arg.name_hint = ssa_name(name)
    f.arg_attrs = ArrayAttr([DictionaryAttr({NAME_ATTR: StringAttr(n)}) for n in inputs])
    f.res_attrs = ArrayAttr([DictionaryAttr({NAME_ATTR: StringAttr(n)}) for n in outputs])
