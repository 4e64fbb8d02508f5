"""The JAX-style autodiff API against JAX 0.10's behaviour, written down as literals: vjp's
output is its traced program's (the function runs once), its cotangents and has_aux; argnums;
the gradient of a Python-float (weak) argument."""

from __future__ import annotations

import numpy as np
import pytest

import tapeml
from tapeml import ops, optim
from tapeml.errors import ShapeError


def test_vjp_runs_the_function_once_on_tracers():
    """jax.vjp(f, x) with f = x.at[0].set(x[1] * 2) gives [4, 2, 3] and the cotangent
    [0, 3, 1] of ones; the function was run a second time, eagerly, where numpy has no .at."""
    calls = []

    def f(x):
        calls.append(1)
        return x.at[0].set(x[1] * 2.0)

    out, vjp_fn = tapeml.vjp(f, np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(out, [4.0, 2.0, 3.0])
    np.testing.assert_array_equal(vjp_fn(np.ones(3))[0], [0.0, 3.0, 1.0])
    assert len(calls) == 1


def test_vjp_out_has_the_programs_dtypes_and_takes_its_cotangents():
    """f32 + i32 is f32 traced (numpy's eager + gave f64, and vjp_fn then refused
    np.ones_like(out)); a Python float primal gives a (weak) f32 out, and vjp_fn takes a
    Python float cotangent, as jax.vjp(lambda s: s * 2.0, 3.0)[1](1.0) == (2.0,)."""
    x, ids = np.ones(3, np.float32), np.arange(3, dtype=np.int32)
    out, vjp_fn = tapeml.vjp(lambda x, ids: x + ids, x, ids)
    assert out.dtype == np.float32
    dx, _ = vjp_fn(np.ones_like(out))
    np.testing.assert_array_equal(dx, np.ones(3, np.float32))
    assert dx.dtype == np.float32
    np.testing.assert_array_equal(vjp_fn(np.ones(3))[0], dx)  # f64 for f32, as JAX's default
    out, vjp_fn = tapeml.vjp(lambda s: s * 2.0, 3.0)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out == 6.0
    (ds,) = vjp_fn(1.0)
    assert ds.dtype == np.float32 and ds == 2.0


def test_vjp_names_the_output_a_cotangent_does_not_fit():
    x = np.ones(3, np.float32)
    _, vjp_fn = tapeml.vjp(lambda x: {"p": x * 2.0, "s": ops.sum(x)}, x)
    with pytest.raises(ShapeError, match=r"cotangent of output `out.s` \(float32, shape \(\)\) "
                                         r"must be a float array of its shape, got float64 of "
                                         r"shape \(2,\)"):
        vjp_fn({"p": np.ones(3), "s": np.ones(2)})
    with pytest.raises(TypeError, match=r"cotangent of output `out.p` .* got int32"):
        vjp_fn({"p": np.ones(3, np.int32), "s": 1.0})  # JAX refuses an int for a float too
    with pytest.raises(TypeError, match="structured like the outputs"):
        vjp_fn((np.ones(3), 1.0))


def test_vjp_has_aux():
    """jax.vjp(f, x, has_aux=True) is (out, vjp_fn, aux), aux not differentiated."""
    x = np.array([1.0, 2.0, 3.0])
    out, vjp_fn, aux = tapeml.vjp(lambda x: (x * x, {"n": ops.sum(x)}), x, has_aux=True)
    np.testing.assert_array_equal(out, x * x)
    assert aux["n"] == 6.0
    np.testing.assert_array_equal(vjp_fn(np.ones(3))[0], 2 * x)
    with pytest.raises(TypeError, match=r"has_aux=True\): the function must return \(out, aux"):
        tapeml.vjp(lambda x: x * x, x, has_aux=True)


def test_argnums_takes_numpy_ints_and_names_what_is_wrong():
    x = np.arange(3.0)
    f = lambda a, b: ops.sum(a * b)  # noqa: E731
    np.testing.assert_array_equal(tapeml.grad(f, argnums=np.int64(1))(x, x), x)
    np.testing.assert_array_equal(tapeml.grad(f, argnums=[np.int64(1)])(x, x)[0], x)
    for argnums in ("0", 0.0, [0, "1"], None):
        with pytest.raises(TypeError, match="argnums must be an int or a sequence of ints"):
            tapeml.grad(f, argnums=argnums)(x, x)
    with pytest.raises(ValueError, match=r"argnums=\(\) names no argument"):
        tapeml.grad(f, argnums=())(x, x)
    with pytest.raises(ValueError, match="out of range"):
        tapeml.value_and_grad(f, argnums=(0, 2))(x, x)


def test_gradient_of_a_python_float_is_float32():
    """jax.value_and_grad(lambda s: s * s)(3.0) is (9.0, 6.0), both weak float32: the gradient
    was float64, and an optimizer step made a float32 model's Python-float parameter float64,
    and the whole model float64 from then on."""
    value, g = tapeml.value_and_grad(lambda s: s * s)(3.0)
    assert isinstance(g, np.ndarray) and g.shape == () and g.dtype == np.float32 and g == 6.0
    assert value.dtype == np.float32
    assert tapeml.jit(tapeml.grad(lambda s: s * s))(3.0).dtype == np.float32
    assert tapeml.grad(tapeml.grad(lambda s: s * s * s))(3.0).dtype == np.float32
    x = np.linspace(-1, 1, 8).astype(np.float32)
    y = 3 * x + np.float32(0.5)

    def loss(p, x, y):
        return ops.mean((x * p["w"] + p["b"] - y) ** 2)

    opt = optim.sgd(0.1)
    params = {"w": np.float32(0.0), "b": 0.0}
    state = opt.init(params)
    for _ in range(2):
        value, grads = tapeml.value_and_grad(loss)(params, x, y)
        assert value.dtype == np.float32 and grads["b"].dtype == np.float32
        params, state = opt.update(params, grads, state)
    assert {k: v.dtype for k, v in params.items()} == {"w": np.float32, "b": np.float32}
