"""The generated GEMM kernel (tapeml/codegen/gemm/) against numpy in float64, over shapes
that are not multiples of the tiles, transposed operands, batches, accumulation, f32 and f64;
and kernel.gemm through the whole pipeline against the interpreter."""

from __future__ import annotations

import ctypes
import dataclasses
import os

import numpy as np
import pytest
from bits import assert_same_bits  # tests/bits.py
from concurrency import at_once  # tests/concurrency.py
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.context import Context
from xdsl.dialects import builtin, func, llvm
from xdsl.parser import Parser

import tapeml
from tapeml.codegen.cpu import bind_scratch, callers_module, target_machine
from tapeml.codegen.gemm import GemmSpec, Target, batch_groups, definition, partition, tiles
from tapeml.dialects.kernel import Kernel, declared_kernels
from tapeml.transforms.to_llvm import convert_to_llvm

_ENGINES = []  # compiled kernels (and their scratch) live as long as the test session


def compiled(spec: GemmSpec):
    """The kernel for `spec`, for this host (and TAPEML_NUM_THREADS threads, when set)."""
    import llvmlite.binding as llvm

    machine = target_machine()
    engine = llvm.create_mcjit_compiler(callers_module([spec], machine), machine)
    engine.finalize_object()
    _ENGINES.append((engine, bind_scratch(engine, [spec.symbol])))
    address = engine.get_function_address(spec.symbol)
    return ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (3 + bool(spec.bias) + spec.residual))(
        address)


def check(m, n, k, dtype=np.float32, ta=False, tb=False, batch=1, c0=None, accumulate=False):
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    a = rng.standard_normal((batch, k, m) if ta else (batch, m, k)).astype(dtype)
    b = rng.standard_normal((batch, n, k) if tb else (batch, k, n)).astype(dtype)
    c0 = m * n if c0 is None else c0
    c = rng.standard_normal((batch if c0 else 1, m, n)).astype(dtype)
    spec = GemmSpec("f32" if dtype == np.float32 else "f64", batch, m, n, k,
                    (m * k, 1, m) if ta else (m * k, k, 1),
                    (k * n, 1, k) if tb else (k * n, n, 1), c0, accumulate)
    lhs = (a.transpose(0, 2, 1) if ta else a).astype(np.float64)
    rhs = (b.transpose(0, 2, 1) if tb else b).astype(np.float64)
    expected = lhs @ rhs
    if not c0:
        expected = expected.sum(axis=0, keepdims=True)
    if accumulate:
        expected = expected + c
    scale = max(1.0, float(np.abs(expected).max(initial=0))) * max(1, k)
    tolerance = (4e-7 if dtype == np.float32 else 1e-15) * scale
    kernel = compiled(spec)
    for _ in range(2):  # and again: nothing a call leaves in the kernel's scratch may matter
        out = c.copy()
        kernel(a.ctypes.data, b.ctypes.data, out.ctypes.data)
        np.testing.assert_allclose(out, expected, rtol=0, atol=tolerance, err_msg=spec.symbol)


SIZES = [1, 7, 33]


@pytest.mark.parametrize("m", [*SIZES, 15])
@pytest.mark.parametrize("n", [*SIZES, 32, 65])
@pytest.mark.parametrize("k", [1, 7, 257])
def test_edges_of_every_tile(m, n, k):
    check(m, n, k)


def _bits_with_edge_values(shape: tuple[int, int], dtype, seed: int) -> np.ndarray:
    """Random bit patterns of `dtype`'s width (NaN payloads among them), with NaN, -0 and -inf
    at fixed strides: what a packing routine must move unchanged."""
    bits = np.uint32 if np.dtype(dtype).itemsize == 4 else np.uint64
    held = np.random.default_rng(seed).integers(0, np.iinfo(bits).max, shape, dtype=bits,
                                                endpoint=True)
    for start, step, value in ((0, 7, np.nan), (3, 11, -0.0), (5, 13, -np.inf)):
        held.flat[start::step] = np.array(value, dtype).view(bits)
    return held


def _variant(spec: GemmSpec):
    """The kernel variant this host compiles for `spec`, loaded."""
    from tapeml.codegen.cpu import load_kernel
    from tapeml.codegen.gemm import variant

    v = variant(spec, Target.host())
    load_kernel(v)
    return v


