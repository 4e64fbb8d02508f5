"""The edge-value harness's parts: the values, IEEE references the reference module lacks, and
one runner per stage that computes a function's results.

Values: NaN (both signs), +-inf, +-0, the smallest and the largest subnormal, the smallest
normal, the largest finite, +-1 and a few ordinary numbers, per dtype.

Stages (`STAGES`, each `run(fn, inputs) -> [flat results]`):
  eager          the function on numpy arrays (the ops compute at once)
  interp         the traced program on xDSL's interpreter (Program.__call__)
  loops          tape-to-loops, unfused, libm (math ops, computed by numpy), interpreted
  outlined       tape-fuse, the CPU's tape-to-loops (its exp/log/tanh/sigmoid arithmetic, its
                 row reductions), outline-parallel-loops (every parallel loop, min_work=0),
                 interpreted
  cpu-fused-t1, cpu-unfused-t1, cpu-fused-t2, cpu-unfused-t2
                 tapeml.jit on the CPU, fuse=True/False, at 1 and 2 threads; at 2 threads every
                 parallel loop goes to the pool (outline-parallel-loops with min_work=0), so
                 tiny arrays take the threaded path too
  cpu-libm       tapeml.jit(libm=True), 1 thread
  gpu-fused, gpu-unfused
                 tapeml.jit(backend="cuda", emulate=True): the GPU kernels on xDSL's interpreter
  device-fused, device-unfused
                 tapeml.jit(backend="cuda") on a real GPU, only where there is one
                 (scripts/gpu-check runs the harness there)

Each stage has a kind (`KIND`) that the tolerance table (tolerances.py) is keyed by.
"""

from __future__ import annotations

import decimal
import functools
import math
import os
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np
import reference as ref
from real_gpu import GPU
from test_to_loops import run_lowered

import tapeml
from tapeml import Spec
from tapeml.tracing.pytree import flatten
from tapeml.transforms import pipelines
from tapeml.transforms.fuse import fuse
from tapeml.transforms.outline_parallel import OutlineParallelLoopsPass, outline_parallel_loops
from tapeml.transforms.to_loops import lower_module

NAN, INF = math.nan, math.inf
DTYPES = [np.float32, np.float64]
DTYPE_IDS = ["f32", "f64"]


def edge_values(dtype: Any) -> np.ndarray:
    """Every edge value of `dtype` once, then a few ordinary ones (18 in all)."""
    fi = np.finfo(dtype)
    tiny = fi.smallest_subnormal
    big_sub = np.nextafter(fi.smallest_normal, dtype(0))
    values = [NAN, -NAN, INF, -INF, 0.0, -0.0, tiny, -tiny, big_sub, -big_sub,
              fi.smallest_normal, fi.max, -fi.max, 1.0, -1.0, 0.5, -2.0, 3.0]
    return np.array(values, dtype)


def tame_values(dtype: Any) -> np.ndarray:
    """Multipliers that cannot overflow a product: NaN, inf, zeros, a subnormal, 1s, halves."""
    tiny = np.finfo(dtype).smallest_subnormal
    return np.array([NAN, INF, -INF, 0.0, -0.0, tiny, 1.0, -1.0, 0.5, -0.5], dtype)


