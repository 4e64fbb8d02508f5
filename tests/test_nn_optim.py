"""Layers, losses and optimizers against plain references (loops for conv/pool, numpy written
out for the rest), eagerly and traced."""

from __future__ import annotations

import numpy as np
import pytest
import reference  # tests/reference.py: direct loop implementations

import tapeml
from tapeml import nn, optim
from tapeml.tracing.pytree import flatten

RNG = np.random.default_rng(1)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def both(fn, *args):
    """`fn` eagerly and as a traced program; checks they agree exactly; returns the value."""
    eager = fn(*args)
    traced = tapeml.trace(fn, *args)(*args)
    np.testing.assert_array_equal(eager, traced)
    return eager


@pytest.mark.parametrize(
    ("n", "c", "h", "w", "o", "k", "stride", "padding", "dilation", "groups"),
    [
        (2, 3, 7, 6, 4, (3, 3), 1, 1, 1, 1),
        (1, 2, 9, 8, 4, (3, 2), (2, 1), (1, 0, 2, 1), (1, 2), 2),
        (2, 4, 5, 5, 4, (3, 3), 2, 1, 1, 4),  # depthwise
        (1, 1, 4, 4, 2, (1, 1), 3, 0, 1, 1),  # stride > kernel
    ],
)
def test_conv2d_matches_a_direct_loop_reference(n, c, h, w, o, k, stride, padding, dilation,
                                                groups):
    x = rand(n, c, h, w, dtype=np.float64)
    params = nn.conv2d_init(RNG, c, o, k, groups=groups, dtype=np.float64)
    got = both(lambda x, p: nn.conv2d(x, p["W"], p["b"], stride, padding, dilation, groups),
               x, params)
    pad4 = nn._padding(padding)
    expected = reference.conv2d(x, params["W"], nn._pair(stride), pad4, nn._pair(dilation),
                                groups) + params["b"][:, None, None]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("kernel", "stride", "padding"),
                         [(2, None, 0), ((3, 2), (2, 1), (1, 0, 1, 1)), (2, 3, 1)])
def test_pools_match_direct_loop_references(kernel, stride, padding):
    x = rand(2, 3, 7, 6)
    k = nn._pair(kernel)
    s = nn._pair(stride if stride is not None else kernel)
    p = nn._padding(padding)
    got = both(lambda x: nn.max_pool2d(x, kernel, stride, padding), x)
    np.testing.assert_array_equal(got, reference.maxpool2d(x, k, s, p))
    got = both(lambda x: nn.avg_pool2d(x, kernel, stride, padding), x)
    np.testing.assert_allclose(got, reference.avgpool2d(x, k, s, p), rtol=1e-6, atol=1e-6)


def test_linear_and_mlp():
    params = nn.mlp_init(RNG, [5, 7, 3, 2], dtype=np.float64)
    x = rand(4, 5, dtype=np.float64)
    got = both(lambda p, x: nn.mlp(p, x), params, x)
    h = x
    for i in (1, 2, 3):
        layer = params[f"lin{i}"]
        h = h @ layer["W"] + layer["b"]
        h = np.maximum(h, 0) if i < 3 else h
    np.testing.assert_allclose(got, h, rtol=1e-12)
    assert set(params) == {"lin1", "lin2", "lin3"} and params["lin2"]["W"].shape == (7, 3)


def test_a_layer_called_with_its_arguments_swapped_says_which_comes_first():
    """linear, mlp, embedding, layer_norm and rms_norm take their parameters' dict first,
    conv2d the input and arrays: a swapped call is a TypeError naming the layer, the order and
    the user's line, eager and traced (it was an IndexError on a string index, or conv2d's
    AttributeError from inside tapeml)."""
    x, img, ids = rand(2, 4), rand(2, 1, 5, 5), np.array([1, 2], np.int32)
    calls = [("linear", nn.linear, nn.linear_init(RNG, 4, 2), x),
             ("mlp", nn.mlp, nn.mlp_init(RNG, [4, 3]), x),
             ("embedding", nn.embedding, nn.embedding_init(RNG, 5, 4), ids),
             ("layer_norm", nn.layer_norm, nn.layer_norm_init(4), x),
             ("rms_norm", nn.rms_norm, nn.rms_norm_init(4), x)]
    for name, layer, params, value in calls:
        for run in (lambda p, v, layer=layer: layer(v, p),
                    tapeml.jit(lambda p, v, layer=layer: layer(v, p))):
            with pytest.raises(TypeError, match=rf"nn.{name}\(params, (x|ids)\): params is an "
                               r"array of shape \(2,.*the parameters come first\n  at "
                               r".*test_nn_optim.py"):
                run(params, value)
    conv = nn.conv2d_init(RNG, 1, 3, 3)
    for run in (lambda p, v: nn.conv2d(p, v), tapeml.jit(lambda p, v: nn.conv2d(p, v))):
        with pytest.raises(TypeError, match=r"nn.conv2d\(x, weight, bias=None, ...\): x is a "
                           r"dict.*nn.conv2d\(x, p\['W'\], p\['b'\]\).*\n  at .*test_nn_optim"):
            run(conv, img)


def test_losses():
    pred, target = rand(6, 3, dtype=np.float64), rand(6, 3, dtype=np.float64)
    np.testing.assert_allclose(both(nn.mse, pred, target), ((pred - target) ** 2).mean(),
                               rtol=1e-12)
    labels = np.eye(3)[[0, 2, 1, 1, 0, 2]]
    shifted = pred - pred.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(both(nn.softmax_cross_entropy, pred, labels),
                               -(labels * log_probs).sum(axis=1).mean(), rtol=1e-12)