def _prepacked(v, operand: str, held: np.ndarray, size: int, *args: int) -> np.ndarray:
    """The kernel `v`'s whole-operand prepack (`.prepack_a` or `.prepack_b`) of `held`, its
    first `size` elements; the 64 bytes past them must be as they were (never written)."""
    import llvmlite.binding as llvm

    after = [ctypes.c_void_p] if operand == "a" else []  # (A's: the kernel's `.transpose`)
    prepack = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, *[ctypes.c_int64] * 4,
                               *after)(
        llvm.address_of_symbol(f"{v.tiles if operand == 'a' else v.symbol}.prepack_{operand}"))
    pattern = 0x5A5A5A5A5A5A5A5A & np.iinfo(held.dtype).max
    out = np.full(size + 64 // held.itemsize, pattern, held.dtype)
    prepack(held.ctypes.data, out.ctypes.data, *args,
            *([llvm.address_of_symbol(f"{v.symbol}.transpose")] if after else []))
    assert (out[size:] == pattern).all(), f"{v.symbol}: written past the packed panels"
    return out[:size]


@pytest.mark.parametrize("stored", ["rows", "columns"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m", [1, 8, 13, 15, 29, 64])
@pytest.mark.parametrize("k", [1, 15, 16, 17, 300])
def test_packing_a_moves_every_bit(stored, dtype, m, k):
    """`.pack_a`, as the kernel's whole-A prepack runs it (one block of k), from A stored by
    rows (rows k + 3 apart: packed as transposed blocks, or element by element for tile
    heights whose last group of rows is under half a vector) or by columns (a transposed A,
    columns m + 3 apart: vectors of each column's run of MR rows, the last panel element by
    element): Ap[i / MR][p][i % MR] = A[min(i, m - 1), p], bit for bit (NaN payloads, -0,
    inf), k with and without a remainder past whole blocks; nothing written past the packed
    panels."""
    by_rows = stored == "rows"
    strides = (k + 3, 1) if by_rows else (1, m + 3)
    spec = GemmSpec("f32" if dtype == np.float32 else "f64", 1, m, 64, k, (0, *strides),
                    (0, 64, 1), m * 64, False)
    v = _variant(spec)
    held = _bits_with_edge_values((m, k + 3) if by_rows else (k, m + 3), dtype, m * 1000 + k)
    panels = -(-m // v.mr)
    out = _prepacked(v, "a", held, panels * k * v.mr, m, k, *strides)
    a = held[:, :k] if by_rows else held[:, :m].T
    rows = np.minimum(np.arange(panels * v.mr), m - 1)
    expected = a[rows].reshape(panels, v.mr, k).transpose(0, 2, 1).ravel()
    np.testing.assert_array_equal(out, expected, err_msg=v.symbol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 32, 45, 64])
@pytest.mark.parametrize("k", [1, 15, 16, 17, 300])
def test_packing_a_transposed_b_moves_every_bit(dtype, n, k):
    """`.pack_b` down the columns of a transposed B (each column contiguous along k; whole
    panels as transposed blocks), as the kernel's whole-B prepack runs it:
    Bp[j / NR][p][j % NR] = B[p, j], zero past n, bit for bit, columns k + 5 apart; nothing
    written past the packed panels."""
    spec = GemmSpec("f32" if dtype == np.float32 else "f64", 1, 64, n, k, (0, k, 1),
                    (0, 1, k + 5), 64 * n, False)
    v = _variant(spec)
    columns = _bits_with_edge_values((n, k + 5), dtype, n * 1000 + k)
    panels = -(-n // v.nr)
    out = _prepacked(v, "b", columns, panels * k * v.nr, k, n, 1, k + 5)
    b = np.zeros((k, panels * v.nr), columns.dtype)
    b[:, :n] = columns[:, :k].T
    expected = b.reshape(k, panels, v.nr).transpose(1, 0, 2).ravel()
    np.testing.assert_array_equal(out, expected, err_msg=v.symbol)


@pytest.mark.parametrize("ta,tb", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transposed_operands_are_read_in_place(ta, tb, dtype):
    check(37, 41, 29, dtype, ta, tb)


def test_a_product_and_its_transposes_share_one_kernel():
    """The kernel packs either walk, chosen per call by the strides (plan.along_rows): one
    variant for A @ B, A.T @ B, A @ B.T and A.T @ B.T of the same sizes; an operand whose inner
    stride is not 1 (a strided view) is another (its stride is not the constant 1). The
    transposed calls computing right through it: test_transposed_operands_are_read_in_place."""
    from tapeml.codegen.gemm import variant

    m, n, k = 37, 41, 29
    target = Target.host()

    def spec(a, b):
        return GemmSpec("f32", 1, m, n, k, a, b, m * n, False)

    plain, ta, tb = (0, k, 1), (0, 1, m), (0, 1, k)
    shared = {variant(spec(a, b), target) for a in (plain, ta) for b in ((0, n, 1), tb)}
    assert len(shared) == 1
    (one,) = shared
    assert one.a_unit and one.b_unit
    strided = variant(spec((0, 2 * k, 2), (0, n, 1)), target)
    assert not strided.a_unit and strided.b_unit and strided != one
    # (A's stride is its packing's, in the tiles' module: the kernel's own module is shared)
    assert strided.tiles != one.tiles and strided.symbol == one.symbol


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_strided_operands_either_walk(ta, tb):
    """Operands whose inner stride is 2 (every other element of a larger array), along rows
    or down columns: the non-unit kernel, each walk taken by the strides."""
    m, n, k = 19, 23, 17
    rng = np.random.default_rng(m + n + k + 2 * ta + tb)
    big_a = rng.standard_normal((k, 2 * m) if ta else (m, 2 * k)).astype(np.float32)
    big_b = rng.standard_normal((n, 2 * k) if tb else (k, 2 * n)).astype(np.float32)
    a = (big_a[:, ::2].T if ta else big_a[:, ::2]).astype(np.float64)  # A as (m, k)
    b = (big_b[:, ::2].T if tb else big_b[:, ::2]).astype(np.float64)  # B as (k, n)
    spec = GemmSpec("f32", 1, m, n, k, (0, 2, 2 * m) if ta else (0, 2 * k, 2),
                    (0, 2, 2 * k) if tb else (0, 2 * n, 2), m * n, False)
    out = np.full((m, n), np.nan, np.float32)
    compiled(spec)(big_a.ctypes.data, big_b.ctypes.data, out.ctypes.data)
    np.testing.assert_allclose(out, a @ b, rtol=0, atol=4e-7 * k * max(1, np.abs(a @ b).max()))


def test_larger_than_one_block_in_every_direction():
    lanes, mr, nr = tiles(GemmSpec("f32", 1, 1, 1, 1, (0, 1, 1), (0, 1, 1), 1, False),
                          Target.host())
    check(150, 2 * nr + 3, 513)  # two KC blocks and a tail; two MC blocks; a ragged panel


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, True)])
def test_rows_of_one_block_pack_b_a_chunk_of_columns_at_a_time(monkeypatch, threads, ta, tb):
    """Few rows (a convolution's output channels) over many columns: B is packed and used a
    chunk of columns at a time (plan.chunk_columns), A packed once per block of k for all of
    them; chunks with a ragged last one, several blocks of k, a ragged panel."""
    from tapeml.codegen.gemm import plan
    from tapeml.codegen.gemm.plan import INDEX

    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    m, n, k = 64, 2 * 256 + 45, 600
    spec = GemmSpec("f32", 1, m, n, k, (0, k, 1), (0, n, 1), m * n, False)
    assert plan(spec, Target.host())[INDEX["nc"]] < n
    check(m, n, k, ta=ta, tb=tb)
    check(m, n, k, np.float64, ta=ta, tb=tb, batch=2, accumulate=True)


def test_batches_accumulation_and_batch_sums():
    check(9, 10, 11, batch=3)
    check(9, 10, 11, accumulate=True)
    check(9, 10, 11, batch=4, c0=0)  # every batch summed into one C
    check(5, 6, 7, batch=2, c0=0, accumulate=True)
    check(13, 17, 19, np.float64, batch=2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("batch", [2, 11, 64])
def test_batch_sums_in_groups(dtype, accumulate, batch):
    """Batches summed into one C, in groups of consecutive batches whose sums are added in
    order (into what C held, when accumulating)."""
    m, n, k = 16, 9, 784 * 64 // batch  # the work of conv1's weight gradient in W4
    spec = GemmSpec("f32", batch, m, n, k, (m * k, k, 1), (k * n, n, 1), 0, accumulate)
    assert batch_groups(spec) == min(batch, 8)
    check(m, n, k, dtype, batch=batch, c0=0, accumulate=accumulate)


def test_empty_sums_and_empty_outputs():
    check(5, 6, 0)  # k = 0: C = 0
    check(5, 6, 0, accumulate=True)  # C unchanged
    check(0, 6, 3)
    check(5, 0, 3)


@pytest.mark.parametrize("batch,m,n,k,c0", [
    (6, 60, 70, 300, None),   # split by batch
    (1, 200, 50, 400, None),  # split by rows
    (1, 50, 200, 400, None),  # split by columns
    (3, 100, 90, 200, 0),     # batches summed into one C: in three groups of one batch
    (20, 16, 9, 784, 0),      # ... in eight groups (a convolution's weight gradient)
])
def test_results_do_not_depend_on_the_thread_count(monkeypatch, batch, m, n, k, c0):
    """Each part owns its elements of C and sums them in the same order: the same bits."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal(batch * m * k).astype(np.float32)
    b = rng.standard_normal(batch * k * n).astype(np.float32)
    c0 = m * n if c0 is None else c0
    spec = GemmSpec("f32", batch, m, n, k, (m * k, k, 1), (k * n, n, 1), c0, False)
    _, mr, nr = tiles(spec, Target.host())
    outputs = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
        parts = partition(spec, mr, nr, int(threads))
        if c0 == 0:  # groups of batches, whatever the thread count
            assert len(parts) == batch_groups(spec)
        else:
            assert len(parts) >= int(threads)
        owner = np.zeros((batch, m, n), int)  # every element of every batch in one part
        for b0, b1, m0, m1, n0, n1 in parts:
            owner[b0:b1, m0:m1, n0:n1] += 1
        assert (owner == 1).all()
        out = np.full((batch if c0 else 1) * m * n, np.nan, np.float32)
        compiled(spec)(a.ctypes.data, b.ctypes.data, out.ctypes.data)
        outputs.append(out)
    assert not np.isnan(outputs[0]).any()
    assert all(np.array_equal(outputs[0], o) for o in outputs[1:])
    expected = np.matmul(a.reshape(batch, m, k).astype(np.float64),
                         b.reshape(batch, k, n).astype(np.float64))
    expected = expected.sum(0) if not c0 else expected
    np.testing.assert_allclose(outputs[0].reshape(expected.shape), expected, atol=2e-4 * k ** 0.5)


def test_thread_count_setting_is_checked(monkeypatch):
    monkeypatch.setenv("TAPEML_NUM_THREADS", "two")
    with pytest.raises(ValueError, match="TAPEML_NUM_THREADS must be a positive integer"):
        Target.host()


def test_a_kernel_is_linked_from_the_spec_its_declaration_carries():
    """convert-loops-to-llvm declares each kernel with its spec as an attribute; the backend
    (and -t llvm) read the spec back from there, through the printed text too."""
    spec = GemmSpec("f64", 2, 3, 4, 5, (15, 5, 1), (0, 1, 5), 0, True)
    text = """
    func.func @f(%a: memref<30xf64>, %b: memref<20xf64>, %c: memref<12xf64>) {
      kernel.gemm %a, %b, %c {batch = 2 : i64, m = 3 : i64, n = 4 : i64, k = 5 : i64,
        a_strides = array<i64: 15, 5, 1>, b_strides = array<i64: 0, 1, 5>,
        c_batch_stride = 0 : i64, accumulate = true}
        : memref<30xf64>, memref<20xf64>, memref<12xf64>
      func.return
    }"""
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, llvm.LLVM, Kernel):
        ctx.load_dialect(dialect)
    module = Parser(ctx, text).parse_module()
    assert module.body.block.first_op.body.block.first_op.spec == spec
    convert_to_llvm(module)
    assert declared_kernels(module) == {spec.symbol: spec}
    assert declared_kernels(Parser(ctx, str(module)).parse_module()) == {spec.symbol: spec}


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 3), st.integers(1, 40), st.integers(1, 40), st.integers(1, 40),
       st.booleans(), st.booleans(), st.sampled_from(["f32", "f64"]))
def test_jit_matmul_matches_the_interpreter(batch, m, n, k, ta, tb, dtype):
    """tape.matmul (with transposed operands read in place) compiled, against the tape
    interpreter."""
    dt = np.float32 if dtype == "f32" else np.float64
    rng = np.random.default_rng(0)
    a = rng.standard_normal((batch, k, m) if ta else (batch, m, k)).astype(dt)
    b = rng.standard_normal((batch, n, k) if tb else (batch, k, n)).astype(dt)

    def f(a, b):
        lhs = tapeml.transpose(a, (0, 2, 1)) if ta else a
        rhs = tapeml.transpose(b, (0, 2, 1)) if tb else b
        return tapeml.matmul(lhs, rhs) * 2.0

    expected = tapeml.jit(f, backend="interp")(a, b)
    got = tapeml.jit(f)(a, b)
    atol = (1e-5 if dtype == "f32" else 1e-12) * k
    np.testing.assert_allclose(got, expected, rtol=0, atol=atol)


def test_results_do_not_depend_on_the_call():
    """The kernel's summation order is fixed: the same bits every call."""
    f = tapeml.jit(lambda a, b: a @ b)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((300, 300), np.float32), rng.standard_normal((300, 300), np.float32)
    first = f(a, b)
    assert all(np.array_equal(first, f(a, b)) for _ in range(3))


def test_verifier_rejects_reads_past_a_buffer():
    from xdsl.utils.exceptions import VerifyException

    program = """
    func.func @f(%a: memref<10xf32>, %b: memref<12xf32>, %c: memref<6xf32>) {
      kernel.gemm %a, %b, %c {batch = 1 : i64, m = 2 : i64, n = 3 : i64, k = 5 : i64,
        a_strides = array<i64: 0, 5, 1>, b_strides = array<i64: 0, 3, 1>,
        c_batch_stride = 6 : i64, accumulate = false}
        : memref<10xf32>, memref<12xf32>, memref<6xf32>
      func.return
    }"""
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, Kernel):
        ctx.load_dialect(dialect)
    module = Parser(ctx, program).parse_module()
    with pytest.raises(VerifyException, match="b is read up to element 14, past its 12"):
        module.verify()


@pytest.mark.parametrize("threads", ["1", "2", "3"])
@pytest.mark.parametrize("m,n,k", [(16, 196, 144), (7, 9, 5), (32, 300, 20)])
def test_one_a_for_every_batch_is_packed_once_and_read_by_every_part(monkeypatch, threads, m,
                                                                      n, k):
    """A convolution's forward GEMM: A (the weights) has batch stride 0; the batches may be
    split over threads, each part packing A once for all of its batches."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    batch = 6
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal(m * k).astype(np.float32)
    b = rng.standard_normal(batch * k * n).astype(np.float32)
    spec = GemmSpec("f32", batch, m, n, k, (0, k, 1), (k * n, n, 1), m * n, False)
    out = np.full(batch * m * n, np.nan, np.float32)
    compiled(spec)(a.ctypes.data, b.ctypes.data, out.ctypes.data)
    expected = a.reshape(m, k).astype(np.float64) @ b.reshape(batch, k, n).astype(np.float64)
    np.testing.assert_allclose(out.reshape(batch, m, n), expected, rtol=0, atol=4e-6 * k)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_callers_at_once_pack_into_scratch_of_their_own(monkeypatch, threads):
    """A kernel packs into its static scratch; a caller that finds it taken (another Python
    thread in the same kernel) packs into the heap. Both must give every caller its own
    product."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    m, n, k = 96, 200, 300  # past the pool's threshold, so two threads share each call
    spec = GemmSpec("f32", 1, m, n, k, (0, k, 1), (0, n, 1), m * n, False)
    kernel = compiled(spec)
    rng = np.random.default_rng(11)
    pairs = [(rng.standard_normal((m, k)).astype(np.float32),
              rng.standard_normal((k, n)).astype(np.float32)) for _ in range(4)]
    expected = [a.astype(np.float64) @ b.astype(np.float64) for a, b in pairs]

    def work(i: int) -> None:
        a, b = pairs[i]
        for _ in range(30):
            out = np.full((m, n), np.nan, np.float32)
            kernel(a.ctypes.data, b.ctypes.data, out.ctypes.data)  # ctypes drops the GIL
            np.testing.assert_allclose(out, expected[i], rtol=0, atol=4e-6 * k)

    at_once(work)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb,accumulate", [(False, False, False), (True, False, True),
                                              (False, True, False), (True, True, True)])
