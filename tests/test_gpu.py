"""The GPU path without a GPU: convert-loops-to-gpu's kernels on the emulated GPU (xDSL's
interpreter with tapeml/interpreters/gpu.py) against the interpreter's kernel.gemm (numpy).
The tape programs' GPU form is checked op by op in test_to_loops.py (the `gpu` cases)."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.builder import Builder, InsertPoint
from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType, ModuleOp, f32, f64

import tapeml
from tapeml.codegen.gemm import GemmSpec
from tapeml.dialects import kernel
from tapeml.dialects.kernel import A_TAPS_SLACK
from tapeml.transforms.to_gpu import outline_module

RNG = np.random.default_rng(7)


def gemm_module(spec: GemmSpec, sizes: tuple[int, int, int]) -> ModuleOp:
    t = f32 if spec.dtype == "f32" else f64
    types = [MemRefType(t, [n]) for n in sizes]
    f = func.FuncOp("g", (types, []))
    builder = Builder(InsertPoint.at_end(f.body.block))
    builder.insert(kernel.GemmOp(*f.body.block.args, spec))
    builder.insert(func.ReturnOp())
    return ModuleOp([f])


def run_gemm(spec: GemmSpec, tile: int) -> tuple[np.ndarray, np.ndarray]:
    """C from the GPU kernel (emulated) and from the interpreter's numpy kernel.gemm."""
    dtype = np.float32 if spec.dtype == "f32" else np.float64
    last_a = (spec.a[0] * (spec.batch - 1) + spec.a[1] * (spec.m - 1) + spec.a_last_column()
              + A_TAPS_SLACK * bool(spec.a_taps))
    last_b = sum(s * (n - 1) for s, n in zip(spec.b, (spec.batch, spec.k, spec.n), strict=True))
    c_size = spec.m * spec.n * (spec.batch if spec.c0 else 1)
    a = RNG.standard_normal(last_a + 1).astype(dtype)
    b = RNG.standard_normal(last_b + 1).astype(dtype)
    c = RNG.standard_normal(c_size).astype(dtype)
    results = []
    for gpu in (True, False):
        module = gemm_module(spec, (a.size, b.size, c.size))
        if gpu:
            outline_module(module, gemm_tile=tile)
            assert "kernel.gemm" not in str(module)
        module.verify()
        out = c.copy()
        tapeml.interpret(module, "g", a, b, out)
        results.append(out)
    return results[0], results[1]


@pytest.mark.parametrize("spec", [
    GemmSpec("f32", 1, 5, 7, 3, (0, 3, 1), (0, 7, 1), 35, False),     # edges of every tile
    GemmSpec("f32", 1, 6, 5, 9, (0, 1, 6), (0, 1, 9), 30, True),      # both transposed, C +=
    GemmSpec("f64", 3, 4, 3, 5, (20, 5, 1), (15, 3, 1), 12, False),   # batches
    GemmSpec("f32", 3, 3, 4, 2, (6, 2, 1), (8, 4, 1), 0, False),      # batches summed
    GemmSpec("f32", 2, 3, 2, 4, (0, 4, 1), (8, 2, 1), 0, True),       # summed onto C
    GemmSpec("f32", 1, 3, 3, 0, (0, 0, 1), (0, 3, 1), 9, False),      # k = 0: C = 0
])
def test_the_gpu_gemm_kernel_matches_the_interpreter(spec):
    got, expected = run_gemm(spec, tile=4)
    tolerance = 1e-5 if spec.dtype == "f32" else 1e-12
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


def test_the_gpu_gemm_kernel_at_its_real_tile():
    """16 x 16 threads (Python threads meeting at each barrier: slow, so one block), two
    steps along k; many blocks are tested at tile 4 above."""
    spec = GemmSpec("f32", 1, 15, 3, 18, (0, 18, 1), (0, 3, 1), 15 * 3, False)
    got, expected = run_gemm(spec, tile=16)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