def _params():
    rng = np.random.default_rng(7)
    return {"a": rng.standard_normal((3, 2)), "b": [rng.standard_normal(4)]}


def _grads(step):
    return {"a": np.full((3, 2), 0.1 * step), "b": [np.linspace(-1, 1, 4) * step]}


def _reference(name, p, grad_of_step):
    """The optimizer's update rule written out with numpy, three steps."""
    v, m, s = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    for step in range(1, 4):
        g = grad_of_step(step)
        if name == "sgd":
            p = p - 0.5 * g
        elif name == "momentum":
            v = 0.9 * v + g
            p = p - 0.1 * v
        else:
            m = 0.9 * m + 0.1 * g
            s = 0.999 * s + 0.001 * g * g
            m_hat, v_hat = m / (1 - 0.9**step), s / (1 - 0.999**step)
            p = p - 0.01 * m_hat / (np.sqrt(v_hat) + 1e-8)
    return p


@pytest.mark.parametrize(("name", "opt"), [("sgd", optim.sgd(0.5)),
                                           ("momentum", optim.momentum(0.1, 0.9)),
                                           ("adam", optim.adam(0.01))])
def test_optimizers_follow_their_update_rules(name, opt):
    params = _params()
    state = opt.init(params)
    for step in range(1, 4):
        params, state = opt.update(params, _grads(step), state)
    start = _params()
    np.testing.assert_allclose(
        params["a"], _reference(name, start["a"], lambda k: _grads(k)["a"]), rtol=1e-6)
    np.testing.assert_allclose(
        params["b"][0], _reference(name, start["b"][0], lambda k: _grads(k)["b"][0]), rtol=1e-6)


@pytest.mark.parametrize(("opt", "first"), [(optim.sgd(0.1), 0.95), (optim.momentum(0.1), 0.95),
                                           (optim.adam(0.1), 0.9)], ids=["sgd", "momentum", "adam"])
def test_a_python_number_among_the_parameters_is_a_float32_scalar_eager_and_jitted(opt, first):
    """A parameter given as a Python float is a 0-d f32 leaf of the state, as tapeml takes
    the number (init had read its .shape: an AttributeError), and eager and jitted updates
    agree, in f32 (adam's bias correction had read its .dtype; traced, a weak scalar's
    is f64); `first`: the number after one step of gradient 0.5 (1 - 0.1 * 0.5; adam's
    1 - 0.1 * g / |g|)."""
    params, grads = {"a": 1.0, "w": np.ones(2, np.float32)}, {"a": 0.5, "w": np.ones(2, np.float32)}
    state = opt.init(params)
    eager = opt.update(params, grads, state)
    jitted = tapeml.jit(lambda p, g, s: opt.update(p, g, s))(params, grads, state)
    for got, want in zip(flatten(jitted)[0], flatten(eager)[0], strict=True):
        assert np.asarray(got).dtype == np.asarray(want).dtype == np.float32
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(eager[0]["a"], first, rtol=1e-6)


def test_an_optimizer_step_traces_into_one_program():
    opt = optim.adam(0.01)
    params = {"w": rand(3, 2)}
    state = opt.init(params)
    grads = {"w": rand(3, 2)}
    program = tapeml.trace(opt.update, params, grads, state)
    eager_params, eager_state = opt.update(params, grads, state)
    traced_params, traced_state = program(params, grads, state)
    np.testing.assert_array_equal(traced_params["w"], eager_params["w"])
    np.testing.assert_array_equal(traced_state["m"]["w"], eager_state["m"]["w"])
    assert 'tapeml.name = "state.m.w"' in str(program)


def test_labels_are_integer_indices_or_one_hot_shaped_like_the_logits():
    """softmax_cross_entropy and accuracy take the same labels: integer class indices, or
    one-hot float or boolean labels of the logits' shape; anything else a ShapeError naming
    the labels (bool labels [True, False] beside 2 classes were broadcast along the classes
    as soft labels by one and taken as indices by the other; float class indices [1., 0., 1.]
    gave an accuracy of 1/3 for a perfect prediction)."""
    logits = np.array([[0.1, 2.0], [3.0, 0.5], [0.2, 0.9]], np.float32)
    indices = np.array([1, 0, 1], np.int32)
    one_hot = np.eye(2, dtype=np.float32)[indices]
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -log_p[np.arange(3), indices].mean()
    for labels in (indices, one_hot, one_hot > 0):
        for f in (nn.softmax_cross_entropy, tapeml.jit(nn.softmax_cross_entropy)):
            np.testing.assert_allclose(f(logits, labels), expected, rtol=1e-6)
        for f in (nn.accuracy, tapeml.jit(nn.accuracy)):
            assert f(logits, labels) == 1.0
    for bad in (np.array([1.0, 0.0, 1.0], np.float32), np.array([True, False, True])):
        for f in (nn.softmax_cross_entropy, nn.accuracy):
            with pytest.raises(tapeml.ShapeError, match=r"labels are one-hot \(or soft\) labels, "
                               r"shaped like the logits, \(3, 2\); got \(3,\) \(class indices "
                               r"must be integers"):
                tapeml.jit(f)(logits, bad)
    with pytest.raises(tapeml.ShapeError, match=r"nn.accuracy: integer labels \(class indices\) "
                                                r"must be shaped like the logits without"):
        nn.accuracy(logits, indices[:2])