def test_one_product_on_threads_packs_b_once_for_all(monkeypatch, dtype, ta, tb, accumulate):
    """One large product on three threads: B packed by all of them together per block of k,
    then rows of C shared out; edges in m, n and k, transposes, accumulation, f32 and f64."""
    from tapeml.codegen.gemm import shares_b

    monkeypatch.setenv("TAPEML_NUM_THREADS", "3")
    m, n, k = 203, 77, 301
    spec = GemmSpec("f32" if dtype == np.float32 else "f64", 1, m, n, k, (0, k, 1), (0, n, 1),
                    m * n, accumulate)
    assert shares_b(spec, tiles(spec, Target.host())[1], 3)
    check(m, n, k, dtype, ta, tb, accumulate=accumulate)


@pytest.mark.parametrize("panel_vectors", [1, 2])
@pytest.mark.parametrize("m,n,k,ta,tb", [(33, 65, 300, False, False), (17, 31, 7, True, False),
                                         (40, 100, 20, False, True), (20, 9, 50, False, True)])
def test_both_tile_widths_whatever_the_host(m, n, k, ta, tb, panel_vectors):
    """The kernel for the other CPU family's tile too (14x32 and 16x16 with AVX-512), so a
    host of one family still tests the other's code."""
    import dataclasses

    import llvmlite.binding as llvm

    target = dataclasses.replace(Target.host(), threads=1, panel_vectors=panel_vectors)
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    spec = GemmSpec("f32", 1, m, n, k, (0, 1, m) if ta else (0, k, 1),
                    (0, 1, k) if tb else (0, n, 1), m * n, False)
    machine = target_machine()
    module = llvm.parse_assembly(definition(spec, target))
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    _ENGINES.append((engine, bind_scratch(engine, [spec.symbol])))
    kernel = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 3)(engine.get_function_address(
        spec.symbol))
    out = np.full((m, n), np.nan, np.float32)
    kernel(a.ctypes.data, b.ctypes.data, out.ctypes.data)
    expected = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    np.testing.assert_allclose(out, expected, rtol=0, atol=4e-6 * k)
    lanes, _, nr = tiles(spec, target)
    assert nr == panel_vectors * lanes  # a narrow C too: its edge columns masked


