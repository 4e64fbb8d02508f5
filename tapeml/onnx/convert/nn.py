"""ONNX's network ops: convolutions, pools, normalizations, Resize. A 2-D convolution and
pool record the same idioms as tapeml.nn's (pad, unfold, matmul or reduction), so the fusion
passes raise them to the fused kernels; a 1-D one is a 2-D one of height 1."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.frontend import nn as tnn
from tapeml.onnx.convert import axis_of, converts, known, present, recorded
from tapeml.onnx.graph import Node
from tapeml.tracing import ops
from tapeml.tracing.trace import bind


def _spatial(node: Node, x: Any, kernel: tuple[int, ...] | None = None
             ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], list[int], list[int]]:
    """(kernel, strides, dilations, pads before, pads after) of a conv or pool node."""
    spatial = x.shape[2:]
    s = len(spatial)
    kernel = tuple(node.attr("kernel_shape", kernel or ()))
    if len(kernel) != s:
        raise node.fail(f"kernel_shape {list(kernel)} does not fit an input of shape "
                        f"{tuple(x.shape)} ({s} spatial dims)")
    strides = tuple(node.attr("strides", [1] * s))
    dilations = tuple(node.attr("dilations", [1] * s))
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", "VALID"):
        pads = list(node.attr("pads", [0] * 2 * s)) if auto_pad == "NOTSET" else [0] * 2 * s
        if len(pads) != 2 * s:
            raise node.fail(f"pads {pads} do not fit {s} spatial dims")
        return kernel, strides, dilations, pads[:s], pads[s:]
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise node.fail(f"auto_pad {auto_pad!r} is not one ONNX defines")
    before, after = [], []
    for size, k, stride, d in zip(spatial, kernel, strides, dilations, strict=True):
        total = max((-(-size // stride) - 1) * stride + (k - 1) * d + 1 - size, 0)
        small = total // 2
        before.append(small if auto_pad == "SAME_UPPER" else total - small)
        after.append(total - before[-1])
    return kernel, strides, dilations, before, after


def _as_2d(x: Any) -> Any:
    """A 1-D (N, C, L) input as (N, C, 1, L)."""
    return ops.reshape(x, (*x.shape[:2], 1, x.shape[2]))


@converts("Conv")
def conv(node: Node, ins: list[Any]) -> Any:
    x, w = ins[0], recorded(ins[1], ins[0])
    bias = ins[2] if len(ins) > 2 and present(ins[2]) else None
    s = len(x.shape) - 2
    if s < 1 or len(w.shape) != s + 2:
        raise node.fail(f"a convolution of input {tuple(x.shape)} and weight "
                        f"{tuple(w.shape)}: their ranks do not fit")
    kernel, strides, dilations, before, after = _spatial(node, x, tuple(w.shape[2:]))
    if tuple(w.shape[2:]) != kernel:
        raise node.fail(f"kernel_shape {list(kernel)} is not the weight's {tuple(w.shape)}")
    groups = node.attr("group", 1)
    if s == 1:
        y = tnn.conv2d(_as_2d(x), _as_2d(w), bias, (1, strides[0]), (0, before[0], 0, after[0]),
                       (1, dilations[0]), groups)
        return ops.reshape(y, (*y.shape[:2], y.shape[3]))
    if s == 2:
        return tnn.conv2d(x, w, bias, strides, (before[0], before[1], after[0], after[1]),
                          dilations, groups)
    return _conv_nd(node, x, w, bias, kernel, strides, dilations, before, after, groups)


def _conv_nd(node: Node, x: Any, w: Any, bias: Any, kernel: tuple[int, ...],
             strides: tuple[int, ...], dilations: tuple[int, ...], before: list[int],
             after: list[int], groups: int) -> Any:
    """Any number of spatial dims: the windows (pad, unfold) regrouped as rows, one matmul
    per group."""
    n, c = x.shape[:2]
    o = w.shape[0]
    if groups < 1 or c % groups or o % groups or w.shape[1] * groups != c:
        raise node.fail(f"input {tuple(x.shape)} and weight {tuple(w.shape)} do not fit "
                        f"group={groups}")
    s, g, cg, og = len(kernel), groups, c // groups, o // groups
    cols = _windows(x, kernel, strides, dilations, before, after, 0.0)  # N, C, *out, *k
    out = cols.shape[2:2 + s]
    cols = ops.reshape(cols, (n, g, cg, *out, *kernel))
    spatial = tuple(range(3, 3 + s))
    taps = tuple(range(3 + s, 3 + 2 * s))
    rows = ops.reshape(ops.transpose(cols, (1, 0, *spatial, 2, *taps)),
                       (g, n * math.prod(out), cg * math.prod(kernel)))
    wg = ops.transpose(ops.reshape(w, (g, og, cg * math.prod(kernel))), (0, 2, 1))
    y = ops.reshape(ops.matmul(rows, wg), (g, n, *out, og))  # G, N, *out, O/G
    y = ops.reshape(ops.transpose(y, (1, 0, 2 + s, *range(2, 2 + s))), (n, o, *out))
    return y if bias is None else ops.add(y, _per_channel(bias, len(y.shape)))


@converts("ConvTranspose")
def conv_transpose(node: Node, ins: list[Any]) -> Any:
    """The adjoint of a convolution: each input pixel's weighted kernel summed onto the output
    (a matmul, then tape.fold), cropped by the pads; output_shape, when given, sets them."""
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 and present(ins[2]) else None
    s = len(x.shape) - 2
    if s not in (1, 2) or len(w.shape) != s + 2:
        raise node.fail(f"a transposed convolution of input {tuple(x.shape)} and weight "
                        f"{tuple(w.shape)}: 1-D and 2-D are imported")
    if s == 1:
        y = _conv_transpose_2d(node, _as_2d(x), _as_2d(w), bias, one_d=True)
        return ops.reshape(y, (*y.shape[:2], y.shape[3]))
    return _conv_transpose_2d(node, x, w, bias)


def _conv_transpose_2d(node: Node, x: Any, w: Any, bias: Any, one_d: bool = False) -> Any:
    def pair(name: str, default: int) -> list[int]:
        values = list(node.attr(name, [default] * (1 if one_d else 2)))
        return [default, *values] if one_d else values

    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    groups = node.attr("group", 1)
    if c != w.shape[0] or c % groups:
        raise node.fail(f"input {tuple(x.shape)} and weight {tuple(w.shape)} with "
                        f"group={groups} do not fit")
    strides, dilations = pair("strides", 1), pair("dilations", 1)
    out_pad = pair("output_padding", 0)
    full = [(size - 1) * st + (k - 1) * d + 1
            for size, st, k, d in zip((h, wd), strides, (kh, kw), dilations, strict=True)]
    pads = list(node.attr("pads", [0] * (2 if one_d else 4)))
    pads = [0, pads[0], 0, pads[1]] if one_d else pads
    before, after = pads[:2], pads[2:]
    auto_pad = node.attr("auto_pad", "NOTSET")
    output_shape = node.attr("output_shape")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is not None:
            target = ([1, *output_shape] if one_d else list(output_shape))[-2:]
        else:
            target = [size * st for size, st in zip((h, wd), strides, strict=True)]
        before, after = [], []  # ONNX's rule (negative: the output grows, zeros at its edge)
        for f, o, t in zip(full, out_pad, target, strict=True):
            total = f + o - t
            before.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
            after.append(total - before[-1])
    elif auto_pad == "VALID":
        before, after = [0, 0], [0, 0]
    g, cg = groups, c // groups
    # cols[n, g, og, kh, kw, h, w] = sum over the group's channels of x[n, c, h, w] w[c, o, ...]
    xg = ops.reshape(ops.transpose(ops.reshape(x, (n, g, cg, h * wd)), (1, 0, 3, 2)),
                     (g, n * h * wd, cg))
    wg = ops.reshape(w, (g, cg, og * kh * kw))
    cols = ops.matmul(xg, wg)  # g, n*h*w, og*kh*kw
    cols = ops.reshape(cols, (g, n, h, wd, og, kh, kw))
    cols = ops.reshape(ops.transpose(cols, (1, 0, 4, 2, 3, 5, 6)), (n, g * og, h, wd, kh, kw))
    y = ops.fold(cols, full, (kh, kw), strides, dilations)
    widths = [(0, 0), (0, 0)] + [(-b, -a + o) for b, a, o in zip(before, after, out_pad,
                                                                    strict=True)]
    if any(v for pair_ in widths for v in pair_):
        y = ops.pad(y, widths, 0.0)
    if bias is not None:
        y = ops.add(y, ops.reshape(bias, (g * og, 1, 1)))
    return y


def _pool_geometry(node: Node, x: Any) -> tuple[tuple[int, ...], tuple[int, ...],
                                                 tuple[int, ...], list[int], list[int],
                                                 list[int]]:
    """(kernel, strides, dilations, pads before, pads after, extra after): `extra` pads the
    end so that ceil_mode's last window exists (a window starting past the input and its
    padding before is dropped, as ONNX's reference and torch do)."""
    kernel, strides, dilations, before, after = _spatial(node, x)
    extra = [0] * len(kernel)
    if node.attr("ceil_mode", 0):
        for i, (size, k, st, d) in enumerate(zip(x.shape[2:], kernel, strides, dilations,
                                                 strict=True)):
            span = size + before[i] + after[i] - ((k - 1) * d + 1)
            out = -(-span // st) + 1
            if (out - 1) * st >= size + before[i]:
                out -= 1
            extra[i] = max((out - 1) * st + (k - 1) * d + 1 - (size + before[i] + after[i]), 0)
    return kernel, strides, dilations, before, after, extra


def _windows(x: Any, kernel: tuple[int, ...], strides: tuple[int, ...],
             dilations: tuple[int, ...], before: list[int], after: list[int], value: Any) -> Any:
    """x padded with `value` and unfolded: (N, C, *out, *kernel)."""
    widths = [(0, 0), (0, 0)] + list(zip(before, after, strict=True))
    if any(before) or any(after):
        x = ops.pad(x, widths, value)
    return ops.unfold(x, kernel, strides, None if set(dilations) == {1} else dilations)


@converts("MaxPool")
def max_pool(node: Node, ins: list[Any]) -> Any:
    """The max of each window (padding is -inf); its Indices output, when asked for: where the
    first maximum is, as an index into the input flattened (row-major, or column-major over
    the spatial dims with storage_order=1)."""
    x = ins[0]
    kernel, strides, dilations, before, after, extra = _pool_geometry(node, x)
    lowest = -np.inf if np.dtype(x.dtype).kind == "f" else np.iinfo(x.dtype).min
    ends = [a + e for a, e in zip(after, extra, strict=True)]
    cols = _windows(x, kernel, strides, dilations, before, ends, lowest)
    taps = tuple(range(-len(kernel), 0))
    pooled = ops.max(cols, axis=taps)
    if len(node.outputs) < 2 or not node.outputs[1]:
        return pooled
    shape = tuple(x.shape)
    flat = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    if node.attr("storage_order", 0):  # the spatial dims counted column-major
        spatial = np.arange(math.prod(shape[2:]), dtype=np.int64).reshape(shape[2:][::-1]).T
        flat = (np.arange(shape[0] * shape[1], dtype=np.int64).reshape(shape[:2] + (1,) * (
            len(shape) - 2)) * math.prod(shape[2:]) + spatial)
    positions = _index_windows(flat, kernel, strides, dilations, before, ends)
    count = math.prod(kernel)
    windows = ops.reshape(cols, (*cols.shape[:-len(kernel)], count))
    first = ops.argmax(windows, axis=-1, keepdims=True)
    chosen = ops.take_along_axis(np.reshape(positions, (*positions.shape[:-len(kernel)], count)),
                                 first, axis=-1)
    return [pooled, ops.reshape(chosen, pooled.shape)]


def _index_windows(flat: np.ndarray, kernel: tuple[int, ...], strides: tuple[int, ...],
                   dilations: tuple[int, ...], before: list[int], after: list[int]
                   ) -> np.ndarray:
    """`_windows` of an index array, known at import (-1 in the padding): numpy's sliding
    windows, strided and dilated as the pool's."""
    s = len(kernel)
    padded = np.pad(flat, [(0, 0), (0, 0), *zip(before, after, strict=True)], constant_values=-1)
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    windows = np.lib.stride_tricks.sliding_window_view(padded, spans, axis=tuple(range(2, 2 + s)))
    picked = (slice(None), slice(None), *(slice(None, None, st) for st in strides),
              *(slice(None, None, d) for d in dilations))
    return np.ascontiguousarray(windows[picked])


@converts("AveragePool")
def average_pool(node: Node, ins: list[Any]) -> Any:
    """The window's sum over its count: of the elements inside the input (count_include_pad=0,
    the default) or inside the input and its pads (1); ceil_mode's extra never counts."""
    x = ins[0]
    kernel, strides, dilations, before, after, extra = _pool_geometry(node, x)
    ends = [a + e for a, e in zip(after, extra, strict=True)]
    axes = tuple(range(-len(kernel), 0))
    total = ops.sum(_windows(x, kernel, strides, dilations, before, ends, 0.0), axis=axes)
    if not any(before) and not any(ends):
        return ops.divide(total, float(math.prod(kernel)))
    inside = np.ones((1, 1, *x.shape[2:]), dtype=x.dtype)
    if node.attr("count_include_pad", 0):
        inside = np.pad(inside, [(0, 0), (0, 0), *zip(before, after, strict=True)],
                        constant_values=1)
        before, ends = [0] * len(before), list(extra)
    counts = ops.sum(_windows(inside, kernel, strides, dilations, before, ends, 0.0), axis=axes)
    return ops.divide(total, counts)


@converts("GlobalAveragePool")
def global_average_pool(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    return ops.mean(x, axis=tuple(range(2, len(x.shape))), keepdims=True)


@converts("GlobalMaxPool")
def global_max_pool(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    return ops.max(x, axis=tuple(range(2, len(x.shape))), keepdims=True)


def _per_channel(v: Any, rank: int) -> Any:
    """A (C,) vector shaped to broadcast along axis 1 of a rank-`rank` input."""
    return ops.reshape(v, (v.shape[0], *([1] * (rank - 2))))


@converts("BatchNormalization")
def batch_norm(node: Node, ins: list[Any]) -> Any:
    """Inference: (x - mean) / sqrt(var + epsilon) * scale + B, as x * a + b (a and b fold
    when the statistics are known)."""
    if node.attr("training_mode", 0) or any(o for o in node.outputs[1:]):
        raise node.fail("BatchNormalization in training mode is not imported (inference only)")
    x, scale, bias, mean, var = ins[:5]
    eps = node.attr("epsilon", 1e-5)
    a = ops.divide(scale, ops.sqrt(ops.add(var, ops.astype(np.asarray(eps), var.dtype))))
    b = ops.subtract(bias, ops.multiply(mean, a))
    rank = len(x.shape)
    return ops.add(ops.multiply(x, _per_channel(a, rank)), _per_channel(b, rank))


@converts("InstanceNormalization")
def instance_norm(node: Node, ins: list[Any]) -> Any:
    x, scale, bias = ins
    rank = len(x.shape)
    axes = tuple(range(2, rank))
    centered = ops.subtract(x, ops.mean(x, axis=axes, keepdims=True))
    var = ops.mean(ops.multiply(centered, centered), axis=axes, keepdims=True)
    normed = ops.divide(centered, ops.sqrt(ops.add(var, node.attr("epsilon", 1e-5))))
    return ops.add(ops.multiply(normed, _per_channel(scale, rank)), _per_channel(bias, rank))


@converts("LayerNormalization")
def layer_norm(node: Node, ins: list[Any]) -> Any:
    """Over the axes from `axis` on: one tape.layer_norm over them as one axis, then the scale
    and bias, where Y alone is asked for; where its Mean or InvStdDev outputs are too, the ops
    written out."""
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 and present(ins[2]) else None
    rank = len(x.shape)
    first = axis_of(node, node.attr("axis", -1), rank)
    axes = tuple(range(first, rank))
    if not any(node.outputs[1:]) and math.prod(x.shape[first:]) > 0:
        rows = ops.reshape(x, (*x.shape[:first], math.prod(x.shape[first:])))
        normed = bind(tape.LayerNormOp, rows, eps=float(node.attr("epsilon", 1e-5)))
        y = ops.multiply(ops.reshape(normed, x.shape), scale)
        return y if bias is None else ops.add(y, bias)
    mean = ops.mean(x, axis=axes, keepdims=True)
    centered = ops.subtract(x, mean)
    var = ops.mean(ops.multiply(centered, centered), axis=axes, keepdims=True)
    inv = ops.divide(1.0, ops.sqrt(ops.add(var, node.attr("epsilon", 1e-5))))
    y = ops.multiply(ops.multiply(centered, inv), scale)
    if bias is not None:
        y = ops.add(y, bias)
    return [y, mean, inv]


@converts("LRN")
def lrn(node: Node, ins: list[Any]) -> Any:
    """x / (bias + alpha / size * the sum of squares over `size` neighbouring channels)^beta."""
    x = ins[0]
    size = node.attr("size")
    alpha, beta, bias = node.attr("alpha", 1e-4), node.attr("beta", 0.75), node.attr("bias", 1.0)
    channels = x.shape[1]
    widths = [(0, 0)] * len(x.shape)
    widths[1] = ((size - 1) // 2, size - 1 - (size - 1) // 2)
    squares = ops.pad(ops.multiply(x, x), widths, 0.0)
    index = [slice(None)] * len(x.shape)
    total = None
    for k in range(size):
        index[1] = slice(k, k + channels)
        term = ops.getitem(squares, tuple(index))
        total = term if total is None else ops.add(total, term)
    return ops.divide(x, ops.power(ops.add(ops.multiply(total, alpha / size), bias), beta))


@converts("LpNormalization")
def lp_normalization(node: Node, ins: list[Any]) -> Any:
    x = ins[0]
    axis = axis_of(node, node.attr("axis", -1), len(x.shape))
    p = node.attr("p", 2)
    if p == 1:
        norm = ops.sum(ops.abs(x), axis=axis, keepdims=True)
    elif p == 2:
        norm = ops.sqrt(ops.sum(ops.multiply(x, x), axis=axis, keepdims=True))
    else:
        raise node.fail(f"p={p} (1 and 2 are defined)")
    return ops.where(ops.equal(norm, 0), ops.zeros_like(x), ops.divide(x, norm))


# ---------------------------------------------------------------------------------------------
# Resize


def _source(node: Node, mode: str, out: int, size: int, scale: float) -> np.ndarray:
    """Each output position's coordinate in the input, as coordinate_transformation_mode
    says (align_corners over the resized length size * scale, unrounded, as ONNX's
    reference)."""
    x = np.arange(out, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out > 1 else np.zeros(out)
    if mode == "align_corners":
        return x * (size - 1) / (size * scale - 1) if out > 1 else np.zeros(out)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    if mode == "half_pixel_symmetric":  # half_pixel, centred when out / scale is not whole
        offset = size / 2 * (1 - out / (size * scale))
        return offset + (x + 0.5) / scale - 0.5
    raise node.fail(f"coordinate_transformation_mode {mode!r} is not imported")


def _nearest(node: Node, coords: np.ndarray, size: int) -> np.ndarray:
    rounding = node.attr("nearest_mode",
                         "floor" if node.op_type == "Upsample" else "round_prefer_floor")
    if rounding == "round_prefer_floor":
        index = np.ceil(coords - 0.5)
    elif rounding == "round_prefer_ceil":
        index = np.floor(coords + 0.5)
    elif rounding == "floor":
        index = np.floor(coords)
    elif rounding == "ceil":
        index = np.ceil(coords)
    else:
        raise node.fail(f"nearest_mode {rounding!r} is not one ONNX defines")
    return np.clip(index, 0, size - 1).astype(np.int64)


def _cubic(node: Node, coords: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The four taps around each coordinate (clamped to the edge) and their weights from
    Keys' cubic with a = cubic_coeff_a; with exclude_outside, taps past the edge weigh 0 and
    the rest are scaled back to a sum of 1."""
    a = node.attr("cubic_coeff_a", -0.75)
    base = np.floor(coords)
    t = coords - base
    distance = np.stack([t + 1, t, 1 - t, 2 - t], axis=1)
    near = ((a + 2) * distance - (a + 3)) * distance * distance + 1
    far = ((a * distance - 5 * a) * distance + 8 * a) * distance - 4 * a
    weights = np.where(distance <= 1, near, far)
    taps = base[:, None].astype(np.int64) + np.arange(-1, 3)
    if node.attr("exclude_outside", 0):
        weights = np.where((taps < 0) | (taps >= size), 0.0, weights)
        weights = weights / weights.sum(axis=1, keepdims=True)
    return np.clip(taps, 0, size - 1), weights


@converts("Resize", static=(1, 2, 3))
@converts("Upsample", static=(1,))
def resize(node: Node, ins: list[Any]) -> Any:
    """Nearest, linear and cubic (separable: one gather, or two or four and their weights,
    per resized axis)."""
    x = ins[0]
    rank = len(x.shape)
    mode = node.attr("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear", "cubic"):
        raise node.fail(f"mode {mode!r} is not one ONNX defines")
    if node.attr("antialias", 0):
        raise node.fail("antialias is not imported")
    axes = [axis_of(node, a, rank) for a in node.attr("axes", range(rank))]
    default = "asymmetric" if node.op_type == "Upsample" or node.opset < 11 else "half_pixel"
    transform = node.attr("coordinate_transformation_mode", default)
    dtype = x.dtype
    if mode != "nearest" and np.dtype(dtype).kind != "f":
        x = ops.astype(x, np.float64)  # weights of 0 in an integer type: see _rounded_back
    for axis, out, scale in _resized_axes(node, x.shape, axes, ins):
        size = x.shape[axis]
        if out == size and scale == 1.0:
            continue
        coords = _source(node, transform, out, size, scale)
        if mode == "nearest":
            x = ops.take(x, _nearest(node, coords, size), axis=axis)
        elif mode == "cubic":
            x = _cubic_along(node, x, axis, coords)
        else:
            x = _linear_along(x, axis, coords)
    return _rounded_back(x, dtype)


def _resized_axes(node: Node, shape: tuple[int, ...], axes: list[int], ins: list[Any]
                  ) -> list[tuple[int, int, float]]:
    """(axis, output length, the scale its coordinates are mapped with) per resized axis.
    Scales given: floor(length * scale) and the scale. Sizes given: the size and size /
    length; with a keep_aspect_ratio_policy, one scale for every axis (the least of the
    sizes / lengths for not_larger, the greatest for not_smaller), round(scale * length)
    long: that common scale, not each axis's size / length, maps the coordinates (the
    spec's, as onnxruntime and onnx.reference)."""
    scales, sizes = _scales_or_sizes(node, ins)
    given = scales if sizes is None else sizes
    if given is None or len(given) != len(axes):
        raise node.fail(f"give scales or sizes for each of the {len(axes)} resized axes")
    if sizes is None:
        return [(a, int(math.floor(shape[a] * s)), float(s))
                for a, s in zip(axes, scales, strict=True)]
    policy = node.attr("keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise node.fail(f"keep_aspect_ratio_policy {policy!r} is not one ONNX defines")
    if policy == "stretch":
        return [(a, int(n), int(n) / shape[a]) for a, n in zip(axes, sizes, strict=True)]
    ratios = [n / shape[a] for a, n in zip(axes, sizes, strict=True)]
    common = min(ratios) if policy == "not_larger" else max(ratios)
    return [(a, int(math.floor(common * shape[a] + 0.5)), common) for a in axes]


def _scales_or_sizes(node: Node, ins: list[Any]) -> tuple[list[float] | None,
                                                           list[int] | None]:
    """The scales and the sizes the node gives (None for the one it leaves out), from where
    its op and opset keep them."""
    if node.op_type == "Upsample" and node.opset < 9:
        return list(node.attr("scales")), None
    if node.op_type == "Upsample" or node.opset < 11:
        return known(node, ins[1], "scales").reshape(-1).tolist(), None
    scales = known(node, ins[2], "scales").reshape(-1).tolist() \
        if len(ins) > 2 and present(ins[2]) else None
    sizes = known(node, ins[3], "sizes").reshape(-1).tolist() \
        if len(ins) > 3 and present(ins[3]) else None
    return scales, sizes


def _along(x: Any, axis: int, weights: np.ndarray) -> Any:
    """A column of per-output-position weights shaped to broadcast along `axis` of x."""
    shape = [len(weights) if a == axis else 1 for a in range(len(x.shape))]
    return weights.astype(x.dtype).reshape(shape)


def _linear_along(x: Any, axis: int, coords: np.ndarray) -> Any:
    size = x.shape[axis]
    coords = np.clip(coords, 0, size - 1)
    low = np.floor(coords).astype(np.int64)
    high = np.minimum(low + 1, size - 1)
    weight = _along(x, axis, coords - low)
    return ops.add(ops.multiply(ops.take(x, low, axis=axis), 1 - weight),
                   ops.multiply(ops.take(x, high, axis=axis), weight))


def _cubic_along(node: Node, x: Any, axis: int, coords: np.ndarray) -> Any:
    taps, weights = _cubic(node, coords, x.shape[axis])
    terms = [ops.multiply(ops.take(x, taps[:, k], axis=axis), _along(x, axis, weights[:, k]))
             for k in range(4)]
    return ops.add(ops.add(terms[0], terms[1]), ops.add(terms[2], terms[3]))


def _rounded_back(x: Any, dtype: np.dtype) -> Any:
    """An integer input interpolated in float64 back to its type: rounded half to even and
    saturated, as onnx.reference (onnxruntime, whose one integer interpolation is int32
    linear, truncates instead; the reference is followed)."""
    if np.dtype(x.dtype) == np.dtype(dtype):
        return x
    return ops.astype(ops.round(x), dtype)
