"""tapeml.nn's transformer pieces (issue 17): embedding, layer_norm, rms_norm, gelu,
dot_product_attention, integer-label cross entropy, accuracy. References are numpy written
plainly (math.erf for gelu); gradients by central differences in f64; the compiled CPU program
against the interpreter."""

from __future__ import annotations

import math

import numpy as np
import pytest
from bits import assert_same_bits

import tapeml
from tapeml import nn

RNG = np.random.default_rng(7)


def _numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


def _check_grad(loss, x, rtol=1e-6, atol=1e-8):
    got = tapeml.grad(loss)(x)
    np.testing.assert_allclose(got, _numeric_grad(lambda x: float(loss(x)), x),
                               rtol=rtol, atol=atol)


def _compiled_matches_interpreter(fn, *args):
    interpreted = tapeml.trace(fn, *args)(*args)
    compiled = tapeml.jit(fn)(*args)
    for a, b in zip(tapeml.tree_map(np.asarray, interpreted) if isinstance(interpreted, tuple)
                    else (interpreted,), compiled if isinstance(compiled, tuple) else (compiled,),
                    strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_embedding_is_a_gather_and_its_gradient_a_scatter_add():
    params = nn.embedding_init(RNG, 10, 4, dtype=np.float64)
    assert params["E"].shape == (10, 4)
    ids = np.array([[1, 9, 1], [0, 3, 3]])
    assert_same_bits(tapeml.jit(nn.embedding)(params, ids), params["E"][ids])
    w = RNG.normal(size=(2, 3, 4))
    g = tapeml.grad(lambda p: tapeml.sum(nn.embedding(p, ids) * w))(params)["E"]
    want = np.zeros((10, 4))
    np.add.at(want, ids, w)
    np.testing.assert_allclose(g, want, rtol=1e-15)


def test_layer_norm_and_rms_norm_match_their_formulas():
    x = RNG.normal(size=(3, 5, 8))
    p = {"scale": RNG.normal(size=8), "bias": RNG.normal(size=8)}
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    np.testing.assert_allclose(nn.layer_norm(p, x), (x - mu) / np.sqrt(var + 1e-5) * p["scale"]
                               + p["bias"], rtol=1e-12)
    rms = np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(nn.rms_norm(p, x), x / rms * p["scale"], rtol=1e-12)
    w = RNG.normal(size=x.shape)
    _check_grad(lambda x: tapeml.sum(nn.layer_norm(p, x) * w), x)
    _check_grad(lambda x: tapeml.sum(nn.rms_norm(p, x) * w), x)
    init = nn.layer_norm_init(8)
    assert_same_bits(init["scale"], np.ones(8, np.float32))
    assert_same_bits(init["bias"], np.zeros(8, np.float32))
    _compiled_matches_interpreter(lambda x: nn.layer_norm(init, x), x.astype(np.float32))


def test_gelu_exact_and_tanh():
    x = np.array([-6.0, -1.5, -0.0, 0.0, 0.3, 1.0, 4.0, np.inf, -np.inf])
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) if np.isfinite(v) else
                      (v if v > 0 else -0.0) for v in x])
    np.testing.assert_allclose(nn.gelu(x)[:-1], exact[:-1], rtol=1e-15, atol=1e-300)
    f = x[:-2]
    approx = 0.5 * f * (1 + np.tanh(np.sqrt(2 / np.pi) * (f + 0.044715 * f ** 3)))
    np.testing.assert_allclose(nn.gelu(f, approximate=True), approx, rtol=1e-15)
    y = RNG.normal(size=7)
    _check_grad(lambda y: tapeml.sum(nn.gelu(y)), y)
    _check_grad(lambda y: tapeml.sum(nn.gelu(y, approximate=True)), y)
    _compiled_matches_interpreter(nn.gelu, y.astype(np.float32))


def _attention_reference(q, k, v, keep=None):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if keep is not None:
        scores = np.where(keep, scores, np.finfo(scores.dtype).min)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def test_dot_product_attention_matches_numpy_causal_and_masked():
    q, k, v = (RNG.normal(size=(2, 3, 5, 4)) for _ in range(3))
    np.testing.assert_allclose(nn.dot_product_attention(q, k, v),
                               _attention_reference(q, k, v), rtol=1e-12)
    causal = np.tril(np.ones((5, 5), bool))
    np.testing.assert_allclose(nn.dot_product_attention(q, k, v, causal=True),
                               _attention_reference(q, k, v, causal), rtol=1e-12)
    mask = RNG.random((2, 1, 5, 5)) > 0.3
    mask[0, 0, 2] = False  # a row with every key masked averages v uniformly
    np.testing.assert_allclose(nn.dot_product_attention(q, k, v, causal=True, mask=mask),
                               _attention_reference(q, k, v, causal & mask), rtol=1e-12)
    assert np.isfinite(nn.dot_product_attention(q, k, v, mask=mask)).all()
    program = str(tapeml.trace(lambda q, k, v: nn.dot_product_attention(q, k, v, causal=True),
                               q, k, v))
    assert "tape.iota" in program and "xi1> = tape.constant" not in program  # built inside
    for name, x in (("q", q), ("k", k), ("v", v)):
        def loss(x, name=name):
            args = {"q": q, "k": k, "v": v} | {name: x}
            return tapeml.sum(nn.dot_product_attention(**args, causal=True) * q)
        _check_grad(loss, x)
    _compiled_matches_interpreter(lambda q, k, v: nn.dot_product_attention(q, k, v, causal=True),
                                  *(a.astype(np.float32) for a in (q, k, v)))
    with pytest.raises(tapeml.ShapeError, match="must agree"):
        nn.dot_product_attention(q, k[..., :3], v)
    with pytest.raises(TypeError, match="mask must be boolean"):
        nn.dot_product_attention(q, k, v, mask=np.ones((5, 5)))


def test_cross_entropy_takes_integer_labels_and_one_hot_alike():
    logits = RNG.normal(size=(4, 3, 6))
    labels = RNG.integers(0, 6, size=(4, 3))
    log_p = logits - logits.max(-1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(-1, keepdims=True))
    want = -np.take_along_axis(log_p, labels[..., None], -1).mean()
    np.testing.assert_allclose(nn.softmax_cross_entropy(logits, labels), want, rtol=1e-13)
    one_hot = np.eye(6)[labels]
    np.testing.assert_allclose(nn.softmax_cross_entropy(logits, one_hot), want, rtol=1e-13)
    _check_grad(lambda z: nn.softmax_cross_entropy(z, labels), logits)
    _compiled_matches_interpreter(nn.softmax_cross_entropy, logits.astype(np.float32), labels)
    with pytest.raises(tapeml.ShapeError,
                       match=r"integer labels \(class indices\) must be shaped like the logits"):
        nn.softmax_cross_entropy(logits, labels[:, :2])


def test_accuracy_counts_argmax_hits():
    logits = np.array([[0.1, 2.0, 0.3], [5.0, 1.0, 1.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    labels = np.array([1, 0, 0, 1])  # the last row ties: argmax is the first, 0
    assert float(tapeml.jit(nn.accuracy)(logits, labels)) == 0.5
    assert float(nn.accuracy(logits, np.eye(3)[labels])) == 0.5
    assert nn.accuracy(logits, labels).dtype == np.float32