def test_many_shapes_call_a_handful_of_kernels_compiled_once(monkeypatch):
    """Every kernel.gemm shape of a program gets a caller of its own; the callers share the
    shape-generic kernels, which a second program (another batch size) finds loaded. (Sizes
    that every host's full register tile covers: a small m gets a tile of its own height.)"""
    from tapeml import nn, ops
    from tapeml.codegen import get_backend
    from tapeml.tracing.pytree import flatten

    monkeypatch.setenv("TAPEML_CACHE", "0")
    rng = np.random.default_rng(0)
    params = {f"l{i}": nn.linear_init(rng, m, n)
              for i, (m, n) in enumerate([(64, 96), (96, 64), (64, 128)])}

    def loss(p, x):
        h = ops.tanh(nn.linear(p["l0"], x))
        return ops.sum(nn.linear(p["l2"], ops.relu(nn.linear(p["l1"], h))) ** 2)

    step = tapeml.value_and_grad(loss)
    natives = []
    for batch in (64, 96):
        x = rng.standard_normal((batch, 64)).astype(np.float32)
        program = tapeml.trace(step, params, x)
        with tapeml.profile() as stages:
            natives.append(get_backend("cpu").compile(program.module))
        (report,) = [s for s in stages if s.name == "GEMM kernels"]
        if batch == 96:
            assert report.detail.endswith(f"{len(natives[-1].variants)} loaded")
        got = natives[-1](*flatten((params, x))[0])
        expected = tapeml.jit(step, backend="interp")(params, x)
        for g, e in zip(got, flatten(expected)[0], strict=True):
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5)
    first, second = natives
    assert len(first.kernels) >= 6 and len(first.variants) < len(first.kernels)
    assert set(second.kernels).isdisjoint(first.kernels)  # other shapes: other callers
    assert set(second.variants) <= set(first.variants)   # the same kernels


