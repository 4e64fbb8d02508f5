"""W7's GPT training step written plainly with numpy: the forward pass and a hand-written
backward pass, float32 throughout.

The model is examples/gpt.py's (its `init` makes the parameters): token and position embeddings,
pre-LN blocks of causal multi-head attention and an exact-GELU MLP, a final layer norm, an
unembedding, mean softmax cross-entropy over every position. Tokens enter either as integer ids
(a gather; its gradient a scatter-add, `np.add.at`) or one-hot (a matmul with the table, as
../shared/reference/workloads.md's W7 has it, with one-hot targets).

    loss, grads = value_and_grad(params, tokens, targets, heads)

`grads` has the structure of `params`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import erf

EPS = 1e-5  # nn.layer_norm's
_SQRT_HALF = np.float32(1 / np.sqrt(2))
_INV_SQRT_2PI = np.float32(1 / np.sqrt(2 * np.pi))


def _linear(p: dict, x: np.ndarray) -> np.ndarray:
    return x @ p["W"] + p["b"]


def _linear_back(p: dict, x: np.ndarray, dy: np.ndarray) -> tuple[dict, np.ndarray]:
    x2, dy2 = x.reshape(-1, x.shape[-1]), dy.reshape(-1, dy.shape[-1])
    return {"W": x2.T @ dy2, "b": dy2.sum(0)}, dy @ p["W"].T


def _layer_norm(p: dict, x: np.ndarray) -> tuple[np.ndarray, tuple]:
    centered = x - x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt((centered * centered).mean(-1, keepdims=True) + np.float32(EPS))
    xhat = centered * rstd
    return xhat * p["scale"] + p["bias"], (xhat, rstd)


def _layer_norm_back(p: dict, saved: tuple, dy: np.ndarray) -> tuple[dict, np.ndarray]:
    xhat, rstd = saved
    grads = {"scale": (dy * xhat).reshape(-1, xhat.shape[-1]).sum(0),
             "bias": dy.reshape(-1, dy.shape[-1]).sum(0)}
    dxhat = dy * p["scale"]
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    return grads, dx


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _attention(p: dict, x: np.ndarray, heads: int) -> tuple[np.ndarray, tuple]:
    b, t, width = x.shape
    d = width // heads
    qkv = _linear(p["qkv"], x)
    q, k, v = (qkv[..., i * width:(i + 1) * width].reshape(b, t, heads, d).transpose(0, 2, 1, 3)
               for i in range(3))
    scale = np.float32(1 / np.sqrt(d))
    qs = q * scale
    scores = qs @ k.transpose(0, 1, 3, 2)
    keep = np.tril(np.ones((t, t), bool))
    scores = np.where(keep, scores, np.finfo(np.float32).min)
    probs = _softmax(scores)
    a = (probs @ v).transpose(0, 2, 1, 3).reshape(b, t, width)
    return _linear(p["proj"], a), (qs, k, v, probs, a, scale)


def _attention_back(p: dict, x: np.ndarray, saved: tuple, dy: np.ndarray, heads: int
                    ) -> tuple[dict, np.ndarray]:
    qs, k, v, probs, a, scale = saved
    b, t, width = x.shape
    d = width // heads
    g_proj, da = _linear_back(p["proj"], a, dy)
    da = da.reshape(b, t, heads, d).transpose(0, 2, 1, 3)
    dprobs = da @ v.transpose(0, 1, 3, 2)
    dv = probs.transpose(0, 1, 3, 2) @ da
    dscores = probs * (dprobs - (dprobs * probs).sum(-1, keepdims=True))  # 0 where masked
    dq = (dscores @ k) * scale
    dk = dscores.transpose(0, 1, 3, 2) @ qs
    dqkv = np.concatenate([g.transpose(0, 2, 1, 3).reshape(b, t, width) for g in (dq, dk, dv)],
                          axis=-1)
    g_qkv, dx = _linear_back(p["qkv"], x, dqkv)
    return {"qkv": g_qkv, "proj": g_proj}, dx


def _gelu(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact GELU, x Phi(x), and its derivative Phi(x) + x phi(x)."""
    phi_cdf = 0.5 * (1 + erf(x * _SQRT_HALF))
    return x * phi_cdf, phi_cdf + x * _INV_SQRT_2PI * np.exp(-0.5 * x * x)


