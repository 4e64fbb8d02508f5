"""The small CNN's training step written plainly with numpy (im2col convolutions, explicit
backward, Adam): the reference `make demo` and `bench/` time the compiled step against.

The network: conv3x3 (pad 1) + relu + maxpool2, conv3x3 (pad 1) + relu + maxpool2, linear,
softmax cross-entropy; parameters {"c1", "c2": {"W": (O, C, 3, 3), "b": (O,)}, "out": {"W", "b"}}.

Run as a script (`.venv/bin/python examples/numpy_cnn.py`), it times the Adam step on a batch
of 32 random 1x8x8 images with random parameters of the demo's shapes and prints the first step's
loss and the median time of 50 more.
"""

from __future__ import annotations

import numpy as np


def windows(x: np.ndarray, k: int = 3) -> np.ndarray:
    """(N, H, W, C) padded by 1 -> (N*H*W, k*k*C), contiguous: one BLAS matmul per conv."""
    n, h, w, c = x.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    cols = np.empty((n, h, w, k, k, c), x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, :, i, j] = xp[:, i:i + h, j:j + w]
    return cols.reshape(n * h * w, k * k * c)


def _rows(weight: np.ndarray) -> np.ndarray:
    """(O, C, k, k) -> (k*k*C, O), the order of `windows`' columns."""
    return weight.transpose(2, 3, 1, 0).reshape(-1, len(weight))


def _conv(x, layer):
    n, h, w, _ = x.shape
    cols = windows(x)
    return cols, (cols @ _rows(layer["W"]) + layer["b"]).reshape(n, h, w, -1)


_CORNERS = ((0, 0), (0, 1), (1, 0), (1, 1))


def _pool(a):
    """2x2 max pooling, NHWC: the maxima, and each window corner's share of the gradient (ties
    share it evenly, as tape.max's pullback does)."""
    corners = [a[:, i::2, j::2] for i, j in _CORNERS]
    m = np.maximum(np.maximum(corners[0], corners[1]), np.maximum(corners[2], corners[3]))
    hits = [(corner == m).astype(a.dtype) for corner in corners]
    count = hits[0] + hits[1] + hits[2] + hits[3]
    return m, [hit / count for hit in hits]


def _unpool(d, shares):
    n, h, w, c = d.shape
    out = np.empty((n, h * 2, w * 2, c), d.dtype)
    for (i, j), share in zip(_CORNERS, shares, strict=True):
        out[:, i::2, j::2] = share * d
    return out


def _conv_back(d, cols, layer, x_shape, input_gradient=True):
    """The weight's, the bias's and (if asked) the input's gradients of a conv, NHWC."""
    n, h, w, c = x_shape
    d_rows = d.reshape(n * h * w, -1)  # N*H*W, O
    dw = (cols.T @ d_rows).reshape(3, 3, c, -1).transpose(3, 2, 0, 1)
    if not input_gradient:
        return dw, d_rows.sum(0), None
    dcols = (d_rows @ _rows(layer["W"]).T).reshape(n, h, w, 3, 3, c)
    dxp = np.zeros((n, h + 2, w + 2, c), d.dtype)
    for i in range(3):
        for j in range(3):
            dxp[:, i:i + h, j:j + w] += dcols[:, :, :, i, j]
    return dw, d_rows.sum(0), dxp[:, 1:-1, 1:-1]


def value_and_grad(p: dict, x: np.ndarray, y: np.ndarray) -> tuple[np.floating, dict]:
    """The mean cross-entropy of one-hot labels `y` and its gradient, structured like `p`.
    Computed channels-last (NHWC), where each conv is one contiguous matmul; the flatten
    before the linear layer is in NCHW order, as the traced model's."""
    x = x.transpose(0, 2, 3, 1)
    cols1, z1 = _conv(x, p["c1"])
    h1, m1 = _pool(np.maximum(z1, 0))
    cols2, z2 = _conv(h1, p["c2"])
    h2, m2 = _pool(np.maximum(z2, 0))
    flat = h2.transpose(0, 3, 1, 2).reshape(len(x), -1)
    z = flat @ p["out"]["W"] + p["out"]["b"]
    shifted = z - z.max(1, keepdims=True)
    e = np.exp(shifted)
    loss = -(y * (shifted - np.log(e.sum(1, keepdims=True)))).sum() / len(x)
    dz = (e / e.sum(1, keepdims=True) - y) / len(x)
    d_flat = (dz @ p["out"]["W"].T).reshape(h2.shape[0], h2.shape[3], *h2.shape[1:3])
    dz2 = _unpool(d_flat.transpose(0, 2, 3, 1), m2) * (z2 > 0)
    dw2, db2, dh1 = _conv_back(dz2, cols2, p["c2"], h1.shape)
    dz1 = _unpool(dh1, m1) * (z1 > 0)
    dw1, db1, _ = _conv_back(dz1, cols1, p["c1"], x.shape, input_gradient=False)
    return loss, {"c1": {"W": dw1, "b": db1}, "c2": {"W": dw2, "b": db2},
                  "out": {"W": flat.T @ dz, "b": dz.sum(0)}}


def adam_step(p: dict, state: dict, x: np.ndarray, y: np.ndarray, learning_rate: float,
              b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> tuple[dict, dict, float]:
    """One Adam training step: (new params, new state {"step", "m", "v"}, loss)."""
    loss, grads = value_and_grad(p, x, y)
    t = state["step"] + 1
    new_p, m, v = {}, {}, {}
    for layer in p:
        new_p[layer], m[layer], v[layer] = {}, {}, {}
        for k in p[layer]:
            g = grads[layer][k]
            m[layer][k] = state["m"][layer][k] * b1 + g * (1 - b1)
            v[layer][k] = state["v"][layer][k] * b2 + g * g * (1 - b2)
            m_hat = m[layer][k] / (1 - b1 ** t)
            v_hat = v[layer][k] / (1 - b2 ** t)
            new_p[layer][k] = p[layer][k] - m_hat / (np.sqrt(v_hat) + eps) * learning_rate
    return new_p, {"step": t, "m": m, "v": v}, loss


if __name__ == "__main__":
    import time

    rng = np.random.default_rng(0)
    shapes = {"c1": (16, 1, 3, 3), "c2": (32, 16, 3, 3), "out": (128, 10)}  # the demo's CNN
    params = {layer: {"W": (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
                            ).astype(np.float32),
                      "b": np.zeros(shape[0] if layer != "out" else shape[1], np.float32)}
              for layer, shape in shapes.items()}
    zeros = {layer: {k: np.zeros_like(v) for k, v in p.items()} for layer, p in params.items()}
    state = {"step": 0, "m": zeros, "v": zeros}
    x = rng.random((32, 1, 8, 8)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 32)]
    _, _, loss = adam_step(params, state, x, y, 0.01)
    times = []
    for _ in range(50):
        start = time.perf_counter()
        adam_step(params, state, x, y, 0.01)
        times.append(time.perf_counter() - start)
    print(f"numpy CNN step, batch 32 of 1x8x8: loss {float(loss):.4f}, "
          f"{np.median(times) * 1e3:.2f} ms (median of 50)")