def _fresh_kernels(monkeypatch):
    """load_kernel as in a new process (no kernel loaded), the disk cache off."""
    from tapeml.codegen import cpu

    monkeypatch.setenv("TAPEML_CACHE", "0")
    kept: dict = {}
    _ENGINES.append(kept)  # the kernels' code outlives the test, as a process's would
    monkeypatch.setattr(cpu, "_KERNELS", kept)


def _mlp_step():
    from tapeml import nn, ops

    rng = np.random.default_rng(3)
    params = {f"l{i}": nn.linear_init(rng, m, n) for i, (m, n) in enumerate([(40, 72), (72, 9)])}
    x = rng.standard_normal((33, 40)).astype(np.float32)

    def loss(p, x):
        return ops.sum(nn.linear(p["l1"], ops.tanh(nn.linear(p["l0"], x))) ** 2)

    return tapeml.value_and_grad(loss), (params, x)


@pytest.mark.parametrize("cores", [1, 2])
def test_kernels_load_in_a_thread_of_their_own_where_there_is_a_second_core(cores,
                                                                             monkeypatch):
    """With two cores the kernels a program calls are compiled in a thread while the passes
    after tape-to-loops run (the profile says so); with one, in line as before. Either way the
    program computes what the interpreter does."""
    from tapeml.codegen import get_backend

    _fresh_kernels(monkeypatch)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    step, args = _mlp_step()
    program = tapeml.trace(step, *args)
    with tapeml.profile() as stages:
        native = get_backend("cpu").compile(program.module)
    (report,) = [s for s in stages if s.name == "GEMM kernels"]
    assert "compiled" in report.detail
    assert ("in a thread of their own" in report.detail) == (cores > 1)
    got = native(*flatten_leaves(args))
    expected = tapeml.jit(step, backend="interp")(*args)
    for g, e in zip(got, flatten_leaves(expected), strict=True):
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5)


def test_a_kernel_the_thread_could_not_load_is_loaded_again_in_line(monkeypatch):
    """An error in the thread (here every load there fails) is not the program's: the link
    loads the kernel itself, and says why if it cannot."""
    import threading

    from tapeml.codegen import cpu, get_backend

    _fresh_kernels(monkeypatch)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    real = cpu.load_kernel

    def failing_in_the_thread(v, in_worker=False, **options):
        if threading.current_thread().name == "tapeml-kernels":
            raise MemoryError("no room in the thread")
        return real(v, in_worker, **options)

    monkeypatch.setattr(cpu, "load_kernel", failing_in_the_thread)
    step, args = _mlp_step()
    with tapeml.profile() as stages:
        native = get_backend("cpu").compile(tapeml.trace(step, *args).module)
    (report,) = [s for s in stages if s.name == "GEMM kernels"]
    assert "compiled" in report.detail and "in a thread" not in report.detail
    got = native(*flatten_leaves(args))
    for g, e in zip(got, flatten_leaves(tapeml.jit(step, backend="interp")(*args)), strict=True):
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5)


