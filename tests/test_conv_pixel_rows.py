"""tape-to-loops{pixel_rows}: a forward convolution whose product pads fewer tiles with the
pixels as C's rows, as that product (the im2col matrix, or x, read transposed; the weights
transposed), stored transposed into the output by the kernel (kernel.gemm's c_transposed),
the bias, a residual and relu its epilogue: against the interpreter, compiled and at the
loops."""

from __future__ import annotations

import numpy as np
import pytest
from bits import assert_same_bits  # tests/bits.py
from lowered_convolutions import lowered_convolution  # tests/lowered_convolutions.py

import tapeml
from tapeml import nn
from tapeml.transforms.loops import convolutions


def _geometry(c: int, size: int, o: int, kernel_size: int) -> convolutions._ConvGeometry:
    params = {"stride": (1, 1), "padding": (kernel_size // 2,) * 4, "dilation": (1, 1),
              "groups": 1}
    return convolutions._ConvGeometry(1, c, size, size, o, c, kernel_size, kernel_size, size,
                                      size, 1, params)


def test_which_convolutions_take_pixel_rows():
    """The transposed product where its padded tiles are fewer by TRANSPOSED_COST: ResNet-50's
    7 x 7 layers (49 pixels pad 64 columns) and its 256 x 256 14 x 14 one (196 pad 208, 256
    rows 266), not its 56 x 56 ones (3136 = 98 panels), nor a product whose saving the
    transposed store outweighs (1024 rows pad 1036: 7% saved, short of 10% at k = 256 and
    of 19% at k = 64), nor squeezenet's classifier (1000 channels pad as many as 169 pixels
    save)."""
    fits = convolutions._pixel_rows_fit
    assert fits(_geometry(512, 7, 512, 3))
    assert fits(_geometry(2048, 7, 512, 1))
    assert fits(_geometry(256, 14, 256, 3))
    assert not fits(_geometry(256, 14, 1024, 1))
    assert not fits(_geometry(64, 14, 1024, 1))
    assert not fits(_geometry(64, 56, 64, 3))
    assert not fits(_geometry(512, 13, 1000, 1))


def test_padding_of_tiles_follows_the_kernels_choice():
    """Rows as the CPU's `tiles` pads them (14, or the least padding where 14 pads more than a
    tenth), columns in panels of 32 with a last one of 16 where it holds the rest."""
    assert convolutions._padded(49, 14) == 49  # tiles of 7
    assert convolutions._padded(196, 14) == 196
    assert convolutions._padded(1000, 14) == 1008
    assert convolutions._padded(9, 14) == 9
    assert [convolutions._padded_columns(n, 32) for n in (49, 196, 784, 32, 3)] == [
        64, 208, 784, 32, 16]


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("batch,kernel_size,epilogue", [
    (1, 3, "bias relu"), (3, 1, "bias residual relu"), (2, 3, "residual"), (1, 1, "")])
def test_compiled_convolutions_with_pixels_as_rows(monkeypatch, threads, batch, kernel_size,
                                                   epilogue):
    """A 7 x 7 convolution (bias, relu and a residual folded in or not; pointwise or 3 x 3)
    through the transposed product: the interpreter's values, NaN, inf and -0 where they
    reach (relu's -0 -> +0 included)."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    rng = np.random.default_rng(batch * 10 + kernel_size)
    x = rng.standard_normal((batch, 128, 7, 7)).astype(np.float32)
    x[0, 1, 3, 4], x[-1, 2, 6, 6], x[0, 3, 0, 0] = np.nan, np.inf, -0.0
    w = rng.standard_normal((72, 128, kernel_size, kernel_size)).astype(np.float32)
    b = rng.standard_normal(72).astype(np.float32)
    r = rng.standard_normal((batch, 72, 7, 7)).astype(np.float32)
    r[0, 5, 2, 2] = -np.inf

    def f(x, w, b, r):
        y = nn.conv2d(x, w, b if "bias" in epilogue else None, padding=kernel_size // 2)
        y = y + r if "residual" in epilogue else y
        return tapeml.relu(y) if "relu" in epilogue else y

    step = tapeml.jit(f)
    loops = step.lower(x, w, b, r)["loops"]
    assert "m = 49 : i64" in loops and "c_transposed" in loops
    got = step(x, w, b, r)
    expected = tapeml.trace(f, x, w, b, r)(x, w, b, r)
    np.testing.assert_allclose(got, expected, rtol=5e-5, atol=5e-5)
    assert np.array_equal(np.isnan(got), np.isnan(expected))
    assert np.array_equal(np.signbit(got), np.signbit(expected))


def test_pixels_as_rows_interpret_to_the_traces_values():
    """At the loops: one kernel.gemm of m = the pixels reading the im2col matrix and the
    weights transposed, C stored transposed; printed, parsed back and interpreted, the
    trace's values."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((64, 32, 3, 3))
    x = rng.standard_normal((2, 32, 6, 6))
    specs, got, expected = lowered_convolution(w, x, 1, pixel_rows=True)
    assert [(s.m, s.n, s.k, s.a, s.b, s.c0, s.c_transposed) for s in specs] == [
        (36, 64, 288, (288 * 36, 1, 36), (0, 1, 288), 36 * 64, True)]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_both_forms_give_the_same_bits(monkeypatch):
    """The pixels as rows or as columns (the thresholds set so that none takes rows): the same
    sums in the same order either way, so the same bits (NaN, inf, a residual, relu), at 1 and
    2 threads."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 64, 7, 7)).astype(np.float32)
    x[0, 0, 0, 0], x[1, 5, 3, 3] = np.nan, -np.inf
    w = (rng.standard_normal((128, 64, 3, 3)) * 0.1).astype(np.float32)
    b = rng.standard_normal(128).astype(np.float32)
    r = rng.standard_normal((2, 128, 7, 7)).astype(np.float32)

    def f(x, w, b, r):
        return tapeml.relu(nn.conv2d(x, w, b, padding=1) + r)

    for threads in ("1", "2"):
        monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
        outs = []
        for rows in (True, False):
            if not rows:
                monkeypatch.setattr(convolutions, "TRANSPOSED_COST", (np.inf, 0))
            step = tapeml.jit(f)
            assert ("m = 49 : i64" in step.lower(x, w, b, r)["loops"]) == rows
            outs.append(step(x, w, b, r))
        monkeypatch.undo()
        assert_same_bits(outs[0], outs[1])


def test_the_passes_padding_is_the_kernels():
    """pixel_rows weighs tiles as the CPU's kernel pads them: `_padded` (the pass cannot ask
    its backend) against the height `tiles` chooses, on AVX-512's f32 tile, for every row
    count up to 3000."""
    import dataclasses

    from tapeml.codegen.gemm import GemmSpec, Target, tiles

    target = dataclasses.replace(Target.host(), vector_bits=512, registers=32,
                                 panel_vectors=2)
    rows, _ = convolutions.TILE
    for m in range(1, 3001):
        _, mr, nr = tiles(GemmSpec("f32", 1, m, 64, 64, (0, 64, 1), (0, 64, 1), m * 64, False),
                          target)
        assert mr <= rows and nr == convolutions.TILE[1]
        assert convolutions._padded(m, rows) == -(-m // mr) * mr, m


_KEPT: list[dict] = []  # the kernels a test loads outlive it, as a process's would


def test_only_programs_storing_c_transposed_load_that_store(monkeypatch, tmp_path):
    """A kernel's store of its tiles into a C stored transposed is a module of its own
    (gemm.transposed_module): a product of the same kernel into a C as it lies compiles none
    of it; a convolution with its pixels as rows loads it, compiled or from the disk cache
    (where the program's entry lists it), and gives the trace's values."""
    from tapeml.codegen import cpu

    monkeypatch.setenv("TAPEML_CACHE", "1")
    monkeypatch.setenv("TAPEML_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 128, 7, 7)).astype(np.float32)
    w = rng.standard_normal((72, 128, 3, 3)).astype(np.float32)

    def conv(x, w):
        return nn.conv2d(x, w, padding=1)

    expected = tapeml.trace(conv, x, w)(x, w)
    for origin in ("compiled", "disk cache"):
        kept: dict = {}
        _KEPT.append(kept)
        monkeypatch.setattr(cpu, "_KERNELS", kept)  # as in a new process
        a, b = x.reshape(128, 49).T.copy(), w.reshape(72, -1)[:, :128].T.copy()
        np.testing.assert_allclose(tapeml.jit(lambda a, b: a @ b)(a, b), a @ b, rtol=1e-4,
                                   atol=1e-4)
        assert kept and not any(name.endswith(".edge.transposed") for name in kept)
        step = tapeml.jit(conv)
        if origin == "compiled":
            assert "c_transposed" in step.lower(x, w)["loops"]
        np.testing.assert_allclose(step(x, w), expected, rtol=5e-5, atol=5e-5)
        assert [native.origin for _, native in step.cache.values()] == [origin]
        (store,) = [name for name in kept if name.endswith(".edge.transposed")]
        assert store.removesuffix(".edge.transposed") in kept  # (beside its kernel)
