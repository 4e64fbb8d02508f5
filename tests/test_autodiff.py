"""Reverse-mode autodiff: every pullback against finite differences (first and second order,
in f64), MLP and CNN gradients against hand-derived numpy, tie rules, the JAX-style API, and
the gradient program as text."""

from __future__ import annotations

import numpy as np
import pytest

import tapeml
from tapeml import nn, ops
from tapeml.dialects import tape
from tapeml.tracing.pytree import flatten, tree_map, unflatten
from tapeml.tracing.trace import bind
from tapeml.transforms.pullbacks import NON_DIFFERENTIABLE, PULLBACKS


def _dot(a, b):
    return sum(float(np.vdot(x, y)) for x, y in zip(flatten(a)[0], flatten(b)[0], strict=True))


def _along(args, direction, t):
    return tree_map(lambda x, v: x + t * v, args, direction)


def check_grads(f, args, order=2, eps=1e-6, rtol=1e-6, seed=0):
    """JAX's check_grads idea: directional derivatives of `f` (scalar-valued, of a tuple of
    float64 pytrees) against central differences; order 2 checks the gradient of <grad f, u>."""
    rng = np.random.default_rng(seed)
    direction = tree_map(lambda x: rng.standard_normal(np.shape(x)), args)
    fn = lambda *a: f(*a)  # noqa: E731 - a fresh function per check (grad caches by function)
    grads = tapeml.grad(fn, argnums=tuple(range(len(args))))(*args)
    numeric = (f(*_along(args, direction, eps)) - f(*_along(args, direction, -eps))) / (2 * eps)
    analytic = _dot(grads, direction)
    assert np.isclose(analytic, numeric, rtol=rtol, atol=rtol), (analytic, numeric)
    if order >= 2:
        u = tree_map(lambda x: rng.standard_normal(np.shape(x)), args)

        def directional(*a):
            g = tapeml.grad(fn, argnums=tuple(range(len(a))))(*a)
            total = 0.0
            for gi, ui in zip(flatten(g)[0], flatten(u)[0], strict=True):
                total = ops.add(total, ops.sum(ops.multiply(gi, ui)))
            return total

        check_grads(directional, args, order=1, eps=1e-5, rtol=1e-5, seed=seed + 1)


RNG = np.random.default_rng(42)


def r(*shape, low=None):
    x = RNG.standard_normal(shape)
    return np.abs(x) + low if low is not None else x


def _conv(x, w):
    return bind(tape.Conv2dOp, x, w, stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2),
                groups=2)


def _fused_group():
    """A traced elementwise group, fused: calling it inside a trace records the tape.fused."""
    from tapeml.transforms.fuse import fuse

    def group(a, b, c):
        return ops.where(a > c, ops.tanh(a * b + c), ops.exp(-a) / (c * c + 1.0))

    program = tapeml.trace(group, *(tapeml.Spec(s, np.float64) for s in [(3, 4), (4,), (3, 1)]))
    fuse(program.module)
    assert "tape.fused" in str(program)
    return program


FUSED_GROUP = _fused_group()
INDICES = np.array([[1, -1, 3], [9, -4, 1]], np.int32)