def flatten_leaves(tree):
    from tapeml.tracing.pytree import flatten

    return flatten(tree)[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,n,k,batch,c0,accumulate", [
    (203, 77, 301, 1, None, False),  # rows past the last whole tile, k past one block
    (29, 128, 513, 1, None, True),   # the widest narrow product, accumulating
    (15, 3, 9, 4, None, False),      # batches, each its own C
    (17, 10, 40, 5, 0, False),       # batches summed into one C (groups)
    (1, 1, 1, 1, None, False),
])
def test_narrow_products_read_a_in_place(dtype, m, n, k, batch, c0, accumulate):
    """n <= DIRECT_A_COLUMNS with A's rows contiguous: the plan says to read A in place (no
    packing; the edge tile's rows past m read the last row, never past the buffer), and the
    results are numpy's; a transposed A or a wide product packs it as before."""
    from tapeml.codegen.gemm.plan import DIRECT_A_COLUMNS, INDEX, plan

    spec = GemmSpec("f32" if dtype == np.float32 else "f64", batch, m, n, k, (m * k, k, 1),
                    (k * n, n, 1), m * n if c0 is None else c0, accumulate)
    one = dataclasses.replace(Target.host(), threads=1)
    assert plan(spec, one)[INDEX["direct_a"]] == 1
    transposed = dataclasses.replace(spec, a=(m * k, 1, m))
    wide = dataclasses.replace(spec, n=DIRECT_A_COLUMNS + 1)
    assert plan(wide, one)[INDEX["direct_a"]] == 0
    if m > 1 and k > 1:  # (a 1 x 1 A reads the same either way)
        assert plan(transposed, one)[INDEX["direct_a"]] == 0
    check(m, n, k, dtype, batch=batch, c0=c0, accumulate=accumulate)
    check(m, n, k, dtype, ta=True, batch=batch, c0=c0, accumulate=accumulate)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_narrow_products_aliasing_rows_are_packed(dtype):
    """Rows of A a multiple of ALIASED_ROWS bytes apart would evict each other from L1 read in
    place: such an A is packed (the same sums: numpy's); a stride off the multiple is read in
    place."""
    from tapeml.codegen.gemm.plan import ALIASED_ROWS, INDEX, plan

    one = dataclasses.replace(Target.host(), threads=1)
    size = 4 if dtype == np.float32 else 8
    for k, direct in ((ALIASED_ROWS // size, 0), (ALIASED_ROWS // size + 16, 1)):
        spec = GemmSpec("f32" if dtype == np.float32 else "f64", 1, 40, 49, k, (40 * k, k, 1),
                        (k * 49, 49, 1), 40 * 49, False)
        assert plan(spec, one)[INDEX["direct_a"]] == direct, k
        check(40, 49, k, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m,panels,k,batch,c0,accumulate,ta", [
    (64, 2, 32, 64, None, False, False),  # attention's batched products
    (64, 1, 64, 64, None, False, True),   # ... with A transposed: both packed
    (29, 1, 257, 1, None, True, False),   # k past one block, accumulating
    (203, 3, 40, 1, None, False, False),  # rows past the last tile, three panels
    (17, 2, 40, 5, 0, False, False),      # batches summed into one C (groups)
])
def test_small_b_is_read_in_place(monkeypatch, dtype, threads, m, panels, k, batch, c0,
                                  accumulate, ta):
    """A B of at most DIRECT_B_BYTES, its rows contiguous and whole panels wide, with A read
    in place: the plan says to read B in place too (no packing), and the results are numpy's
    at 1 and 2 threads; a B with an edge panel or transposed is packed, and so is a large B
    beside a transposed A where the threads share one packed B (else `.tile` reads it in
    place: test_a_wide_b_is_read_in_place_by_the_packed_tiles)."""
    from tapeml.codegen.gemm.plan import DIRECT_B_BYTES, INDEX, direct_a, plan, variant

    monkeypatch.setenv("TAPEML_NUM_THREADS", str(threads))
    name = "f32" if dtype == np.float32 else "f64"
    host = dataclasses.replace(Target.host(), threads=threads)
    nr = variant(GemmSpec(name, 1, m, 1, k, (0, k, 1), (0, 1, 1), 0, False), host).nr
    n = panels * nr
    spec = GemmSpec(name, batch, m, n, k, (m * k, 1, m) if ta else (m * k, k, 1),
                    (k * n, n, 1), m * n if c0 is None else c0, accumulate)
    small = k * n * np.dtype(dtype).itemsize <= DIRECT_B_BYTES
    table = plan(spec, host)
    if direct_a(spec, variant(spec, host), bool(table[INDEX["shared"]])):
        assert table[INDEX["direct_b"]] == int(small)
    else:  # A packed: B in place unless the threads share one packed B
        assert table[INDEX["direct_b"]] == 1 - table[INDEX["shared"]]
    edge = dataclasses.replace(spec, n=n + 1, b=(k * (n + 1), n + 1, 1))
    transposed = dataclasses.replace(spec, b=(k * n, 1, k))
    assert plan(edge, host)[INDEX["direct_b"]] == 0
    if k > 1 and n > 1:
        assert plan(transposed, host)[INDEX["direct_b"]] == 0
    check(m, n, k, dtype, ta=ta, batch=batch, c0=c0, accumulate=accumulate)
    check(m, n, k, dtype, ta=ta, tb=True, batch=batch, c0=c0, accumulate=accumulate)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m,panels,k,batch,c0,accumulate,ta", [
    (256, 32, 784, 1, None, False, False),  # W3's first product: two blocks of k
    (784, 32, 256, 1, None, False, True),   # its weight gradient: A transposed, many rows
    (203, 17, 40, 1, None, True, False),    # rows past the last tile, accumulating
    (40, 24, 520, 3, None, False, False),   # batches, each its own C, k past one block
    (37, 8, 33, 4, 0, False, True),         # batches summed into one C (groups)
])
def test_a_wide_b_is_read_in_place_by_the_packed_tiles(monkeypatch, dtype, threads, m, panels,
                                                      k, batch, c0, accumulate, ta):
    """A B too wide for A to be read in place, its rows contiguous, whole panels wide and not
    a multiple of ALIASED_ROWS bytes apart, where each part packs its own B: `.tile` reads B
    where it is. The sums are those of the packed plan bit for bit (each element's k products
    in one order either way) and numpy's within rounding, at 1 and 2 threads; B's rows 4 KB
    apart, a transposed B, an edge panel or a constant B its caller packs are packed."""
    import importlib

    from tapeml.codegen.gemm.plan import ALIASED_ROWS, INDEX, plan, variant

    plan_module = importlib.import_module("tapeml.codegen.gemm.plan")  # (the package's
    # `plan` is the function)

    monkeypatch.setenv("TAPEML_NUM_THREADS", str(threads))
    name = "f32" if dtype == np.float32 else "f64"
    host = dataclasses.replace(Target.host(), threads=threads)
    nr = variant(GemmSpec(name, 1, m, 1, k, (0, k, 1), (0, 1, 1), 0, False), host).nr
    n = panels * nr
    spec = GemmSpec(name, batch, m, n, k, (m * k, 1, m) if ta else (m * k, k, 1),
                    (k * n, n, 1), m * n if c0 is None else c0, accumulate)
    table = plan(spec, host)
    assert table[INDEX["direct_a"]] == 0
    assert table[INDEX["direct_b"]] == 1 - table[INDEX["shared"]]
    size = np.dtype(dtype).itemsize
    aliased = ALIASED_ROWS // size  # (its rows 4 KB apart)
    for packed in (dataclasses.replace(spec, n=aliased, b=(k * aliased, aliased, 1)),
                   dataclasses.replace(spec, b=(k * n, 1, k)),
                   dataclasses.replace(spec, n=n + 1, b=(k * (n + 1), n + 1, 1)),
                   dataclasses.replace(spec, b=(0, n, 1), b_constant="w")):
        assert plan(packed, host)[INDEX["direct_b"]] == 0, packed
    check(m, n, k, dtype, ta=ta, batch=batch, c0=c0, accumulate=accumulate)
    rng = np.random.default_rng(k)
    a = rng.standard_normal(batch * m * k).astype(dtype)
    b = rng.standard_normal(batch * k * n).astype(dtype)
    c = rng.standard_normal(batch * m * n if c0 is None else m * n).astype(dtype)
    outs = []
    for read_in_place in (True, False):
        if not read_in_place:
            monkeypatch.setattr(plan_module, "direct_b", lambda spec, v, shared: False)
        kernel = compiled(spec)  # (its plan made now: the callers' module of its own)
        out = c.copy()
        kernel(a.ctypes.data, b.ctypes.data, out.ctypes.data)
        outs.append(out)
    assert_same_bits(outs[0], outs[1])


