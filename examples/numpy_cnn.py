"""The small CNN's training step written plainly with numpy (im2col convolutions, explicit
backward, Adam): the reference `make demo` and `bench/` time the compiled step against.

The network: conv3x3 (pad 1) + relu + maxpool2, conv3x3 (pad 1) + relu + maxpool2, linear,
softmax cross-entropy; parameters {"c1", "c2": {"W": (O, C, 3, 3), "b": (O,)}, "out": {"W", "b"}}.
"""

from __future__ import annotations

import numpy as np


def windows(x: np.ndarray, k: int = 3) -> np.ndarray:
    """(N, C, H, W) padded by 1 -> (N, H, W, C*k*k)."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))
    return cols.transpose(0, 2, 3, 1, 4, 5).reshape(*x.shape[:1], *x.shape[2:], -1)


def _conv(x, layer):
    cols = windows(x)
    out = cols @ layer["W"].reshape(len(layer["W"]), -1).T + layer["b"]
    return cols, out.transpose(0, 3, 1, 2)


def _pool(a):
    n, c, h, w = a.shape
    blocks = a.reshape(n, c, h // 2, 2, w // 2, 2)
    m = blocks.max(axis=(3, 5))
    return m, blocks == m[:, :, :, None, :, None]


def _unpool(d, mask):  # ties share the gradient evenly, as tape.max's pullback does
    share = mask / mask.sum(axis=(3, 5), keepdims=True)
    return (share * d[:, :, :, None, :, None]).reshape(*d.shape[:2], d.shape[2] * 2, -1)


def _conv_back(d, cols, layer, x_shape, dtype):
    d_rows = d.transpose(0, 2, 3, 1)  # N, H, W, O
    dw = np.tensordot(d_rows, cols, axes=([0, 1, 2], [0, 1, 2])).reshape(layer["W"].shape)
    dcols = d_rows @ layer["W"].reshape(len(layer["W"]), -1)  # N, H, W, C*9
    n, c, h, w = x_shape
    dcols = dcols.reshape(n, h, w, c, 3, 3)
    dxp = np.zeros((n, c, h + 2, w + 2), dtype)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i:i + h, j:j + w] += dcols[..., i, j].transpose(0, 3, 1, 2)
    return dw, d.sum(axis=(0, 2, 3)), dxp[:, :, 1:-1, 1:-1]


def value_and_grad(p: dict, x: np.ndarray, y: np.ndarray) -> tuple[np.floating, dict]:
    """The mean cross-entropy of one-hot labels `y` and its gradient, structured like `p`."""
    cols1, z1 = _conv(x, p["c1"])
    h1, m1 = _pool(np.maximum(z1, 0))
    cols2, z2 = _conv(h1, p["c2"])
    h2, m2 = _pool(np.maximum(z2, 0))
    flat = h2.reshape(len(x), -1)
    z = flat @ p["out"]["W"] + p["out"]["b"]
    shifted = z - z.max(1, keepdims=True)
    e = np.exp(shifted)
    loss = -(y * (shifted - np.log(e.sum(1, keepdims=True)))).sum() / len(x)
    dz = (e / e.sum(1, keepdims=True) - y) / len(x)
    d_flat = dz @ p["out"]["W"].T
    dz2 = _unpool(d_flat.reshape(h2.shape), m2) * (z2 > 0)
    dw2, db2, dh1 = _conv_back(dz2, cols2, p["c2"], h1.shape, x.dtype)
    dz1 = _unpool(dh1, m1) * (z1 > 0)
    dw1, db1, _ = _conv_back(dz1, cols1, p["c1"], x.shape, x.dtype)
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