CASES = {
    "fused_group": (lambda a, b, c: ops.sum(FUSED_GROUP(a, b, c)), (r(3, 4), r(4), r(3, 1))),
    "add_sub_mul": (lambda a, b: ops.sum((a + b) * (a - b) * a), (r(3, 4), r(3, 4))),
    "div": (lambda a, b: ops.sum(a / b), (r(3, 4), r(3, 4, low=0.5))),
    "maximum_minimum": (lambda a, b: ops.sum(ops.maximum(a, b) * ops.minimum(a, b * 2.0)),
                        (r(5), r(5))),
    "pow": (lambda a, b: ops.sum(a ** b), (r(4, low=0.5), r(4))),
    "neg_exp_log": (lambda a: ops.sum(ops.log(ops.exp(-a) + 2.0)), (r(3, 2),)),
    "tanh_sigmoid": (lambda a: ops.sum(ops.tanh(a) * ops.sigmoid(a)), (r(6),)),
    "sin_cos": (lambda a: ops.sum(ops.sin(a) * ops.cos(3.0 * a)), (r(6),)),
    "relu_sqrt": (lambda a: ops.sum(ops.sqrt(ops.relu(a) + 1.0)), (r(3, 3) + 0.1,)),
    "select": (lambda a, b: ops.sum(ops.where(a > b, a * a, b * 3.0)), (r(5), r(5))),
    "cast": (lambda a: ops.sum(ops.astype(ops.astype(a, np.float32), np.float64) * a),
             (r(3),)),
    "broadcast_reshape": (lambda a, b: ops.sum(ops.reshape(a, (2, 3)) * b), (r(6), r(3))),
    "broadcast_size1": (lambda a, b: ops.sum(ops.exp(a * b)), (r(3, 1), r(1, 4))),
    "permute": (lambda a: ops.sum(ops.transpose(a, (2, 0, 1)) * np.arange(24.0)
                                  .reshape(4, 2, 3)), (r(2, 3, 4),)),
    "pad_crop": (lambda a: ops.sum(ops.exp(ops.pad(a, ((1, -1), (-2, 3)), 0.5))), (r(3, 4),)),
    "slice_strided": (lambda a: ops.sum(ops.exp(a[1::2, ::3])), (r(5, 7),)),
    "unfold_fold": (lambda a: ops.sum(ops.tanh(ops.fold(ops.exp(ops.unfold(a, (2, 2), (2, 1),
                                                                           (1, 2))),
                                                         (5, 6), (2, 2), (2, 1), (1, 2)))),
                    (r(2, 5, 6),)),
    "concat": (lambda a, b: ops.sum(ops.exp(ops.concatenate([a, b, a], axis=1))),
               (r(2, 3), r(2, 1))),
    "sum_max": (lambda a: ops.sum(ops.max(a, axis=1) * ops.sum(a, axis=0, keepdims=True)),
                (r(3, 3),)),
    "max_all": (lambda a: ops.max(a * a), (r(4, 2),)),
    "matmul": (lambda a, b: ops.sum(ops.tanh(a @ b)), (r(3, 4), r(4, 2))),
    "matmul_batched": (lambda a, b: ops.sum(ops.tanh(ops.matmul(a, b))),
                       (r(2, 3, 4), r(2, 4, 2))),
    "softmax_logsumexp": (lambda a: ops.sum(ops.softmax(a) * ops.log_softmax(a, axis=0))
                          + ops.logsumexp(a), (r(3, 4),)),
    "mean_min_abs": (lambda a: ops.mean(ops.abs(a)) * ops.min(a), (r(6),)),
    "abs_erf_ops": (lambda a: ops.sum(bind(tape.AbsOp, a) * bind(tape.ErfOp, a)), (r(6),)),
    # quotients away from integers (fmod jumps there): 2.52, -4.18, -2.72, -1.75, -4.30, 2.28
    "fmod_op": (lambda a, b: ops.sum(ops.tanh(bind(tape.FmodOp, a, b)) * a),
                (np.array([5.3, -7.1, 2.45, -0.7, 9.9, 3.3]),
                 np.array([2.1, 1.7, -0.9, 0.4, -2.3, 1.45]))),
    "cumsum_op": (lambda a: ops.sum(ops.tanh(bind(tape.CumsumOp, a, axis=1, reverse=False))
                                    * bind(tape.CumsumOp, a, axis=0, reverse=True)), (r(3, 4),)),
    "conv2d_fused": (lambda x, w: ops.sum(ops.tanh(_conv(x, w))), (r(1, 2, 6, 5), r(4, 1, 3, 2))),
    "maxpool2d_fused": (lambda x: ops.sum(ops.exp(bind(
        tape.MaxPool2dOp, x, kernel=(2, 3), stride=(2, 1), padding=(1, 0, 0, 1)))),
        (r(1, 2, 5, 5),)),
    "avgpool2d_fused": (lambda x: ops.sum(ops.exp(bind(
        tape.AvgPool2dOp, x, kernel=(3, 2), stride=(1, 2), padding=(1, 1, 1, 0)))),
        (r(2, 1, 4, 5),)),
    "conv2d_backward_input": (lambda ct, w: ops.sum(ops.tanh(bind(
        tape.Conv2dBackwardInputOp, ct, w, stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2),
        groups=2, spatial=(6, 5)))), (r(1, 4, 4, 4), r(4, 1, 3, 2))),
    "conv2d_backward_weight": (lambda x, ct: ops.sum(ops.tanh(bind(
        tape.Conv2dBackwardWeightOp, x, ct, stride=(2, 1), padding=(1, 0, 2, 1),
        dilation=(1, 2), groups=2, kernel=(3, 2)))), (r(1, 2, 6, 5), r(1, 4, 4, 4))),
    "maxpool2d_backward": (lambda ct: ops.sum(ops.exp(bind(
        tape.MaxPool2dBackwardOp, np.arange(25.0).reshape(1, 1, 5, 5) % 7, ct, kernel=(2, 2),
        stride=(2, 2), padding=(0, 0, 1, 1)))), (r(1, 1, 3, 3),)),
    "avgpool2d_backward": (lambda ct: ops.sum(ops.exp(bind(
        tape.AvgPool2dBackwardOp, ct, kernel=(3, 2), stride=(1, 2), padding=(1, 1, 1, 0),
        spatial=(4, 5)))), (r(2, 1, 4, 3),)),
    "nn_conv2d_pools": (lambda x, w: ops.sum(nn.avg_pool2d(nn.max_pool2d(
        nn.conv2d(x, w, padding=1, groups=1), 2), 1)), (r(2, 3, 6, 6), r(4, 3, 3, 3))),
    "nn_conv2d_depthwise": (lambda x, w: ops.sum(ops.tanh(nn.conv2d(x, w, stride=2, groups=3))),
                            (r(1, 3, 5, 5), r(6, 1, 3, 3))),
    "softmax_cross_entropy": (lambda z: nn.softmax_cross_entropy(z, np.eye(3)[[0, 2]]),
                              (r(2, 3),)),
    # rows of 1, 3 and 20 (8 lanes and a tail): tape.layer_norm, its backward op, and that
    # op's own pullback at second order
    **{f"layer_norm_{n}": (lambda x, s, b: ops.sum(ops.tanh(nn.layer_norm(
        {"scale": s, "bias": b}, x, eps=0.1)) * ops.cos(x)), (r(2, n), r(n), r(n)))
       for n in (1, 3, 20)},
    "layer_norm_backward": (lambda x, g: ops.sum(ops.sin(bind(
        tape.LayerNormBackwardOp, x, g, eps=0.1))), (r(3, 5), r(3, 5))),
    "softmax_rows": (lambda x: ops.sum(ops.tanh(ops.softmax(x * 2.0)) * ops.cos(x)),
                     (r(2, 3, 20),)),
    "softmax_backward": (lambda p, g: ops.sum(ops.sin(bind(tape.SoftmaxBackwardOp, p, g))),
                         (r(3, 5, low=0.1), r(3, 5))),
    # repeated, negative and out-of-range indices (more: tests/test_gather_scatter_grad.py)
    "take": (lambda a: ops.sum(ops.tanh(bind(tape.TakeOp, a, INDICES, axis=1))), (r(3, 4),)),
    **{f"scatter_{kind}": (lambda a, u, kind=kind: ops.sum(ops.sin(bind(
        tape.ScatterOp, a, INDICES, u, kind=kind, axis=1)) * a), (r(3, 4), r(3, 2, 3)))
       for kind in ("set", "add", "max", "min")},
}


