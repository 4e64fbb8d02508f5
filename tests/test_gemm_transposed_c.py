"""kernel.gemm's c_transposed (C[b] stored as its transpose, (i, j) at j * m + i, the
residual's blocks likewise): the generated kernel's bits are the plain product's, transposed,
on every path a call takes; the interpreter's and the GPU kernel's values likewise; and the
narrow tile a ragged last panel takes (`.tile.half`)."""

from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
import pytest
from bits import assert_same_bits  # tests/bits.py
from test_gemm import _ENGINES, compiled  # tests/test_gemm.py
from test_gpu import run_gemm  # tests/test_gpu.py
from xdsl.builder import Builder, InsertPoint
from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType, ModuleOp, f32, f64

import tapeml
from tapeml.codegen.cpu import bind_scratch, target_machine
from tapeml.codegen.gemm import GemmSpec, Target, definition
from tapeml.dialects import kernel
from tapeml.dialects.kernel import A_TAPS_SLACK

EDGE_VALUES = [np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1.5]

PATHS = [  # m, n, k, batch, c0, accumulate, ta, constant
    (7, 9, 5, 1, None, False, False, False),  # one edge tile
    (150, 300, 513, 1, None, False, False, True),  # blocks of rows, of k, chunks of columns
    (33, 65, 257, 3, None, True, True, False),  # batches, accumulating, A transposed
    (16, 64, 40, 2, None, False, False, False),  # A and a small B read in place
    (196, 200, 300, 1, None, False, False, True),  # whole tiles, a half-panel last (200)
    (40, 50, 300, 8, 0, False, False, False),  # batches summed in groups: epilogue at the end
    (5, 6, 3, 3, 0, True, False, False),  # batches summed by one part, into what C held
    (9, 20, 0, 2, None, False, False, False)]  # an empty sum: the epilogue of 0


def _operands(m, n, k, batch, c0, dtype, seed):
    rng = np.random.default_rng(seed)
    blocks = batch if c0 else 1
    a = rng.standard_normal(batch * m * k).astype(dtype)
    b = rng.standard_normal(batch * k * n).astype(dtype)
    bias = np.resize(np.array(EDGE_VALUES, dtype), max(m, n)).copy()
    rng.shuffle(bias)
    start = rng.standard_normal((blocks, m, n)).astype(dtype)
    start.reshape(-1)[::5] = np.resize(np.array(EDGE_VALUES, dtype), start.reshape(-1)[::5].size)
    residual = rng.standard_normal((blocks, m, n)).astype(dtype)
    residual.reshape(-1)[::3] = np.resize(np.array(EDGE_VALUES, dtype),
                                          residual.reshape(-1)[::3].size)
    return a, b, bias, start, residual


@pytest.mark.parametrize("threads", ["1", "2", "3"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias,relu,residual", [
    ("", False, False), ("rows", True, True), ("columns", True, False), ("columns", False, True)])
