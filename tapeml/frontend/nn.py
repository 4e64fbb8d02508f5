"""Layers, initialisers and losses: functional, parameters as pytrees (dicts of arrays).

The layers record the plain idioms (a convolution is pad -> unfold -> permute/reshape -> matmul
-> reshape/permute; a pooling is unfold -> reduction) that the fusion passes raise to fused ops.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.errors import ShapeError
from tapeml.tracing import ops
from tapeml.tracing.ops import (  # noqa: F401 - re-exported
    log_softmax,
    one_hot,
    relu,
    sigmoid,
    softmax,
    tanh,
)
from tapeml.tracing.ops.promotion import lift, promote, weakened
from tapeml.tracing.trace import at_user_line, bind

Params = dict[str, Any]


_PADDINGS = ("an int, a (height, width) pair, (top, left, bottom, right), lax's ((top, "
             "bottom), (left, right)), 'SAME' or 'VALID'")


def _whole(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def _ints(v: Any, lengths: tuple[int, ...], layer: str, arg: str, forms: str,
          least: int | None = 1) -> tuple[int, ...]:
    """`v`, an int or a sequence of ints of one of `lengths`, each at least `least`, as a
    tuple; otherwise a TypeError (not ints) or a ValueError at the user's line naming nn.`layer`,
    `arg`, the `forms` it takes and what it got (a (1, 1, 2, 2) kernel had pooled 1 x 1
    windows, a stride of (1, 2, 3) had been (1, 2))."""
    listed = (isinstance(v, Sequence) and not isinstance(v, str)
              or isinstance(v, np.ndarray) and v.ndim == 1)
    values = (v,) if _whole(v) else tuple(v) if listed else None
    if values is None or not all(map(_whole, values)):
        raise TypeError(at_user_line(f"nn.{layer}: {arg} must be {forms}; got {v!r}"))
    if (not _whole(v) and len(values) not in lengths
            or least is not None and min(values) < least):
        raise ValueError(at_user_line(f"nn.{layer}: {arg} must be {forms}; got {v!r}"))
    return tuple(int(i) for i in values)


def _pair(v: Any, layer: str = "conv2d", arg: str = "kernel") -> tuple[int, int]:
    """An int or a (height, width) pair of positive ints, as (height, width)."""
    values = _ints(v, (2,), layer, arg, "an int or a (height, width) pair of positive ints")
    return values[0], values[-1]


def _padding(p: Any, layer: str = "conv2d") -> tuple[int, int, int, int] | str:
    """An int, a (height, width) pair, (top, left, bottom, right) or lax's ((top, bottom),
    (left, right)) as (top, left, bottom, right) (negative amounts crop, as lax's); 'SAME' or
    'VALID', in any case, as 'SAME' or 'VALID'."""
    if isinstance(p, str):
        if p.upper() in ("SAME", "VALID"):
            return p.upper()
        raise ValueError(at_user_line(f"nn.{layer}: padding must be {_PADDINGS}; got {p!r}"))
    if isinstance(p, Sequence) and len(p) == 2 and all(
            isinstance(e, Sequence) and len(e) == 2 and all(map(_whole, e)) for e in p):
        (top, bottom), (left, right) = p
        return int(top), int(left), int(bottom), int(right)
    values = _ints(p, (2, 4), layer, "padding", _PADDINGS, least=None)
    return values * 4 if len(values) == 1 else values * 2 if len(values) == 2 else values


def _broadcast(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """numpy's broadcast of `shapes`, None where they do not broadcast."""
    try:
        return np.broadcast_shapes(*map(tuple, shapes))
    except ValueError:
        return None


def _window(layer: str, x: Any, kernel: Any, stride: Any, padding: Any, dilation: Any = 1
            ) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int],
                       tuple[int, int, int, int]]:
    """The (kernel, stride, dilation, (top, left, bottom, right) padding) of a layer's windows
    over the last two dims of `x`, checked; 'SAME' pads for ceil(size / stride) windows, an
    odd total's extra row / column at the bottom / right (lax's and TF's), 'VALID' not at all.
    A padded input smaller than one window is a ShapeError."""
    k, d = _pair(kernel, layer, "kernel"), _pair(dilation, layer, "dilation")
    s = _pair(kernel if stride is None else stride, layer, "stride")
    pad = _padding(padding, layer)
    if x.ndim < 2:
        raise ShapeError(at_user_line(f"nn.{layer}: the input must have two spatial dims "
                                      f"last, got shape {tuple(x.shape)}"))
    size, span = tuple(x.shape[-2:]), ((k[0] - 1) * d[0] + 1, (k[1] - 1) * d[1] + 1)
    if pad == "VALID":
        pad = (0, 0, 0, 0)
    elif pad == "SAME":  # total = (out - 1) * stride + span - size, out = ceil(size / stride)
        th, tw = (max((-(-n // st) - 1) * st + e - n, 0)
                  for n, st, e in zip(size, s, span, strict=True))
        pad = (th // 2, tw // 2, th - th // 2, tw - tw // 2)
    padded = (size[0] + pad[0] + pad[2], size[1] + pad[1] + pad[3])
    if padded[0] < span[0] or padded[1] < span[1]:
        raise ShapeError(at_user_line(
            f"nn.{layer}: the input {tuple(x.shape)} padded by {pad} (top, left, bottom, "
            f"right) is {padded[0]} x {padded[1]}, smaller than one {span[0]} x {span[1]} "
            f"window (kernel {k}, dilation {d})"))
    return k, s, d, pad


def _pad2d(x: Any, padding: tuple[int, int, int, int], value: float) -> Any:
    """`x` padded over its last two dims (no padding, no tape.pad)."""
    top, left, bottom, right = padding
    return x if not any(padding) else ops.pad(
        x, [(0, 0)] * (x.ndim - 2) + [(top, bottom), (left, right)], value)


# ----------------------------------------------------------------------------------------------
# Initialisers


def linear_init(rng: np.random.Generator, in_features: int, out_features: int,
                dtype: Any = np.float32) -> Params:
    """{"W": (in, out), "b": (out,)}, uniform in +-1/sqrt(in) (torch's default)."""
    bound = 1.0 / np.sqrt(in_features)
    return {"W": rng.uniform(-bound, bound, (in_features, out_features)).astype(dtype),
            "b": rng.uniform(-bound, bound, (out_features,)).astype(dtype)}


def conv2d_init(rng: np.random.Generator, in_channels: int, out_channels: int,
                kernel: int | Sequence[int], groups: int = 1, dtype: Any = np.float32) -> Params:
    """{"W": (out, in/groups, kh, kw), "b": (out,)}, uniform in +-1/sqrt(fan_in)."""
    kh, kw = _pair(kernel, "conv2d_init")
    fan_in = in_channels // groups * kh * kw
    bound = 1.0 / np.sqrt(fan_in)
    shape = (out_channels, in_channels // groups, kh, kw)
    return {"W": rng.uniform(-bound, bound, shape).astype(dtype),
            "b": rng.uniform(-bound, bound, (out_channels,)).astype(dtype)}


def mlp_init(rng: np.random.Generator, sizes: Sequence[int], dtype: Any = np.float32) -> Params:
    """{"lin1": linear, "lin2": linear, ...} for layer sizes [in, hidden..., out]."""
    return {f"lin{i + 1}": linear_init(rng, a, b, dtype)
            for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True))}


# ----------------------------------------------------------------------------------------------
# Layers


def _parameters(layer: str, params: Any, init: str, x: str = "x") -> Params:
    """`params` where it is a mapping, else a TypeError at the user's line saying what the
    layer takes first (a swapped call, layer(x, params), indexed an array by a string)."""
    if isinstance(params, Mapping):
        return params
    what = (f"an array of shape {tuple(params.shape)}" if hasattr(params, "shape")
            else f"a {type(params).__name__}")
    raise TypeError(at_user_line(f"nn.{layer}(params, {x}): params is {what}, not the dict "
                                 f"{init} makes; the parameters come first"))


def _widths(layer: str, params: Params, names: tuple[str, ...], x: Any, init: str) -> None:
    """A ShapeError at the user's line unless each params[name] broadcasts along the last axis
    of `x` (a scale of 17 on rows of 16 had been an error from `multiply`)."""
    if x.ndim == 0:
        raise ShapeError(at_user_line(f"nn.{layer}: the input must have an axis to normalize, "
                                      "got a scalar"))
    for name in names:
        if name not in params:
            raise ValueError(at_user_line(f"nn.{layer}: params has no {name!r}, as {init} "
                                          f"makes; got keys {sorted(map(str, params))}"))
        shape = tuple(lift(params[name]).shape)
        if _broadcast(shape, x.shape) != tuple(x.shape):
            raise ShapeError(at_user_line(
                f"nn.{layer}: params[{name!r}] of shape {shape} does not fit the input "
                f"{tuple(x.shape)}, normalized over its last axis of {x.shape[-1]}: "
                f"{init}({x.shape[-1]}) makes ({x.shape[-1]},)"))


def linear(params: Params, x: Any) -> Any:
    """x @ W + b."""
    params = _parameters("linear", params, "linear_init")
    return ops.add(ops.matmul(x, params["W"]), params["b"])


def mlp(params: Params, x: Any, activation: Callable[[Any], Any] = ops.relu) -> Any:
    """The layers lin1, lin2, ... of `mlp_init` with `activation` between them."""
    params = _parameters("mlp", params, "mlp_init")
    if not all(isinstance(k, str) and k.startswith("lin") and k[3:].isdigit() for k in params):
        raise ValueError(f"nn.mlp: parameters must be layers named lin1, lin2, ... (as mlp_init "
                         f"makes them), got {sorted(map(str, params))}")
    names = sorted(params, key=lambda k: int(k[3:]))
    for i, name in enumerate(names):
        x = linear(params[name], x)
        if i < len(names) - 1:
            x = activation(x)
    return x


def conv2d(x: Any, weight: Any, bias: Any = None, stride: int | Sequence[int] = 1,
           padding: int | str | Sequence[Any] = 0, dilation: int | Sequence[int] = 1,
           groups: int = 1) -> Any:
    """2-D convolution (cross-correlation), NCHW input, OIHW weight (O, C/groups, KH, KW), (O,)
    bias, as im2col + matmul. `stride`, `dilation`: an int or a (height, width) pair;
    `padding`: an int, a (height, width) pair, (top, left, bottom, right), lax's ((top,
    bottom), (left, right)) (negative amounts crop), or 'SAME' (ceil(H / stride) x
    ceil(W / stride) outputs, the odd pad row / column at the bottom / right, as lax's) or
    'VALID' (none), in any case."""
    for role, value in (("x", x), ("weight", weight), ("bias", bias)):
        if isinstance(value, dict):  # (the other layers take their parameters' dict first)
            raise TypeError(at_user_line(
                f"nn.conv2d(x, weight, bias=None, ...): {role} is a dict; it takes arrays, the "
                "input first: nn.conv2d(x, p['W'], p['b']) with conv2d_init's p"))
    x, weight = lift(x), lift(weight)
    if len(x.shape) != 4 or len(weight.shape) != 4:
        raise ShapeError(at_user_line(f"nn.conv2d: input (N, C, H, W) and weight (O, C/groups, "
                                      f"KH, KW) must be rank 4, got {tuple(x.shape)} and "
                                      f"{tuple(weight.shape)}"))
    n, c, _, _ = x.shape
    o, cg, kh, kw = weight.shape
    if not _whole(groups):
        raise TypeError(at_user_line(f"nn.conv2d: groups must be an int, got {groups!r}"))
    if groups < 1 or c % groups:
        raise ShapeError(at_user_line(
            f"nn.conv2d: groups={groups} must be a positive divisor of the input's {c} "
            f"channels (input {tuple(x.shape)})"))
    if o % groups or cg * groups != c:
        raise ShapeError(at_user_line(
            f"nn.conv2d: with groups={groups}, an input of {c} channels needs a weight of "
            f"{c // groups} input channels and a multiple of {groups} output channels; got "
            f"input {tuple(x.shape)} and weight {tuple(weight.shape)} (the input is NCHW, the "
            f"weight OIHW: (O, C/groups, KH, KW); transpose an NHWC input or an HWIO weight)"))
    if bias is not None and [d for d in lift(bias).shape if d != 1] != ([o] if o != 1 else []):
        raise ShapeError(at_user_line(  # ((O,), or (O, 1, 1) or (1, O, 1, 1) as torch's)
            f"nn.conv2d: bias must be ({o},), one per output channel of weight "
            f"{tuple(weight.shape)}; got {tuple(lift(bias).shape)}"))
    (kh, kw), stride, dilation, padding = _window("conv2d", x, (kh, kw), stride, padding,
                                                  dilation)
    cols = ops.unfold(_pad2d(x, padding, 0.0), (kh, kw), stride, dilation)  # N,C,OH,OW,KH,KW
    oh, ow = cols.shape[2:4]
    w = ops.reshape(weight, (o, cg * kh * kw))
    if groups == 1:
        rows = ops.reshape(ops.transpose(cols, (0, 2, 3, 1, 4, 5)), (n * oh * ow, c * kh * kw))
        y = ops.matmul(rows, ops.transpose(w))  # N*OH*OW, O
        y = ops.transpose(ops.reshape(y, (n, oh, ow, o)), (0, 3, 1, 2))
    else:
        g, og = groups, o // groups
        cols = ops.reshape(cols, (n, g, cg, oh, ow, kh, kw))
        rows = ops.reshape(ops.transpose(cols, (1, 0, 3, 4, 2, 5, 6)),
                           (g, n * oh * ow, cg * kh * kw))
        wg = ops.transpose(ops.reshape(w, (g, og, cg * kh * kw)), (0, 2, 1))
        y = ops.matmul(rows, wg)  # G, N*OH*OW, O/G
        y = ops.transpose(ops.reshape(y, (g, n, oh, ow, og)), (1, 0, 4, 2, 3))
        y = ops.reshape(y, (n, o, oh, ow))
    if bias is not None:
        y = ops.add(y, ops.reshape(bias, (o, 1, 1)))
    return y


def max_pool2d(x: Any, kernel: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | str | Sequence[Any] = 0) -> Any:
    """Max over windows of the last two dims (padding counts as -inf: an integer's least
    value, a boolean's False), as unfold + max; `kernel` and `stride` (default: the kernel)
    an int or a (height, width) pair, `padding` as conv2d's."""
    x = lift(x)
    kernel, stride, _, padding = _window("max_pool2d", x, kernel, stride, padding)
    dtype = np.dtype(x.dtype)
    least = -np.inf if dtype.kind == "f" else False if dtype == np.bool_ else \
        int(np.iinfo(dtype).min)
    cols = ops.unfold(_pad2d(x, padding, least), kernel, stride)
    return ops.max(cols, axis=(-2, -1))


def avg_pool2d(x: Any, kernel: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | str | Sequence[Any] = 0) -> Any:
    """Mean over windows of the last two dims (padding counts as zeros; the divisor is always
    kh*kw, flax's and torch's default, for 'SAME' too), as unfold + sum and a scale; `kernel`,
    `stride` and `padding` as max_pool2d's."""
    x = lift(x)
    kernel, stride, _, padding = _window("avg_pool2d", x, kernel, stride, padding)
    cols = ops.unfold(_pad2d(x, padding, 0.0), kernel, stride)
    return ops.divide(ops.sum(cols, axis=(-2, -1)), float(kernel[0] * kernel[1]))


# ----------------------------------------------------------------------------------------------
# Losses


def mse(prediction: Any, target: Any) -> Any:
    """Mean squared error over all elements."""
    return ops.mean(ops.square(ops.subtract(prediction, target)))


def softmax_cross_entropy(logits: Any, labels: Any) -> Any:
    """The mean over every position (all dims but the last) of -log softmax(logits)[label].

    `labels` are integer class indices shaped like logits without its last dim (an index out
    of range is clamped, as a gather's), or one-hot (or soft) float or boolean labels shaped
    like logits: then the loss is -sum(labels * log_softmax(logits)) per position."""
    log_p = ops.log_softmax(logits)
    labels = _labels("softmax_cross_entropy", logits, labels)
    if np.dtype(labels.dtype).kind == "i":
        picked = ops.take_along_axis(log_p, ops.expand_dims(labels, -1), -1)
        return ops.negative(ops.mean(picked))
    per_example = ops.sum(ops.multiply(labels, log_p), axis=-1)
    return ops.negative(ops.mean(per_example))


def accuracy(logits: Any, labels: Any) -> Any:
    """The fraction (float32) of positions whose largest logit is the label's: integer labels,
    or one-hot float or boolean ones shaped like logits (their argmax), as
    softmax_cross_entropy takes them."""
    labels = _labels("accuracy", logits, labels)
    if np.dtype(labels.dtype).kind != "i":
        labels = ops.argmax(labels, axis=-1)
    hits = ops.equal(ops.argmax(logits, axis=-1), labels)
    return ops.mean(ops.astype(hits, np.float32))


def _labels(name: str, logits: Any, labels: Any) -> Any:
    """`labels` lifted, checked for `name`: integer class indices shaped like the logits
    without their last dim, or one-hot (soft) float or boolean labels shaped like the logits:
    a ShapeError otherwise (bool labels [True, False] beside logits of 2 classes had been
    broadcast along the classes, float class indices [1., 0.] taken as soft labels)."""
    logits, labels = lift(logits), lift(labels)
    positions, shape = tuple(logits.shape[:-1]), tuple(labels.shape)
    if np.dtype(labels.dtype).kind == "i":
        if shape != positions:
            raise ShapeError(at_user_line(
                f"nn.{name}: integer labels (class indices) must be shaped like the logits "
                f"without their last dim, {positions}; got {shape}"))
    elif shape != tuple(logits.shape):
        raise ShapeError(at_user_line(
            f"nn.{name}: {labels.dtype} labels are one-hot (or soft) labels, shaped like the "
            f"logits, {tuple(logits.shape)}; got {shape} (class indices must be integers: "
            ".astype(np.int32))"))
    return labels


# ----------------------------------------------------------------------------------------------
# Transformer layers


def embedding_init(rng: np.random.Generator, count: int, width: int, std: float = 0.02,
                   dtype: Any = np.float32) -> Params:
    """{"E": (count, width)}, normal with standard deviation `std` (GPT-2's 0.02)."""
    return {"E": (rng.standard_normal((count, width)) * std).astype(dtype)}


def embedding(params: Params, ids: Any) -> Any:
    """The rows of params["E"] at the integer `ids` (any shape): E[ids], a tape.take whose
    gradient is a scatter-add; ids out of range are clamped, as a gather's."""
    return ops.take(_parameters("embedding", params, "embedding_init", "ids")["E"], ids, axis=0)


def layer_norm_init(width: int, dtype: Any = np.float32) -> Params:
    """{"scale": ones, "bias": zeros} of (width,)."""
    return {"scale": np.ones(width, dtype), "bias": np.zeros(width, dtype)}


def layer_norm(params: Params, x: Any, eps: float = 1e-5) -> Any:
    """(x - mean) / sqrt(var + eps) * scale + bias over the last axis (torch's LayerNorm): one
    `tape.layer_norm` (its gradient one `tape.layer_norm_backward`), then the scale and bias."""
    params = _parameters("layer_norm", params, "layer_norm_init")
    (x,), weak = promote("nn.layer_norm", x, floating=True)
    _widths("layer_norm", params, ("scale", "bias"), x, "layer_norm_init")
    normed = weakened(bind(tape.LayerNormOp, x, eps=float(eps)), weak)
    return ops.add(ops.multiply(normed, params["scale"]), params["bias"])


def rms_norm_init(width: int, dtype: Any = np.float32) -> Params:
    """{"scale": ones of (width,)}."""
    return {"scale": np.ones(width, dtype)}


def rms_norm(params: Params, x: Any, eps: float = 1e-6) -> Any:
    """x / sqrt(mean(x^2) + eps) * scale over the last axis."""
    params = _parameters("rms_norm", params, "rms_norm_init")
    x = lift(x)
    _widths("rms_norm", params, ("scale",), x, "rms_norm_init")
    ms = ops.mean(ops.square(x), axis=-1, keepdims=True)
    return ops.multiply(ops.multiply(x, ops.divide(1.0, ops.sqrt(ops.add(ms, eps)))),
                        params["scale"])


def gelu(x: Any, approximate: bool = False) -> Any:
    """x * Phi(x): exact, 0.5 x (1 + erf(x / sqrt 2)) (torch's default), or with `approximate`
    the tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (JAX's default)."""
    if approximate:
        inner = ops.multiply(ops.add(x, ops.multiply(0.044715, ops.multiply(x, ops.square(x)))),
                             float(np.sqrt(2 / np.pi)))
        return ops.multiply(ops.multiply(x, 0.5), ops.add(ops.tanh(inner), 1.0))
    return ops.multiply(ops.multiply(x, 0.5),
                        ops.add(ops.erf(ops.multiply(x, float(1 / np.sqrt(2)))), 1.0))


def dot_product_attention(q: Any, k: Any, v: Any, causal: bool = False, mask: Any = None,
                          scale: float | None = None) -> Any:
    """softmax(q k^T * scale, masked) v over the last two dims: q (..., Tq, D), k (..., Tk, D),
    v (..., Tk, Dv), any leading (batch, head) dims that broadcast; scale defaults to
    1/sqrt(D). `causal` keeps key j for query i when j <= i (torch's is_causal, built in the
    program from two iotas); `mask` is boolean, broadcastable to (..., Tq, Tk), True where a
    query may attend. A masked score is the dtype's lowest finite value (as JAX's), so a row
    with every key masked averages v uniformly instead of giving NaN."""
    q, k, v = lift(q), lift(k), lift(v)
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or q.shape[-1] != k.shape[-1] or \
            k.shape[-2] != v.shape[-2] or _broadcast(q.shape[:-2], k.shape[:-2],
                                                     v.shape[:-2]) is None:
        raise ShapeError(at_user_line(
            f"nn.dot_product_attention: q (..., Tq, D), k (..., Tk, D) and v (..., Tk, Dv) "
            f"must agree, their leading (batch, head) dims broadcast (heads before time: "
            f"(B, H, T, D)), got {tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}"))
    scale = float(1 / np.sqrt(q.shape[-1])) if scale is None else float(scale)
    scores = ops.matmul(ops.multiply(q, scale), ops.transpose(
        k, (*range(k.ndim - 2), k.ndim - 1, k.ndim - 2)))
    keep = None
    if causal:
        shape = tuple(scores.shape[-2:])
        keep = ops.less_equal(ops.iota(shape, 1), ops.iota(shape, 0))
    if mask is not None:
        mask = lift(mask)
        if np.dtype(mask.dtype) != np.bool_:
            raise TypeError(at_user_line(f"nn.dot_product_attention: mask must be boolean "
                                         f"(True where a query may attend), got {mask.dtype}"))
        if _broadcast(mask.shape, scores.shape) != tuple(scores.shape):
            raise ShapeError(at_user_line(
                f"nn.dot_product_attention: mask {tuple(mask.shape)} must broadcast to the "
                f"scores' (..., Tq, Tk) = {tuple(scores.shape)} of q {tuple(q.shape)} and k "
                f"{tuple(k.shape)}"))
        keep = mask if keep is None else ops.logical_and(keep, mask)
    if keep is not None:
        scores = ops.where(keep, scores, float(np.finfo(scores.dtype).min))
    return ops.matmul(ops.softmax(scores, axis=-1), v)