def pairs(dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """Every (a, b) of edge values: two arrays of 18 * 18 elements."""
    v = edge_values(dtype)
    a, b = np.meshgrid(v, v, indexing="ij")
    return a.reshape(-1).copy(), b.reshape(-1).copy()


def unary_values(dtype: Any) -> np.ndarray:
    """Edge values and the thresholds where exp overflows, turns subnormal and underflows to
    zero (in f32 and f64), large and tiny arguments of tanh and sigmoid."""
    extra = [88.72283, 88.72284, -87.33654, -88.0, -100.0, -103.97, -104.0, 20.0, -20.0, 9.01,
             1e-8, -1e-8, 0.1, 709.78, 709.79, -708.39, -745.13, -746.0, 1e4, -1e4]
    with np.errstate(over="ignore"):
        return np.concatenate([edge_values(dtype), np.array(extra, dtype)])


# ----------------------------------------------------------------------------------------------
# IEEE 754-2019 maximum/minimum (NaN if either is NaN, -0 < +0): reference.py's s_maximum keeps
# the first of two equal values, so it has no opinion on signed zeros.


def ieee_maximum(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return NAN
    if a == b == 0.0:
        return a if math.copysign(1.0, a) > 0 else b
    return a if a > b else b


def ieee_minimum(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return NAN
    if a == b == 0.0:
        return a if math.copysign(1.0, a) < 0 else b
    return a if a < b else b


def ieee_max_reduce(x: np.ndarray, axes: Sequence[int], keepdims: bool) -> np.ndarray:
    return ref._reduce(x, axes, keepdims, -INF, ieee_maximum, x.dtype)


def maxpool2d(x: np.ndarray, kernel, stride, padding) -> np.ndarray:
    """Each window's IEEE maximum, padding -inf."""
    def largest(window):
        acc = -INF
        for v in window:
            acc = ieee_maximum(acc, -INF if v is None else v)
        return acc

    return ref._pool(x, kernel, stride, padding, largest, x.dtype)


def maxpool2d_backward(x: np.ndarray, ct: np.ndarray, kernel, stride, padding) -> np.ndarray:
    """The op's definition (the max reduction's gradient, per window): share = ct / count,
    count the taps equal to the window's IEEE maximum (-0 == +0), and each tap gets
    share * (1 if it is one of them else 0). So a window whose maximum is NaN (count 0, share
    +-inf or NaN) sends NaN to all its taps, and so does an infinite or NaN cotangent
    (0 * inf). Summed in f64, padding taps dropped."""
    dx = np.zeros(x.shape)
    for b, ch, y, xx, taps in ref._pool_windows(x.shape, kernel, stride, padding):
        values = [float(x[b, ch, t[0], t[1]]) if t else -INF for t in taps]
        top = -INF
        for v in values:
            top = ieee_maximum(top, v)
        mask = [1.0 if v == top else 0.0 for v in values]
        share = ref.s_div(float(ct[b, ch, y, xx]), sum(mask))
        for t, m in zip(taps, mask, strict=True):
            if t:
                dx[b, ch, t[0], t[1]] += m * share
    return dx


def zero_padded(x: np.ndarray, padding: Sequence[int]) -> np.ndarray:
    """NCHW x with explicit zeros around (top, left, bottom, right): a convolution multiplies
    them too (0 * inf is NaN), which reference.conv2d's skipping of out-of-bounds taps hides."""
    top, left, bottom, right = padding
    return ref.pad(x, (0, 0, top, left), (0, 0, bottom, right), 0.0)


def elementwise(fn: Callable[..., float], dtype: Any, *xs: np.ndarray) -> np.ndarray:
    """fn on Python floats, element by element, rounded once to `dtype`."""
    with np.errstate(over="ignore"):
        return ref.elementwise(fn, *xs).astype(dtype)


_PRECISION = decimal.Context(prec=60)
"""Decimal arithmetic to 60 digits: exp, log and tanh correctly rounded once converted to a
float (Python's math calls the C library's, which is not correctly rounded in f64)."""


def s_exp(a: float) -> float:
    if math.isnan(a) or a > 710.0:  # e**709.79 is past the largest double
        return a if math.isnan(a) else INF
    if a < -746.0:  # below half the smallest subnormal
        return 0.0
    return float(_PRECISION.exp(decimal.Decimal(a)))  # rounded once: to inf, or subnormal


def s_log(a: float) -> float:
    if math.isnan(a):
        return NAN
    if a == 0.0:
        return -INF
    if a < 0:
        return NAN
    return INF if math.isinf(a) else float(_PRECISION.ln(decimal.Decimal(a)))


def s_tanh(a: float) -> float:
    if math.isnan(a) or a == 0.0 or abs(a) < 1e-9:  # tanh(a) = a - a**3/3 + ...: a, rounded
        return a
    if abs(a) > 40.0:  # 1 - 2e-35 and beyond: 1, rounded
        return math.copysign(1.0, a)
    e = _PRECISION.exp(2 * decimal.Decimal(a))
    return float(_PRECISION.divide(e - 1, e + 1))


def s_sqrt(a: float) -> float:
    return NAN if a < 0 else math.sqrt(a)


def s_pow(a: float, b: float) -> float:
    """C99 Annex F pow (Python's math.pow raises where C returns inf or NaN)."""
    try:
        return math.pow(a, b)
    except OverflowError:
        odd = b == math.floor(b) and math.fmod(b, 2.0) != 0.0
        return -INF if a < 0 and odd else INF
    except ValueError:
        if a == 0.0:  # 0 ** negative: a pole
            odd = b == math.floor(b) and math.fmod(b, 2.0) != 0.0
            return -INF if odd and math.copysign(1.0, a) < 0 else INF
        return NAN  # negative ** non-integer


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The tape's definition, 1 / (1 + exp(-x)), each step rounded to x's dtype."""
    dtype = x.dtype.type
    with np.errstate(over="ignore"):
        e = elementwise(lambda v: s_exp(-v), x.dtype, x)
        return np.array([dtype(1.0) / (dtype(1.0) + v) for v in e.reshape(-1)],
                        x.dtype).reshape(x.shape)


# ----------------------------------------------------------------------------------------------
# Stages


def _specs(inputs: Sequence[np.ndarray]) -> list[Spec]:
    return [Spec(x.shape, x.dtype) for x in inputs]


def traced(fn: Callable, inputs: Sequence[np.ndarray], fused: bool = False) -> tapeml.Program:
    program = tapeml.trace(fn, *_specs(inputs))
    if fused:
        fuse(program.module)
    return program


def _leaves(result: Any) -> list[np.ndarray]:
    return [np.asarray(x) for x in flatten(result)[0]]


def run_eager(fn: Callable, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return _leaves(fn(*inputs))


def run_interp(fn: Callable, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return _leaves(traced(fn, inputs)(*inputs))


def run_loops(fn: Callable, inputs: Sequence[np.ndarray], *, fused: bool, libm: bool,
              cf: bool) -> list[np.ndarray]:
    """tape-to-loops (test_to_loops.run_lowered), interpreted."""
    got, _, _ = run_lowered(traced(fn, inputs, fused), *inputs, libm=libm, cf=cf)
    return got


def run_outlined(fn: Callable, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The CPU's loops with every parallel loop outlined (kernel.parallel_for), interpreted."""
    program = traced(fn, inputs, fused=True)
    lowered = tapeml.Program.parse(str(program))
    shapes = flatten(lowered.shapes)[0]
    lower_module(lowered.module, libm=False, row_reductions=True)
    outline_parallel_loops(lowered.module, min_work=0)
    lowered.module.verify()
    leaves = [np.ascontiguousarray(a).reshape(-1) for a in inputs]
    outs = [np.zeros(max(1, math.prod(s.shape)), s.dtype) for s in shapes]
    tapeml.interpret(lowered.module, lowered.name, *leaves, *outs)
    return [o.reshape(s.shape) for o, s in zip(outs, shapes, strict=True)]


@contextmanager
def cpu_threads(threads: int):
    """Compile for `threads` threads; above one, every parallel loop is handed to the pool."""
    every_loop = functools.partial(OutlineParallelLoopsPass, min_work=0)
    with mock.patch.dict(os.environ, {"TAPEML_NUM_THREADS": str(threads)}):
        if threads == 1:
            yield
        else:
            with mock.patch.object(pipelines, "OutlineParallelLoopsPass", every_loop):
                yield


def run_cpu(fn: Callable, inputs: Sequence[np.ndarray], *, fused: bool, threads: int,
            libm: bool = False) -> list[np.ndarray]:
    with cpu_threads(threads):
        return _leaves(tapeml.jit(fn, fuse=fused, libm=libm)(*inputs))


def run_gpu(fn: Callable, inputs: Sequence[np.ndarray], *, fused: bool) -> list[np.ndarray]:
    """4x4 GEMM tiles (the emulated GPU runs every thread of a block in Python; the real tile is
    test_gpu.py's)."""
    return _leaves(tapeml.jit(fn, backend="cuda", emulate=True, fuse=fused, gemm_tile=4)(*inputs))


def run_device(fn: Callable, inputs: Sequence[np.ndarray], *, fused: bool) -> list[np.ndarray]:
    return _leaves(tapeml.jit(fn, backend="cuda", fuse=fused)(*inputs))


STAGES: dict[str, Callable[[Callable, Sequence[np.ndarray]], list[np.ndarray]]] = {
    "eager": run_eager,
    "interp": run_interp,
    "loops": functools.partial(run_loops, fused=False, libm=True, cf=False),
    "outlined": run_outlined,
    "cpu-fused-t1": functools.partial(run_cpu, fused=True, threads=1),
    "cpu-unfused-t1": functools.partial(run_cpu, fused=False, threads=1),
    "cpu-fused-t2": functools.partial(run_cpu, fused=True, threads=2),
    "cpu-unfused-t2": functools.partial(run_cpu, fused=False, threads=2),
    "cpu-libm": functools.partial(run_cpu, fused=True, threads=1, libm=True),
    "gpu-fused": functools.partial(run_gpu, fused=True),
    "gpu-unfused": functools.partial(run_gpu, fused=False),
} | ({"device-fused": functools.partial(run_device, fused=True),
      "device-unfused": functools.partial(run_device, fused=False)} if GPU else {})

KIND = {
    "eager": "numpy", "interp": "numpy", "loops": "loops",
    "outlined": "arith", "cpu-fused-t1": "arith", "cpu-unfused-t1": "arith",
    "cpu-fused-t2": "arith", "cpu-unfused-t2": "arith", "cpu-libm": "libm",
    "gpu-fused": "arith", "gpu-unfused": "arith", "device-fused": "device",
    "device-unfused": "device",
}
"""What computes each stage's elementwise functions and sums: numpy's own (numpy), numpy's
functions with sums in order (loops), the vectorizable arithmetic (arith), libm (libm), the
vectorizable arithmetic and libdevice on a real GPU (device)."""