def _blocks(params: dict) -> list[str]:
    return [f"block{i}" for i in range(sum(1 for k in params if k.startswith("block")))]


def value_and_grad(params: dict, tokens: np.ndarray, targets: np.ndarray, heads: int
                   ) -> tuple[np.float32, dict]:
    """The mean cross-entropy and every parameter's gradient. Integer `tokens` (batch, time)
    with integer `targets`, or one-hot float `tokens` (batch, time, vocab) with one-hot
    `targets`."""
    one_hot = tokens.dtype.kind == "f"
    tok, pos = params["tok"]["E"], params["pos"]["E"]
    t = tokens.shape[1]
    x = (tokens @ tok if one_hot else tok[tokens]) + pos[:t]
    saved: list[Any] = []
    for name in _blocks(params):
        p = params[name]
        h1, ln1 = _layer_norm(p["ln1"], x)
        att, att_saved = _attention(p, h1, heads)
        x = x + att
        h2, ln2 = _layer_norm(p["ln2"], x)
        f = _linear(p["fc"], h2)
        g, dgelu = _gelu(f)
        x = x + _linear(p["out"], g)
        saved.append((h1, ln1, att_saved, h2, ln2, g, dgelu))
    hf, lnf = _layer_norm(params["ln_f"], x)
    logits = _linear(params["head"], hf)
    z = logits - logits.max(-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
    positions = logits.shape[0] * logits.shape[1]
    if one_hot:
        value = -(targets * log_p).sum() / positions
        dlogits = (np.exp(log_p) * targets.sum(-1, keepdims=True) - targets) / positions
    else:
        value = -np.take_along_axis(log_p, targets[..., None], -1).mean()
        dlogits = np.exp(log_p)
        np.put_along_axis(dlogits, targets[..., None],
                          np.take_along_axis(dlogits, targets[..., None], -1) - 1, -1)
        dlogits /= positions

    grads: dict = {}
    grads["head"], dhf = _linear_back(params["head"], hf, dlogits)
    grads["ln_f"], dx = _layer_norm_back(params["ln_f"], lnf, dhf)
    for name, (h1, ln1, att_saved, h2, ln2, g, dgelu) in zip(
            reversed(_blocks(params)), reversed(saved), strict=True):
        p = params[name]
        g_out, dg = _linear_back(p["out"], g, dx)
        g_fc, dh2 = _linear_back(p["fc"], h2, dg * dgelu)
        g_ln2, dres = _layer_norm_back(p["ln2"], ln2, dh2)
        dx = dx + dres
        g_att, dh1 = _attention_back(p, h1, att_saved, dx, heads)
        g_ln1, dres = _layer_norm_back(p["ln1"], ln1, dh1)
        dx = dx + dres
        grads[name] = {"ln1": g_ln1, "qkv": g_att["qkv"], "proj": g_att["proj"], "ln2": g_ln2,
                       "fc": g_fc, "out": g_out}
    dpos = np.zeros_like(pos)
    dpos[:t] = dx.sum(0)
    if one_hot:
        dtok = tokens.reshape(-1, tokens.shape[-1]).T @ dx.reshape(-1, dx.shape[-1])
    else:
        dtok = np.zeros_like(tok)
        np.add.at(dtok, tokens.reshape(-1), dx.reshape(-1, dx.shape[-1]))
    grads["tok"], grads["pos"] = {"E": dtok}, {"E": dpos}
    return np.float32(value), grads