# float32 rounding inside: a quadratic function, a wide step and a looser tolerance
LOOSE = {"cast": dict(eps=1e-2, rtol=1e-4)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_finite_differences_to_second_order(name):
    f, args = CASES[name]
    check_grads(f, args, order=1 if name in LOOSE else 2, **LOOSE.get(name, {}))


def test_every_differentiable_op_is_exercised_above():
    used = set()
    for f, args in CASES.values():
        program = tapeml.trace(f, *args)
        used |= {type(op) for op in program.function.body.ops}
    assert set(PULLBACKS) <= used, set(PULLBACKS) - used


def test_every_op_has_a_pullback_or_is_marked_non_differentiable():
    assert set(tape.OPS) == set(PULLBACKS) | NON_DIFFERENTIABLE
    assert not set(PULLBACKS) & NON_DIFFERENTIABLE


# ----------------------------------------------------------------------------------------------
# Against hand-derived gradients


def test_mlp_gradient_against_hand_derived_backprop():
    params = nn.mlp_init(RNG, [4, 6, 3], dtype=np.float64)
    x, labels = r(5, 4), np.eye(3)[[0, 1, 2, 1, 0]]

    def loss(p, x, labels):
        return nn.softmax_cross_entropy(nn.mlp(p, x, activation=tapeml.tanh), labels)

    got = tapeml.grad(loss)(params, x, labels)
    w1, b1, w2, b2 = (params["lin1"]["W"], params["lin1"]["b"], params["lin2"]["W"],
                      params["lin2"]["b"])
    h = np.tanh(x @ w1 + b1)
    z = h @ w2 + b2
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dz = (p - labels) / len(x)
    dh = dz @ w2.T * (1 - h**2)
    expected = {"lin1": {"W": x.T @ dh, "b": dh.sum(0)}, "lin2": {"W": h.T @ dz, "b": dz.sum(0)}}
    for (a, b) in zip(flatten(got)[0], flatten(expected)[0], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_cnn_gradient_against_hand_derived_backprop():
    x = r(2, 1, 6, 6)
    w = r(3, 1, 3, 3)
    v = r(27, 2)
    labels = np.eye(2)[[0, 1]]

    def loss(w, v, x, labels):
        h = nn.max_pool2d(ops.relu(nn.conv2d(x, w, padding=1)), 2)  # 2, 3, 3, 3
        return nn.softmax_cross_entropy(ops.reshape(h, (2, 27)) @ v, labels)

    gw, gv = tapeml.grad(loss, argnums=(0, 1))(w, v, x, labels)

    # forward, by hand
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((2, 3, 6, 6))
    for i in range(6):
        for j in range(6):
            conv[:, :, i, j] = np.einsum("nchw,ochw->no", xp[:, :, i:i + 3, j:j + 3], w)
    a = np.maximum(conv, 0)
    pooled = a.reshape(2, 3, 3, 2, 3, 2).max(axis=(3, 5))
    z = pooled.reshape(2, 27) @ v
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    # backward, by hand
    dz = (p - labels) / 2
    dv = pooled.reshape(2, 27).T @ dz
    dpooled = (dz @ v.T).reshape(2, 3, 3, 3)
    windows = a.reshape(2, 3, 3, 2, 3, 2)
    mask = windows == pooled[:, :, :, None, :, None]
    da = (mask / mask.sum(axis=(3, 5), keepdims=True) * dpooled[:, :, :, None, :, None])
    dconv = da.reshape(2, 3, 6, 6) * (conv > 0)
    dw = np.zeros_like(w)
    for i in range(6):
        for j in range(6):
            dw += np.einsum("no,nchw->ochw", dconv[:, :, i, j], xp[:, :, i:i + 3, j:j + 3])
    np.testing.assert_allclose(gv, dv, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gw, dw, rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# Ties


def test_max_reduction_splits_ties_evenly():
    g = tapeml.grad(lambda a: ops.max(a))(np.array([1.0, 3.0, 3.0, 2.0]))
    np.testing.assert_array_equal(g, [0.0, 0.5, 0.5, 0.0])
    g = tapeml.grad(lambda a: ops.sum(ops.max(a, axis=1)))(np.array([[1.0, 1.0], [2.0, 0.0]]))
    np.testing.assert_array_equal(g, [[0.5, 0.5], [1.0, 0.0]])


def test_elementwise_maximum_and_minimum_split_ties_in_half():
    a = np.array([1.0, 2.0, 3.0])
    b = np.array([1.0, 5.0, 0.0])
    ga, gb = tapeml.grad(lambda a, b: ops.sum(ops.maximum(a, b)), argnums=(0, 1))(a, b)
    np.testing.assert_array_equal(ga, [0.5, 0.0, 1.0])
    np.testing.assert_array_equal(gb, [0.5, 1.0, 0.0])
    ga, gb = tapeml.grad(lambda a, b: ops.sum(ops.minimum(a, b)), argnums=(0, 1))(a, b)
    np.testing.assert_array_equal(ga, [0.5, 1.0, 0.0])
    np.testing.assert_array_equal(gb, [0.5, 0.0, 1.0])


def test_maxpool_splits_ties_within_a_window():
    x = np.array([[[[1.0, 1.0], [0.0, 1.0]]]])
    g = tapeml.grad(lambda x: ops.sum(nn.max_pool2d(x, 2)))(x)
    np.testing.assert_allclose(g, [[[[1 / 3, 1 / 3], [0.0, 1 / 3]]]])
    g = tapeml.grad(lambda x: ops.sum(bind(tape.MaxPool2dOp, x, kernel=(2, 2), stride=(2, 2),
                                           padding=(0, 0, 0, 0))))(x)
    np.testing.assert_allclose(g, [[[[1 / 3, 1 / 3], [0.0, 1 / 3]]]])


def test_relu_gradient_at_zero_is_zero():
    np.testing.assert_array_equal(tapeml.grad(lambda a: ops.sum(ops.relu(a)))(
        np.array([-1.0, 0.0, 2.0])), [0.0, 0.0, 1.0])


# ----------------------------------------------------------------------------------------------
# The API


def test_value_and_grad_has_aux_argnums_and_pytrees():
    params = {"w": r(3), "layers": [r(2), None]}

    def f(params, x):
        value = ops.sum(params["w"] * x) + ops.sum(params["layers"][0] ** 2.0)
        return value, {"x2": x * 2.0}

    x = r(3)
    (value, aux), grads = tapeml.value_and_grad(f, has_aux=True)(params, x)
    np.testing.assert_allclose(value, np.sum(params["w"] * x) + np.sum(params["layers"][0] ** 2))
    np.testing.assert_array_equal(aux["x2"], x * 2)
    assert grads["layers"][1] is None
    np.testing.assert_allclose(grads["w"], x)
    np.testing.assert_allclose(grads["layers"][0], 2 * params["layers"][0])
    gp, gx = tapeml.grad(lambda p, x: f(p, x)[0], argnums=(0, 1))(params, x)
    np.testing.assert_allclose(gx, params["w"])
    (g, aux2) = tapeml.grad(f, has_aux=True)(params, x)
    np.testing.assert_allclose(g["w"], x)


def test_grad_needs_a_scalar_output():
    with pytest.raises(TypeError, match="must return a scalar"):
        tapeml.grad(lambda x: x * 2.0)(r(3))


def test_vjp():
    a, b = r(2, 3), r(3)
    out, vjp_fn = tapeml.vjp(lambda a, b: {"p": a * b, "s": ops.sum(a, axis=1)}, a, b)
    np.testing.assert_allclose(out["p"], a * b)
    ct = {"p": r(2, 3), "s": r(2)}
    ga, gb = vjp_fn(ct)
    np.testing.assert_allclose(ga, ct["p"] * b + ct["s"][:, None])
    np.testing.assert_allclose(gb, (ct["p"] * a).sum(0))
    with pytest.raises(TypeError, match="structured like the outputs"):
        vjp_fn(ct["p"])


def test_hessian_vector_product_written_by_the_user():
    def f(x):
        return ops.sum(ops.exp(x) * x)

    def hvp(x, v):
        return tapeml.grad(lambda x: ops.sum(tapeml.grad(f)(x) * v))(x)

    x, v = r(4), r(4)
    np.testing.assert_allclose(hvp(x, v), (np.exp(x) * (x + 2)) * v, rtol=1e-12)


def test_grad_traces_afresh_so_it_sees_what_the_function_reads_now():
    """As JAX's grad: a rebound global, an array changed in place, a Python flag — each call
    differentiates the function as it is (a cache keyed by shapes returned the old gradient)."""
    scale = {"w": np.ones(3), "square": False}

    def f(x):
        y = x * x if scale["square"] else x
        return ops.sum(y * scale["w"])

    g, vg = tapeml.grad(f), tapeml.value_and_grad(f)
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(g(x), [1, 1, 1])
    scale["w"][:] = 50.0  # in place
    np.testing.assert_array_equal(g(x), [50, 50, 50])
    scale["w"] = np.array([1.0, 2.0, 3.0])  # rebound
    assert vg(x)[0] == 14.0
    scale["square"] = True
    np.testing.assert_array_equal(g(x), 2 * x * [1, 2, 3])
    out, vjp_fn = tapeml.vjp(f, x)
    assert out == 36.0
    np.testing.assert_array_equal(vjp_fn(np.float64(1.0))[0], 2 * x * [1, 2, 3])


def test_jit_compiles_in_what_the_function_reads_as_the_readme_says():
    """jit's other side: a closed-over array is compiled in as it was on the compiling call;
    passed as an argument, the new value is used."""
    w = np.ones(3, np.float32)
    closed = tapeml.jit(lambda x: ops.sum(x * w))
    passed = tapeml.jit(lambda x, w: ops.sum(x * w))
    x = np.ones(3, np.float32)
    assert closed(x) == 3.0 and passed(x, w) == 3.0
    w[:] = 50.0
    assert closed(x) == 3.0  # the compiled constant
    assert passed(x, w) == 150.0


# ----------------------------------------------------------------------------------------------
# The gradient is a program


def _mlp_loss(params, x):
    return ops.mean(ops.square(nn.mlp(params, x)))


def test_grad_under_a_trace_records_what_replaying_its_program_records():
    """value_and_grad called on tracers (under jit or trace) moves its differentiated
    program's ops into the outer trace (Program.call_once) rather than copying them, and
    leaves the verifying to that trace: the outer program is the one a copy gives, op for op,
    it verifies, and it computes what value_and_grad computes on arrays."""
    from tapeml.frontend.autodiff import _differentiated

    rng = np.random.default_rng(0)
    p = {"W": rng.standard_normal((3, 4)).astype(np.float32)}
    x = rng.standard_normal((5, 3)).astype(np.float32)

    def loss(p, x):
        return ops.sum(ops.tanh(x @ p["W"]) ** 2)

    moved = tapeml.trace(tapeml.value_and_grad(loss), p, x)
    program = _differentiated(loss, (p, x), {}, 0, False)

    def copied(p, x):  # Program.__call__ on tracers: its ops cloned into the trace
        return program(p, x)

    copied.__name__ = "loss"
    assert str(moved) == str(tapeml.trace(copied, p, x))
    moved.module.verify()
    value, grads = moved(p, x)
    expected_value, expected_grads = tapeml.value_and_grad(loss)(p, x)
    np.testing.assert_array_equal(value, expected_value)
    np.testing.assert_array_equal(grads["W"], expected_grads["W"])


def test_differentiate_appends_below_an_unchanged_forward():
    from tapeml.transforms.differentiate import differentiate

    params = nn.mlp_init(RNG, [3, 4, 1])
    program = tapeml.trace(_mlp_loss, params, np.ones((2, 3), np.float32))
    forward = [str(op) for op in program.function.body.ops][:-1]
    differentiate(program.function)
    after = [str(op) for op in program.function.body.ops]
    assert after[: len(forward)] == forward
    assert len(after) > 2 * len(forward)
    assert program.function.function_type.outputs.data[1:] == \
        program.function.function_type.inputs.data


def test_gradient_program_prints_parses_and_runs_the_same():
    params = nn.mlp_init(RNG, [3, 4, 1])
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    program = tapeml.frontend.autodiff._differentiated(_mlp_loss, (params, x), {}, 0, False)
    text = str(program)
    again = tapeml.Program.parse(text)
    assert str(again) == text
    (v1, g1), (v2, g2) = program(params, x), again(params, x)
    assert v1 == v2
    for a, b in zip(flatten(g1)[0], flatten(g2)[0], strict=True):
        np.testing.assert_array_equal(a, b)
    eager = tapeml.grad(_mlp_loss)(params, x)
    assert flatten(eager)[1] == flatten(g1)[1]


def test_triangle_gradients_train_a_direct_map_and_a_composition_to_agree():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 3))
    ph = nn.linear_init(rng, 3, 2, np.float64)
    pf = nn.linear_init(rng, 3, 4, np.float64)
    pg = nn.linear_init(rng, 4, 2, np.float64)

    def f(p, x):
        return ops.tanh(nn.linear(p, x))

    losses = []
    params = (ph, pf, pg)
    for _ in range(40):
        loss, grads = tapeml.triangle_gradients(direct=nn.linear, left=f, right=nn.linear, x=x,
                                                params=params)
        losses.append(float(loss))
        params = tree_map(lambda p, g: p - 0.02 * g, params, grads)
    h = x @ ph["W"] + ph["b"]
    composed = np.tanh(x @ pf["W"] + pf["b"]) @ pg["W"] + pg["b"]
    np.testing.assert_allclose(losses[0], 0.5 * np.sum((h - composed) ** 2), rtol=1e-12)
    assert losses[-1] < 0.01 * losses[0]
    assert all(b <= a + 1e-12 for a, b in zip(losses, losses[1:], strict=False))


def test_pytree_helpers_roundtrip():
    tree = {"a": (1, [2, None]), "b": 3}
    leaves, treedef = flatten(tree)
    assert unflatten(treedef, leaves) == tree


def test_a_pullback_giving_the_wrong_shape_is_an_error_naming_the_op(monkeypatch):
    """A wrong rule was silently broadcast into the sum of cotangents (issue 15)."""
    from tapeml.transforms import pullbacks
    from tapeml.transforms.differentiate import DifferentiateError

    def wrong(ct, a, *, result):  # a (3,) operand given a (1,) cotangent
        return (ops.sum(ct, axis=0, keepdims=True),)

    monkeypatch.setitem(pullbacks.PULLBACKS, tape.TanhOp, wrong)
    with pytest.raises(DifferentiateError, match=r"pullback of tape\.tanh gave operand 0 "
                       r"\(tensor<3xf64>\) a cotangent of shape \(1,\)"):
        tapeml.grad(lambda x: ops.sum(ops.tanh(x)))(r(3))


def test_differentiate_skips_function_declarations():
    from xdsl.context import Context

    from tapeml.frontend.program import Program
    from tapeml.transforms.differentiate import DifferentiateError, DifferentiatePass

    text = """
    func.func private @g(tensor<f32>) -> tensor<f32>
    func.func @f(%x: tensor<f32>) -> tensor<f32> {
      %y = tape.mul %x, %x : tensor<f32>
      func.return %y : tensor<f32>
    }"""
    program = Program.parse(text, "f")
    DifferentiatePass().apply(Context(), program.module)
    assert len(program.function.function_type.outputs) == 2
    with pytest.raises(DifferentiateError, match="@g is a declaration"):
        DifferentiatePass(function="g").apply(Context(), Program.parse(text, "f").module)


def test_a_power_with_an_exponent_of_zero_has_a_zero_gradient_at_zero():
    """x ** k of a Python int k: d/dx is k x**(k-1), and 0 for k = 0 at every x, 0 included
    (JAX's integer_pow): it was 0 * 0**-1 = NaN at x = 0, so a polynomial's gradient, and
    the second derivative of x**1 or the third of x**2, were NaN at 0. d/dy of a**y is 0 at
    a = 0 and NaN (no real derivative) at a < 0, as JAX's."""
    x = np.array([0.0, 1.5, -2.0])
    np.testing.assert_array_equal(tapeml.grad(lambda x: tapeml.sum(x ** 0))(x), np.zeros(3))
    poly = tapeml.grad(lambda x: tapeml.sum(1.0 + 2.0 * x ** 1 + 3.0 * x ** 2))
    np.testing.assert_array_equal(poly(x), 2 + 6 * x)
    np.testing.assert_array_equal(tapeml.jit(poly)(x), 2 + 6 * x)
    zero = np.float64(0.0)
    assert tapeml.grad(tapeml.grad(lambda x: x ** 1))(zero) == 0.0
    assert tapeml.grad(tapeml.grad(tapeml.grad(lambda x: x ** 2)))(zero) == 6.0 * 0.0
    d_exponent = tapeml.grad(lambda y, a: tapeml.sum(a ** y))(np.array([2.0, 3.0, 2.0]),
                                                              np.array([0.0, -2.0, 3.0]))
    assert d_exponent[0] == 0.0 and np.isnan(d_exponent[1])
    assert np.isclose(d_exponent[2], np.log(3.0) * 9.0)


def test_maximum_and_minimum_send_no_cotangent_to_either_side_of_a_nan():
    """maximum(nan, 1) is NaN, attained by neither: both sides' gradients are 0 there, as a
    max reduction's NaN and JAX's (the other side took the whole cotangent); ties still
    split it in halves."""
    a, b = np.array([np.nan, 1.0, 2.0, 3.0]), np.array([1.0, np.nan, 2.0, 1.0])
    for f in (tapeml.maximum, tapeml.minimum):
        for g in (tapeml.grad(lambda a, b, f=f: tapeml.sum(f(a, b)), argnums=(0, 1)),
                  tapeml.jit(tapeml.grad(lambda a, b, f=f: tapeml.sum(f(a, b)),
                                         argnums=(0, 1)))):
            ga, gb = g(a, b)
            wins = (a > b) if f is tapeml.maximum else (a < b)
            loses = (b > a) if f is tapeml.maximum else (b < a)
            np.testing.assert_array_equal(ga, wins + 0.5 * (a == b))
            np.testing.assert_array_equal(gb, loses + 0.5 * (a == b))