def _constant_product(spec: GemmSpec, a: np.ndarray, b: np.ndarray, calls: int = 3
                      ) -> list[np.ndarray]:
    """`calls` results of `spec`'s kernel on a and b (flat), each into a C of NaNs."""
    kernel = compiled(spec)
    outs = []
    for _ in range(calls):
        out = np.full(spec.batch * spec.m * spec.n if spec.c0 else spec.m * spec.n, np.nan,
                      np.float32 if spec.dtype == "f32" else np.float64)
        kernel(a.ctypes.data, b.ctypes.data, out.ctypes.data)
        outs.append(out)
    return outs


@pytest.mark.parametrize("threads", ["1", "2", "3"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("which", ["a", "b", "ab"])
@pytest.mark.parametrize("m,n,k,batch,ta,tb", [
    (7, 9, 5, 1, False, False), (150, 37, 513, 1, False, False),  # blocks of rows and of k
    (33, 300, 20, 3, True, False), (1, 1000, 300, 1, False, True),  # a GEMV on a weight
    (1000, 49, 260, 2, False, False), (19, 65, 257, 4, True, True),
    (300, 600, 300, 1, False, False)])  # chunks of columns over several blocks of rows
def test_a_constant_operand_is_packed_once_by_its_caller(monkeypatch, threads, dtype, which,
                                                         m, n, k, batch, ta, tb):
    """An operand that is a constant of the program (GemmSpec.a_constant: a model's weights),
    one for every batch, is packed whole by the first call, then read packed by every call
    after it (plan.packed_a): the same bits as without, at every thread count, edges in m, n
    and k, transposes, several blocks of rows and of k, batches, f32 and f64."""
    from tapeml.codegen.gemm import plan, variant
    from tapeml.codegen.gemm.plan import INDEX

    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    rng = np.random.default_rng(m + n + k + batch)
    a_batch = 0 if "a" in which else m * k
    b_batch = 0 if "b" in which else k * n
    a = rng.standard_normal((1 if a_batch == 0 else batch) * m * k).astype(dtype)
    b = rng.standard_normal((1 if b_batch == 0 else batch) * k * n).astype(dtype)
    kind = "f32" if dtype == np.float32 else "f64"
    plain = GemmSpec(kind, batch, m, n, k, (a_batch, 1, m) if ta else (a_batch, k, 1),
                     (b_batch, 1, k) if tb else (b_batch, n, 1), m * n, False)
    kept = dataclasses.replace(plain, a_constant="weights" if "a" in which else "",
                               b_constant="weights_b" if "b" in which else "")
    target = Target.host()
    whole = plan(kept, target, packed=True)
    v = variant(kept, target)
    if threads != "3" or not (kept.batch == 1 and -(-m // v.mr) >= 3):  # else B is shared
        assert (whole[INDEX["packed_a"]] or whole[INDEX["packed_b"]] or
                whole[INDEX["direct_a"]] or whole[INDEX["direct_b"]])
    expected = _constant_product(plain, a, b, calls=1)[0]
    for got in _constant_product(kept, a, b):
        np.testing.assert_array_equal(got, expected, err_msg=kept.symbol)


def test_callers_at_once_while_the_first_packs_a_constant(monkeypatch):
    """Calls from several Python threads at once on a caller that packs its constant A on the
    first call: the one that claims it packs, the others pass A as it is; all are right."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", "2")
    m, n, k = 300, 200, 600
    spec = GemmSpec("f32", 1, m, n, k, (0, k, 1), (0, n, 1), m * n, False, a_constant="w")
    kernel = compiled(spec)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(np.float32)
    bs = [rng.standard_normal((k, n)).astype(np.float32) for _ in range(4)]
    expected = [a.astype(np.float64) @ b.astype(np.float64) for b in bs]

    def work(i: int) -> None:
        for _ in range(10):
            out = np.full((m, n), np.nan, np.float32)
            kernel(a.ctypes.data, bs[i].ctypes.data, out.ctypes.data)
            np.testing.assert_allclose(out, expected[i], rtol=0, atol=4e-6 * k)

    at_once(work)


def test_products_of_two_constants_of_one_shape_are_two_callers():
    """Two weights of one shape (a network's repeated layers) each have a caller of their own,
    so each keeps its own packing (they shared one, and the second layer computed with the
    first's weights); the constant is found where kernel.gemm reads a global, the same for
    every batch."""
    rng = np.random.default_rng(2)
    w1, w2 = (rng.standard_normal((40, 300)).astype(np.float32) for _ in range(2))

    def f(x):
        return tapeml.relu(w1 @ x) - w2 @ (x * 2.0)

    x = rng.standard_normal((300, 50)).astype(np.float32)
    step = tapeml.jit(f)
    expected = tapeml.jit(f, backend="interp")(x)
    for _ in range(2):
        np.testing.assert_allclose(step(x), expected, rtol=0, atol=1e-4)
    lowered = step.lower(x)["llvm dialect"]
    assert "_ca_f_constant_0" in lowered and "_ca_f_constant_1" in lowered


def _epilogue_reference(c: np.ndarray, bias: np.ndarray, kind: str, relu: bool,
                        residual: np.ndarray | None = None) -> np.ndarray:
    """kernel.gemm's epilogue in plain numpy: + bias per row or column, + the residual, then
    maximum(x, +0)."""
    with np.errstate(all="ignore"):
        if kind == "rows":
            c = c + bias[:, None]
        elif kind == "columns":
            c = c + bias
        if residual is not None:
            c = c + residual
        return np.maximum(c, 0) + c.dtype.type(0) if relu else c


@pytest.mark.parametrize("threads", ["1", "2", "3"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias,relu,residual", [
    ("rows", True, False), ("columns", True, False), ("rows", False, False),
    ("columns", False, False), ("", True, False), ("rows", True, True), ("columns", False, True),
    ("", True, True)])
@pytest.mark.parametrize("m,n,k,batch,c0,accumulate,ta,constant", [
    (7, 9, 5, 1, None, False, False, False),  # one edge tile
    (150, 300, 513, 1, None, False, False, True),  # blocks of rows, of k, chunks of columns
    (33, 65, 257, 3, None, True, True, False),  # batches, accumulating, A transposed
    (16, 64, 40, 2, None, False, False, False),  # A and a small B read in place
    (40, 50, 300, 8, 0, False, False, False),  # batches summed in groups: applied at the end
    (5, 6, 3, 3, 0, True, False, False),  # batches summed by one part, into what C held
    (9, 20, 0, 2, None, False, False, False),  # an empty sum: the epilogue of 0
    (9, 20, 0, 1, None, True, False, False)])  # ... and of what C held
def test_the_epilogue_is_applied_once_to_each_whole_sum(monkeypatch, threads, dtype, bias, relu,
                                                      residual, m, n, k, batch, c0, accumulate,
                                                      ta, constant):
    """kernel.gemm's epilogue (+ a bias per row or per column, + a residual, relu) gives the
    bits of the product without it followed by the epilogue in numpy, on every path a call
    can take: edge tiles, several blocks of k and of rows, chunks of columns, a constant A
    packed by its caller, A and B read in place, batches, batches summed into one C in one
    part and in groups, accumulating, k = 0, 1 to 3 threads (3: one B shared); the biases,
    the residual and C hold NaN, ±inf and ±0, so relu's NaN and zeros are seen."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    rng = np.random.default_rng(m * 7 + n * 3 + k + batch)
    kind = "f32" if dtype == np.float32 else "f64"
    c0 = m * n if c0 is None else c0
    a = rng.standard_normal(batch * m * k).astype(dtype)
    b = rng.standard_normal(batch * k * n).astype(dtype)
    plain = GemmSpec(kind, batch, m, n, k, (m * k, 1, m) if ta else (m * k, k, 1),
                     (k * n, n, 1), c0, accumulate)
    if constant:
        plain = dataclasses.replace(plain, a=(0, k, 1), a_constant="weights")
    length = {"rows": m, "columns": n, "": 0}[bias]
    values = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1.5], dtype)
    offsets = np.resize(values, max(length, 1))[:length].copy()
    rng.shuffle(offsets)
    start = rng.standard_normal((batch if c0 else 1) * m * n).astype(dtype)
    start[::5] = np.resize(values, start[::5].size)
    start[:start.size // 3] = -0.0  # -0 + -0 is -0 (an epilogue of k = 0 on what C held)
    expected = start.copy()
    compiled(plain)(a.ctypes.data, b.ctypes.data, expected.ctypes.data)
    blocks = expected.reshape(-1, m, n)
    shortcut = rng.standard_normal(blocks.shape).astype(dtype)
    shortcut.reshape(-1)[::3] = np.resize(values, shortcut.reshape(-1)[::3].size)
    expected = np.stack([_epilogue_reference(x, offsets, bias, relu, r if residual else None)
                         for x, r in zip(blocks, shortcut, strict=True)])
    spec = dataclasses.replace(plain, bias=bias, relu=relu, residual=residual)
    kernel = compiled(spec)
    for _ in range(2):
        out = start.copy()
        kernel(a.ctypes.data, b.ctypes.data, out.ctypes.data,
               *([offsets.ctypes.data] if bias else []),
               *([shortcut.ctypes.data] if residual else []))
        assert_same_bits(out.reshape(expected.shape), expected, context=spec.symbol)


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("m,n,k,batch,bias", [(7, 9, 5, 3, ""), (33, 65, 257, 4, "rows"),
                                              (16, 64, 40, 2, "columns"), (9, 20, 0, 2, "rows")])
def test_blocks_of_c_apart_leave_what_lies_between(monkeypatch, threads, m, n, k, batch, bias):
    """A batch stride of C beyond m * n (each image's part of a concat's buffer): every block
    gets the bits it gets packed, and the elements between the blocks are left as they were
    (NaN here); with an epilogue, and an empty sum (k = 0: zeroed block by block)."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal(batch * m * k).astype(np.float32)
    b = rng.standard_normal(batch * k * n).astype(np.float32)
    offsets = rng.standard_normal(max(m, n)).astype(np.float32)
    apart = m * n + 37
    packed = GemmSpec("f32", batch, m, n, k, (m * k, k, 1), (k * n, n, 1), m * n, False,
                      bias=bias, relu=bool(bias))
    spaced = dataclasses.replace(packed, c0=apart)
    extra = [offsets.ctypes.data] if bias else []
    expected = np.full(batch * m * n, np.nan, np.float32)
    compiled(packed)(a.ctypes.data, b.ctypes.data, expected.ctypes.data, *extra)
    out = np.full((batch - 1) * apart + m * n + 11, np.nan, np.float32)
    compiled(spaced)(a.ctypes.data, b.ctypes.data, out.ctypes.data, *extra)
    for i in range(batch):
        assert_same_bits(out[i * apart:i * apart + m * n], expected[i * m * n:(i + 1) * m * n])
        assert np.isnan(out[i * apart + m * n:(i + 1) * apart]).all()
    assert np.isnan(out[(batch - 1) * apart + m * n:]).all()
