"""tape-to-loops{pixel_rows}: a forward convolution over few pixels and many output channels
as the product with the pixels as C's rows (the im2col matrix, or x, read transposed; the
weights transposed), then transposed into the output, the bias and relu its epilogue, a
residual added (then the relu) as it is copied: against the interpreter, compiled and at the
loops."""

from __future__ import annotations

import numpy as np
import pytest
from bits import assert_same_bits  # tests/bits.py
from lowered_convolutions import lowered_convolution  # tests/lowered_convolutions.py

import tapeml
from tapeml import nn
from tapeml.transforms.loops import convolutions


def test_which_convolutions_take_pixel_rows():
    """At most PIXEL_ROWS pixels, or PIXEL_ROWS_DEEP's pixels and depth, and at least as many
    output channels as pixels."""
    geo = convolutions._ConvGeometry
    params = {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1}
    fits = convolutions._pixel_rows_fit
    assert fits(geo(1, 512, 7, 7, 512, 512, 3, 3, 7, 7, 1, params))
    assert not fits(geo(1, 512, 7, 7, 48, 512, 3, 3, 7, 7, 1, params))  # fewer channels
    assert fits(geo(1, 256, 14, 14, 256, 256, 3, 3, 14, 14, 1, params))  # k = 2304
    assert not fits(geo(1, 64, 13, 13, 256, 64, 3, 3, 13, 13, 1, params))  # k = 576
    assert not fits(geo(1, 64, 56, 56, 64, 64, 3, 3, 56, 56, 1, params))


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
    x = rng.standard_normal((batch, 24, 7, 7)).astype(np.float32)
    x[0, 1, 3, 4], x[-1, 2, 6, 6], x[0, 3, 0, 0] = np.nan, np.inf, -0.0
    w = rng.standard_normal((72, 24, kernel_size, kernel_size)).astype(np.float32)
    b = rng.standard_normal(72).astype(np.float32)
    r = rng.standard_normal((batch, 72, 7, 7)).astype(np.float32)
    r[0, 5, 2, 2] = -np.inf

    def f(x, w, b, r):
        y = nn.conv2d(x, w, b if "bias" in epilogue else None, padding=kernel_size // 2)
        y = y + r if "residual" in epilogue else y
        return tapeml.relu(y) if "relu" in epilogue else y

    step = tapeml.jit(f)
    assert "m = 49 : i64" in step.lower(x, w, b, r)["loops"]
    got = step(x, w, b, r)
    expected = tapeml.trace(f, x, w, b, r)(x, w, b, r)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)
    assert np.array_equal(np.isnan(got), np.isnan(expected))
    assert np.array_equal(np.signbit(got), np.signbit(expected))


def test_pixels_as_rows_interpret_to_the_traces_values():
    """At the loops: a kernel.gemm of m = the pixels reading the im2col matrix and the weights
    transposed, then the transposing copy; printed, parsed back and interpreted, the trace's
    values."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((40, 3, 3, 3))
    x = rng.standard_normal((2, 3, 6, 6))
    specs, got, expected = lowered_convolution(w, x, 1, pixel_rows=True)
    assert [(s.m, s.n, s.k, s.a, s.b) for s in specs] == [(36, 40, 27, (27 * 36, 1, 36),
                                                           (0, 1, 27))]
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
                monkeypatch.setattr(convolutions, "PIXEL_ROWS", 0)
                monkeypatch.setattr(convolutions, "PIXEL_ROWS_DEEP", (0, 0))
            step = tapeml.jit(f)
            assert ("m = 49 : i64" in step.lower(x, w, b, r)["loops"]) == rows
            outs.append(step(x, w, b, r))
        monkeypatch.undo()
        assert_same_bits(outs[0], outs[1])
