"""ONNX's layout and shape ops: what moves elements without computing them, and the shape
arithmetic exporters write (Shape, Constant, ConstantOfShape, Range), which folds at import."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tapeml.onnx.convert import axis_of, converts, ints, known, present
from tapeml.onnx.graph import Node
from tapeml.tracing import ops

# ---------------------------------------------------------------------------------------------
# Shapes and constants (known at import)


@converts("Shape")
def shape(node: Node, ins: list[Any]) -> Any:
    dims = np.array(ins[0].shape, dtype=np.int64)
    rank = len(dims)
    start, end = node.attr("start", 0), node.attr("end", rank)
    start, end = (min(max(v + rank if v < 0 else v, 0), rank) for v in (start, end))
    return dims[start:end]


@converts("Size")
def size(node: Node, ins: list[Any]) -> Any:
    return np.array(math.prod(ins[0].shape), dtype=np.int64)


@converts("Constant")
def constant(node: Node, ins: list[Any]) -> Any:
    for name, dtype in (("value", None), ("value_float", np.float32),
                        ("value_floats", np.float32), ("value_int", np.int64),
                        ("value_ints", np.int64)):
        if name in node.attrs:
            value = np.asarray(node.attrs[name], dtype=dtype)
            if value.dtype.kind not in "biuf" or value.dtype.itemsize > 8:
                raise node.fail(f"a constant of dtype {value.dtype} is not one tape tensors "
                                "hold")
            return value
    raise node.fail(f"no value tapeml reads (it has {sorted(node.attrs)}; sparse and string "
                    "constants are not imported)")


@converts("ConstantOfShape", static=(0,))
def constant_of_shape(node: Node, ins: list[Any]) -> Any:
    dims = ints(node, ins[0], "the shape")
    value = node.attr("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    # a broadcast view: a model's weights filled this way take no memory until computed on
    return np.broadcast_to(value[:1].reshape(()), dims)


@converts("Range", static=(0, 1, 2))
def range_(node: Node, ins: list[Any]) -> Any:
    start, limit, delta = (known(node, x, "Range's bounds") for x in ins)
    if delta == 0:
        raise node.fail("delta is 0")
    count = max(int(np.ceil((limit - start) / delta)), 0)
    return (start + np.arange(count, dtype=start.dtype) * delta).astype(start.dtype)


# ---------------------------------------------------------------------------------------------
# Reshaping


@converts("Reshape", static=(1,))
def reshape(node: Node, ins: list[Any]) -> Any:
    """0 copies the input's dim (unless allowzero), -1 is inferred."""
    x = ins[0]
    target = ints(node, ins[1], "the target shape") if node.opset >= 5 else \
        list(node.attr("shape", []))
    if not node.attr("allowzero", 0):
        target = [x.shape[i] if d == 0 and i < len(x.shape) else d
                  for i, d in enumerate(target)]
    return ops.reshape(x, _resolved(node, x.shape, target))


