"""The vectorizable exp, log, tanh and sigmoid the CPU backend emits (transcendentals.py), swept
against numpy: the stated bound (f32 within 4 ulp, f64 within 2), and inf, nan and the sign of
zero exactly as numpy gives them; f32 erf against Python's math.erf. libm=True keeps the libm
calls."""

from __future__ import annotations

import ctypes
import ctypes.util
import math

import numpy as np
import pytest

import tapeml
from tapeml import ops

SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 88.5, 88.72, 89.0, -87.5, -103.0, -104.0, 709.0,
            710.0, -745.0, -1000.0, 1000.0, 1e-30, -1e-30]
BOUND = {np.float32: 4, np.float64: 2}
LIBM_BOUND = {np.float32: 4, np.float64: 4}  # glibc and numpy's own kernels differ too


def _inputs(dtype):
    return np.concatenate([np.linspace(-30, 30, 60001), np.geomspace(1e-30, 1e3, 5000),
                           -np.geomspace(1e-30, 1e3, 5000), SPECIALS]).astype(dtype)


def _ulps(got, expected, dtype):
    finite = np.isfinite(expected)
    ulp = np.spacing(np.maximum(np.abs(expected), np.finfo(dtype).tiny).astype(dtype))
    with np.errstate(all="ignore"):
        error = np.abs(got.astype(np.float64) - expected.astype(np.float64)) / ulp
    return np.where(finite, error, 0.0)


@pytest.mark.parametrize("libm", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exp_tanh_sigmoid_against_numpy(dtype, libm):
    x = _inputs(dtype)
    f = tapeml.jit(lambda x: (ops.exp(x), ops.tanh(x), ops.sigmoid(x)), libm=libm)
    with np.errstate(all="ignore"):
        expected = (np.exp(x), np.tanh(x), 1 / (1 + np.exp(-x)))
    for name, got, want in zip(("exp", "tanh", "sigmoid"), f(x), expected, strict=True):
        assert _ulps(got, want, dtype).max() <= (LIBM_BOUND if libm else BOUND)[dtype], name
        special = ~np.isfinite(want)
        np.testing.assert_array_equal(got[special], want[special], err_msg=name)
        zero = want == 0
        np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), name)


@pytest.mark.parametrize("libm", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log_against_numpy(dtype, libm):
    """Every binade from the smallest subnormal to the largest number, densely near 1 (where
    log is small), and the specials: below 0 and nan give nan, +-0 gives -inf, inf inf."""
    tiny, top = np.finfo(dtype).smallest_subnormal, np.finfo(dtype).max
    x = np.concatenate([np.geomspace(tiny, top, 100001), np.linspace(0.5, 2.0, 100001),
                        [0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, 1.0, np.sqrt(0.5),
                         np.sqrt(2.0), np.finfo(dtype).tiny, top]]).astype(dtype)
    got = tapeml.jit(lambda x: ops.log(x), libm=libm)(x)
    with np.errstate(all="ignore"):
        want = np.log(x)
    assert _ulps(got, want, dtype).max() <= (LIBM_BOUND if libm else BOUND)[dtype]
    special = ~np.isfinite(want)
    np.testing.assert_array_equal(got[special], want[special])


def test_f32_erf_against_math_erf():
    """Within 3 ulp of math.erf rounded to f32 over [-5, 5] (both branches, the split at 1 and
    the clamp at 4, densely), tiny values, and the specials: +-0 keep their sign, +-inf give
    +-1, nan stays nan; f64 erf is libm's."""
    x = np.concatenate([np.linspace(-5, 5, 400001), np.geomspace(1e-38, 1, 5000),
                        -np.geomspace(1e-38, 1, 5000), np.nextafter(np.float32(1), [0, 2]),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 4.0, -4.0, 1e-45]]
                       ).astype(np.float32)
    got = tapeml.jit(lambda x: ops.erf(x))(x)
    want = np.array([math.erf(v) for v in x.astype(np.float64).tolist()]).astype(np.float32)
    assert _ulps(got, want, np.float32).max() <= 3
    special = ~np.isfinite(want) | (want == 0) | (np.abs(want) == 1)
    np.testing.assert_array_equal(got[special], want[special])
    np.testing.assert_array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))
    x64 = np.ones(64)
    assert '@"erf"' in tapeml.jit(lambda x: ops.erf(x)).lower(x64)["llvm ir"]
    assert "erf" not in tapeml.jit(lambda x: ops.erf(x)).lower(x64.astype(np.float32))[
        "llvm ir"]


def test_the_default_loop_has_no_libm_call_and_the_libm_one_does():
    x = np.ones(64, np.float32)
    fast = tapeml.jit(lambda x: ops.tanh(x)).lower(x)["llvm ir"]
    exact = tapeml.jit(lambda x: ops.tanh(x), libm=True).lower(x)["llvm ir"]
    assert "llvm.tanh" not in fast and "llvm.tanh" in exact
    fast = tapeml.jit(lambda x: ops.log(x)).lower(x)["llvm ir"]
    assert "llvm.log" not in fast


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_is_c_libraries_pow_on_every_stage(dtype):
    """The interpreter's pow is libm's (math.pow's, errors aside), as the CPU backend's
    llvm.pow: numpy's float64 loop (SVML's on AVX-512 CPUs) is 1-2 ulp off it in about 5% of
    operands (2.5 ** 2.5: ...185 against libm's ...186), so the reference and the compiled code
    disagreed."""
    rng = np.random.default_rng(7)
    x = np.concatenate([[2.5, 7.0, 0.1, 1e10, -2.0, 0.0, -0.0, np.inf, np.nan],
                        rng.uniform(0, 10, 4000)]).astype(dtype)
    y = np.concatenate([[2.5, 1.5, -3.0, -0.5, 3.0, 2.0, 0.5, -0.5, 0.0],
                        rng.uniform(-4, 4, 4000)]).astype(dtype)

    def c_pow(a, b):
        try:
            return math.pow(a, b)
        except ValueError:
            return math.nan
        except OverflowError:
            return math.inf
    if dtype == np.float32:  # C's powf rounds its own result (pow rounded to f32 is not it
        powf = ctypes.CDLL(ctypes.util.find_library("m") or None).powf  # in 1 of 2,000)
        powf.restype, powf.argtypes = ctypes.c_float, [ctypes.c_float, ctypes.c_float]
        c_pow = powf  # noqa: F811
    expected = np.array([c_pow(float(a), float(b)) for a, b in zip(x, y, strict=True)],
                        np.float64).astype(dtype)
    for backend in ("interp", "cpu"):
        with np.errstate(all="ignore"):
            got = tapeml.jit(ops.power, backend=backend)(x, y)
        assert got.tobytes() == expected.tobytes(), backend