@pytest.mark.parametrize("m,n,k,batch,c0,accumulate,ta,constant", PATHS)
def test_c_stored_transposed_holds_the_plain_products_bits(monkeypatch, threads, dtype, bias,
                                                          relu, residual, m, n, k, batch, c0,
                                                          accumulate, ta, constant):
    """The same sums in the same order, so the same bits, each stored at its transposed place
    (NaN, ±inf and ±0 in C, the bias and the residual; relu's -0 -> +0): edge and whole tiles,
    blocks of k (each stored and added again), batches, groups summed at the end, k = 0, and
    on 1 to 3 threads (3: one B shared)."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    c0 = m * n if c0 is None else c0
    a, b, offsets, start, shortcut = _operands(m, n, k, batch, c0, dtype, m + n + k + batch)
    plain = GemmSpec("f32" if dtype == np.float32 else "f64", batch, m, n, k,
                     (m * k, 1, m) if ta else (m * k, k, 1), (k * n, n, 1), c0, accumulate,
                     bias=bias, relu=relu, residual=residual)
    if constant:
        plain = dataclasses.replace(plain, a=(0, k, 1), a_constant="weights")
    extra = [offsets.ctypes.data] if bias else []
    expected = start.copy()
    compiled(plain)(a.ctypes.data, b.ctypes.data, expected.ctypes.data, *extra,
                    *([shortcut.ctypes.data] if residual else []))
    transposed = dataclasses.replace(plain, c_transposed=True)
    shortcut_t = np.ascontiguousarray(shortcut.transpose(0, 2, 1))
    kernel_t = compiled(transposed)
    for _ in range(2):
        out = np.ascontiguousarray(start.transpose(0, 2, 1))
        kernel_t(a.ctypes.data, b.ctypes.data, out.ctypes.data, *extra,
                 *([shortcut_t.ctypes.data] if residual else []))
        assert_same_bits(out.transpose(0, 2, 1), expected, context=transposed.symbol)


def _interpreted(spec: GemmSpec, a, b, c, *extra) -> np.ndarray:
    t = f32 if spec.dtype == "f32" else f64
    buffers = [a, b, c, *extra]
    f = func.FuncOp("g", ([MemRefType(t, [x.size]) for x in buffers], []))
    builder = Builder(InsertPoint.at_end(f.body.block))
    args = f.body.block.args
    builder.insert(kernel.GemmOp(args[0], args[1], args[2], spec,
                                 args[3] if spec.bias else None,
                                 args[-1] if spec.residual else None))
    builder.insert(func.ReturnOp())
    module = ModuleOp([f])
    module.verify()
    out = c.copy()
    tapeml.interpret(module, "g", a, b, out, *extra)
    return out


@pytest.mark.parametrize("batch,c0,accumulate", [(2, None, False), (3, 0, True), (2, None, True)])
def test_the_interpreter_stores_c_transposed(batch, c0, accumulate):
    """numpy written plainly: C[b] = relu(A[b] @ B[b] + bias[j] + R[b]) (+ what C held),
    stored as C[b].T; batches summed into one C (c0 = 0) likewise."""
    m, n, k = 5, 7, 3
    c0 = m * n if c0 is None else c0
    a, b, offsets, start, shortcut = _operands(m, n, k, batch, c0, np.float64, 11)
    spec = GemmSpec("f64", batch, m, n, k, (m * k, k, 1), (k * n, n, 1), c0, accumulate,
                    bias="columns", relu=True, residual=True, c_transposed=True)
    held = start.transpose(0, 2, 1).copy()
    got = _interpreted(spec, a, b, held.reshape(-1), offsets, shortcut.transpose(0, 2, 1)
                       .copy().reshape(-1))
    product = a.reshape(batch, m, k) @ b.reshape(batch, k, n)
    if not c0:
        product = product.sum(axis=0, keepdims=True)
    with np.errstate(all="ignore"):
        total = (start + product if accumulate else product) + offsets[:n] + shortcut
        expected = np.maximum(total, 0) + 0.0
    np.testing.assert_allclose(got.reshape(-1, n, m), expected.transpose(0, 2, 1),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec", [
    GemmSpec("f32", 1, 5, 7, 3, (0, 3, 1), (0, 7, 1), 35, False, c_transposed=True),
    GemmSpec("f64", 3, 4, 3, 5, (20, 5, 1), (15, 3, 1), 12, True, c_transposed=True),
    GemmSpec("f32", 3, 3, 4, 2, (6, 2, 1), (8, 4, 1), 0, False, c_transposed=True)])
def test_the_gpu_gemm_kernel_stores_c_transposed(spec):
    got, expected = run_gemm(spec, tile=4)
    tolerance = 1e-5 if spec.dtype == "f32" else 1e-12
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("n", [161, 176, 177, 200])
def test_a_ragged_last_panel_takes_the_narrow_tile(n):
    """Columns ending at most a vector into their last panel (`.tile.half`: 16 of 32 in f32 on
    AVX-512) get the bits the whole tile gives them (here a product of a panel more, cut),
    edge rows and edge columns of the narrow tile included; wide enough (n > 128) that A is
    packed, not read in place (plan.direct_a), and the packed tiles run."""
    m, k = 30, 70
    rng = np.random.default_rng(n)
    a = rng.standard_normal(m * k).astype(np.float32)
    b = rng.standard_normal(k * n).astype(np.float32)
    wide = np.zeros((k, n + 32), np.float32)
    wide[:, :n] = b.reshape(k, n)
    c = np.zeros(m * n, np.float32)
    compiled(GemmSpec("f32", 1, m, n, k, (0, k, 1), (0, n, 1), m * n, False,
                      a_constant="a"))(a.ctypes.data, b.ctypes.data, c.ctypes.data)
    whole = np.zeros(m * (n + 32), np.float32)
    compiled(GemmSpec("f32", 1, m, n + 32, k, (0, k, 1), (0, n + 32, 1), m * (n + 32), False,
                      a_constant="a"))(a.ctypes.data, wide.ctypes.data, whole.ctypes.data)
    assert_same_bits(c.reshape(m, n), whole.reshape(m, n + 32)[:, :n])


def _for_target(spec: GemmSpec, target: Target):
    """`spec`'s caller and kernel compiled for `target` (another CPU family's tile)."""
    import llvmlite.binding as llvm

    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(definition(spec, target)),
                                        target_machine())
    engine.finalize_object()
    _ENGINES.append((engine, bind_scratch(engine, [spec.symbol])))
    return ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (3 + bool(spec.bias) + spec.residual))(
        engine.get_function_address(spec.symbol))


@pytest.mark.parametrize("panel_vectors", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("taps", [False, True])
def test_every_tile_shape_and_the_windows_kernel_store_c_transposed(panel_vectors, dtype, taps):
    """The other CPU family's tile (16 x 16 with AVX-512: more rows than a vector has lanes in
    f64), and the windows kernel (A's columns read in place through a table, here one tap:
    column p at p * m), with the epilogue: the product's bits, transposed."""
    target = dataclasses.replace(Target.host(), threads=1, panel_vectors=panel_vectors)
    m, n, k = 37, 45, 300
    a, b, offsets, start, shortcut = _operands(m, n, k, 1, m * n, dtype, panel_vectors)
    if taps:  # A's columns contiguous, and the slack the windows kernel's tiles read
        a = np.concatenate([a.reshape(m, k).T.reshape(-1), np.zeros(A_TAPS_SLACK, dtype)])
    plain = GemmSpec("f32" if dtype == np.float32 else "f64", 1, m, n, k,
                     (0, 1, m) if taps else (0, k, 1), (0, n, 1), m * n, True, bias="columns",
                     relu=True, residual=True, a_taps=(0,) if taps else ())
    expected = start.copy()
    _for_target(plain, target)(a.ctypes.data, b.ctypes.data, expected.ctypes.data,
                               offsets.ctypes.data, shortcut.ctypes.data)
    out = np.ascontiguousarray(start.transpose(0, 2, 1))
    shortcut_t = np.ascontiguousarray(shortcut.transpose(0, 2, 1))  # (alive through the call)
    transposed = dataclasses.replace(plain, c_transposed=True)
    _for_target(transposed, target)(a.ctypes.data, b.ctypes.data, out.ctypes.data,
                                    offsets.ctypes.data, shortcut_t.ctypes.data)
    assert_same_bits(out.transpose(0, 2, 1), expected, context=transposed.symbol)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_blocks_of_c_apart_stored_transposed(monkeypatch, threads):
    """A batch stride beyond m * n (each image's part of a concat's buffer) with C stored
    transposed: each block the plain product's bits, transposed, and what lies between the
    blocks left as it was (NaN here); the residual's blocks m * n apart, as C's own."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    m, n, k, batch = 33, 65, 257, 3
    a, b, offsets, start, shortcut = _operands(m, n, k, batch, m * n, np.float32, 5)
    plain = GemmSpec("f32", batch, m, n, k, (m * k, k, 1), (k * n, n, 1), m * n, False,
                     bias="rows", relu=True, residual=True)
    expected = np.zeros((batch, m, n), np.float32)
    compiled(plain)(a.ctypes.data, b.ctypes.data, expected.ctypes.data, offsets.ctypes.data,
                    shortcut.ctypes.data)
    apart = m * n + 37
    transposed = dataclasses.replace(plain, c0=apart, c_transposed=True)
    shortcut_t = np.ascontiguousarray(shortcut.transpose(0, 2, 1))
    out = np.full((batch - 1) * apart + m * n + 11, np.nan, np.float32)
    compiled(transposed)(a.ctypes.data, b.ctypes.data, out.ctypes.data, offsets.ctypes.data,
                         shortcut_t.ctypes.data)
    for i in range(batch):
        block = out[i * apart:i * apart + m * n].reshape(n, m)
        assert_same_bits(block.T, expected[i], context=f"block {i}")
        assert np.isnan(out[i * apart + m * n:(i + 1) * apart]).all()
    assert np.isnan(out[(batch - 1) * apart + m * n:]).all()