def _resolved(node: Node, shape: tuple[int, ...], target: list[int]) -> tuple[int, ...]:
    size = math.prod(shape)
    if target.count(-1) > 1 or any(d < -1 for d in target):
        raise node.fail(f"the target shape {target} is not a shape (one -1 at most)")
    if -1 in target:
        rest = math.prod(d for d in target if d != -1)
        if rest == 0 or size % rest:
            raise node.fail(f"cannot reshape {tuple(shape)} to {target}")
        target = [size // rest if d == -1 else d for d in target]
    if math.prod(target) != size:
        raise node.fail(f"cannot reshape {tuple(shape)} ({size} elements) to {tuple(target)}")
    return tuple(target)


@converts("Flatten")
def flatten(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    rank = len(x.shape)
    axis = node.attr("axis", 1)
    if not -rank <= axis <= rank:
        raise node.fail(f"axis {axis} is out of range for an input of rank {rank}")
    axis = axis + rank if axis < 0 else axis
    return ops.reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


@converts("Transpose")
def transpose(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    perm = node.attr("perm")
    perm = list(range(len(x.shape)))[::-1] if perm is None else list(perm)
    if sorted(perm) != list(range(len(x.shape))):
        raise node.fail(f"perm {perm} is not a permutation of the axes of {tuple(x.shape)}")
    return ops.transpose(x, tuple(perm))


def _axes_input(node: Node, ins: list[Any], since: int) -> list[int] | None:
    """`axes`: an attribute before opset `since`, an optional input from it."""
    if node.opset < since:
        axes = node.attr("axes")
        return None if axes is None else list(axes)
    return ints(node, ins[1], "axes") if len(ins) > 1 and present(ins[1]) else None


@converts("Squeeze", static=(1,))
def squeeze(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    axes = _axes_input(node, ins, 13)
    if axes is None:
        return ops.squeeze(x)
    axes = [axis_of(node, a, len(x.shape)) for a in axes]
    if any(x.shape[a] != 1 for a in axes):
        raise node.fail(f"axes {axes} of {tuple(x.shape)} are not all of size 1")
    return ops.squeeze(x, tuple(axes))


@converts("Unsqueeze", static=(1,))
def unsqueeze(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    axes = _axes_input(node, ins, 13) or []
    rank = len(x.shape) + len(axes)
    axes = sorted(axis_of(node, a, rank) for a in axes)
    if len(set(axes)) != len(axes):
        raise node.fail(f"axes {axes} repeat")
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return ops.reshape(x, tuple(shape))


@converts("Expand", static=(1,))
def expand(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    target = ints(node, ins[1], "the shape")
    try:
        out = np.broadcast_shapes(tuple(x.shape), tuple(target))
    except ValueError:
        raise node.fail(f"{tuple(x.shape)} does not broadcast to {tuple(target)}") from None
    return ops.broadcast_to(x, out)


@converts("Tile", static=(1,))
def tile(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    repeats = ints(node, ins[1], "repeats")
    if len(repeats) != len(x.shape) or any(r < 0 for r in repeats):
        raise node.fail(f"repeats {repeats} do not fit an input of shape {tuple(x.shape)}")
    interleaved = [v for d in x.shape for v in (1, d)]
    spread = [v for r, d in zip(repeats, x.shape, strict=True) for v in (r, d)]
    out = ops.broadcast_to(ops.reshape(x, interleaved), spread)
    return ops.reshape(out, tuple(r * d for r, d in zip(repeats, x.shape, strict=True)))


@converts("DepthToSpace")
def depth_to_space(node: Node, ins: list[Any]) -> Any:
    x, b = ins[0], node.attr("blocksize")
    n, c, h, w = x.shape
    if node.attr("mode", "DCR") == "DCR":
        y = ops.transpose(ops.reshape(x, (n, b, b, c // (b * b), h, w)), (0, 3, 4, 1, 5, 2))
    else:
        y = ops.transpose(ops.reshape(x, (n, c // (b * b), b, b, h, w)), (0, 1, 4, 2, 5, 3))
    return ops.reshape(y, (n, c // (b * b), h * b, w * b))


@converts("SpaceToDepth")
def space_to_depth(node: Node, ins: list[Any]) -> Any:
    x, b = ins[0], node.attr("blocksize")
    n, c, h, w = x.shape
    perm = (0, 3, 5, 1, 2, 4) if node.attr("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
    y = ops.transpose(ops.reshape(x, (n, c, h // b, b, w // b, b)), perm)
    return ops.reshape(y, (n, c * b * b, h // b, w // b))


# ---------------------------------------------------------------------------------------------
# Joining and cutting


@converts("Concat")
def concat(node: Node, ins: list[Any]) -> Any:
    """Along `axis`: required from opset 4, 1 where Concat-1 leaves it out."""
    xs = [x for x in ins if x is not None]
    axis = node.attr("axis", 1 if node.opset < 4 else None)
    if axis is None:
        raise node.fail("it has no axis attribute (required from opset 4)")
    return ops.concatenate(xs, axis=axis_of(node, axis, len(xs[0].shape)))


@converts("Split", static=(1,))
def split(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    axis = axis_of(node, node.attr("axis", 0), len(x.shape))
    dim = x.shape[axis]
    if node.opset < 13:
        sizes = node.attr("split")
    else:
        sizes = ints(node, ins[1], "split") if len(ins) > 1 and present(ins[1]) else None
    if sizes is None:
        parts = node.attr("num_outputs", len(node.outputs))
        each = -(-dim // parts)
        sizes = [min(each, dim - i * each) for i in range(parts)]
    if sum(sizes) != dim or any(s < 0 for s in sizes):
        raise node.fail(f"sizes {list(sizes)} do not split axis {axis} of {tuple(x.shape)}")
    outs, start = [], 0
    for s in sizes:
        index = [slice(None)] * len(x.shape)
        index[axis] = slice(start, start + s)
        outs.append(ops.getitem(x, tuple(index)))
        start += s
    return outs


@converts("Slice", static=(1, 2, 3, 4))
def slice_(node: Node, ins: list[Any]) -> Any:
    """Bounds clamped as Slice's spec text says: start and end into [0, dim] stepping forward;
    stepping backward, start into [0, dim - 1] and end into [-1, dim - 1] (-1: past the first
    element). The spec is followed where the references differ: a start below -dim stepping
    backward is 0, so the slice holds x[0], as onnxruntime's (numpy and onnx.reference give an
    empty one)."""
    x = ins[0]
    if node.opset < 10:
        starts, ends = list(node.attr("starts")), list(node.attr("ends"))
        axes = node.attr("axes")
        steps = [1] * len(starts)
    else:
        starts, ends = ints(node, ins[1], "starts"), ints(node, ins[2], "ends")
        axes = ints(node, ins[3], "axes") if len(ins) > 3 and present(ins[3]) else None
        steps = ints(node, ins[4], "steps") if len(ins) > 4 and present(ins[4]) else \
            [1] * len(starts)
    rank = len(x.shape)
    axes = list(range(len(starts))) if axes is None else [axis_of(node, a, rank) for a in axes]
    index = [slice(None)] * rank
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        if step == 0:
            raise node.fail("a step is 0")
        dim = x.shape[axis]
        start, end = (v + dim if v < 0 else v for v in (start, end))
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        index[axis] = slice(start, None if end < 0 else end, step)
    return ops.getitem(x, tuple(index))


@converts("Gather")
def gather(node: Node, ins: list[Any]) -> Any:
    """numpy.take along `axis`; negative indices count from the end."""
    x, indices = ins
    axis = axis_of(node, node.attr("axis", 0), len(x.shape))
    return ops.take(x, _wrapped(node, indices, x.shape[axis]), axis=axis)


@converts("GatherElements")
def gather_elements(node: Node, ins: list[Any]) -> Any:
    x, indices = ins
    axis = axis_of(node, node.attr("axis", 0), len(x.shape))
    return ops.take_along_axis(x, _wrapped(node, indices, x.shape[axis]), axis=axis)


def _wrapped(node: Node, indices: Any, dim: int) -> Any:
    """Indices in [-dim, dim) as [0, dim) (out of range: an error when known)."""
    if isinstance(indices, np.ndarray):
        if indices.size and (indices.min() < -dim or indices.max() >= dim):
            raise node.fail(f"indices {indices.min()}..{indices.max()} are out of range for "
                            f"an axis of {dim}")
        return np.where(indices < 0, indices + dim, indices).astype(np.int64)
    return ops.where(ops.less(indices, 0), ops.add(indices, dim), indices)


@converts("Pad", static=(1, 2, 3))
def pad(node: Node, ins: list[Any]) -> Any:
    """constant (negative pads crop), reflect, edge and wrap."""
    x = ins[0]
    rank = len(x.shape)
    if node.opset < 11:
        pads = list(node.attr("pads", node.attr("paddings", [])))
        value, axes = node.attr("value", 0.0), list(range(rank))
    else:
        pads = ints(node, ins[1], "pads")
        value = known(node, ins[2], "the constant value").reshape(-1)[0].item() \
            if len(ins) > 2 and present(ins[2]) else 0
        axes = [axis_of(node, a, rank) for a in ints(node, ins[3], "axes")] \
            if len(ins) > 3 and present(ins[3]) else list(range(rank))
    if len(pads) != 2 * len(axes):
        raise node.fail(f"{len(pads)} pads for {len(axes)} axes")
    widths = [(0, 0)] * rank
    for i, a in enumerate(axes):
        widths[a] = (pads[i], pads[i + len(axes)])
    mode = node.attr("mode", "constant")
    if mode == "constant":
        return ops.pad(x, widths, value)
    if mode not in ("reflect", "edge", "wrap"):
        raise node.fail(f"mode {mode!r} is not one ONNX defines")
    for a, (before, after) in enumerate(widths):
        if before or after:  # a negative pad crops first, then the others pad what is left
            kept = np.arange(x.shape[a])[max(0, -before):max(0, x.shape[a] - max(0, -after))]
            grow = (max(0, before), max(0, after))
            if kept.size == 0 or (mode == "reflect" and max(grow) >= kept.size):
                why = ("nothing is left after the crop" if kept.size == 0 else
                       f"a reflection reaches past the {kept.size} elements left")
                raise node.fail(f"pads {before}, {after} do not fit axis {a} of "
                                f"{tuple(x.shape)} in mode {mode}: {why}")
            x = ops.take(x, np.pad(kept, grow, mode=mode), axis=a)
    return x


@converts("Trilu", static=(1,))
def trilu(node: Node, ins: list[Any]) -> Any:
    k = ints(node, ins[1], "k")[0] if len(ins) > 1 and present(ins[1]) else 0
    return (ops.triu if node.attr("upper", 1) else ops.tril)(ins[0], k)


@converts("OneHot", static=(1,))
def one_hot(node: Node, ins: list[Any]) -> Any:
    indices, depth, values = ins
    depth = int(known(node, depth, "depth").reshape(-1)[0])
    axis = node.attr("axis", -1)
    rank = len(indices.shape) + 1
    axis = axis_of(node, axis, rank)
    wrapped = _wrapped_any(indices, depth)
    hot = ops.equal(ops.expand_dims(wrapped, axis),
                    ops.reshape(np.arange(depth, dtype=np.int64),
                                [depth if a == axis else 1 for a in range(rank)]))
    off, on = ops.getitem(values, 0), ops.getitem(values, 1)
    return ops.where(hot, on, off)


def _wrapped_any(indices: Any, depth: int) -> Any:
    indices = ops.astype(indices, np.int64)
    return ops.where(ops.less(indices, 0), ops.add(indices, depth), indices)
