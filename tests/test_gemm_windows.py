"""kernel.gemm's `a_taps`: A's columns are a convolution's windows over zero-padded images,
column p = (c * kh + i) * kw + j at c * a2 + i * rs + j * cs, its rows (the pixels) 1 apart.
The CPU kernel reads them in place (`.tile.direct` through a table, a kernel of its own:
Variant.windows, all of k in one block) and must give the bits of the plain kernel over the
same A written out where k is one block (Target.kc) and its values where it is more (the blocks of k
are summed apart there); the verifier bounds its reads (A_TAPS_SLACK past the furthest); the
interpreter and the emulated GPU compute it too; and tape-to-loops{window_convs} lowers
convolutions to it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from bits import assert_same_bits  # tests/bits.py
from lowered_convolutions import lowered_convolution  # tests/lowered_convolutions.py
from test_gemm import compiled
from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

import tapeml
from tapeml import nn
from tapeml.codegen.gemm import GemmSpec, Target
from tapeml.codegen.gemm.plan import INDEX, plan, variant
from tapeml.dialects.kernel import A_TAPS_SLACK, Kernel
from tapeml.transforms.loops import convolutions
from tapeml.transforms.loops.epilogues import Epilogue


def _windows(batch: int, channels: int, hp: int, wp: int, kh: int, kw: int, dh: int, dw: int,
             dtype: type, rng: np.random.Generator, order: int = 1
             ) -> tuple[GemmSpec, np.ndarray, np.ndarray]:
    """A windowed A over `batch` images of `channels` x hp x wp (any values: NaN, inf and -0
    among them) and its tail, with the spec of n = 0 (the caller sets n and B), its taps in
    order (`order` 1) or reversed (-1), and the same A written out, batch x m x k."""
    oh = hp - (kh - 1) * dh
    m, k = oh * wp, channels * kh * kw
    size = batch * channels * hp * wp + (kw - 1) * dw + A_TAPS_SLACK
    flat = rng.standard_normal(size).astype(dtype)
    flat[rng.integers(0, size, 3)] = [np.nan, np.inf, -0.0]
    taps = [i * dh * wp + j * dw for i in range(kh) for j in range(kw)]
    spec = GemmSpec("f32" if dtype == np.float32 else "f64", batch, m, 0, k,
                    (channels * hp * wp, 1, hp * wp), (0, 0, 1), 0, False,
                    a_taps=tuple(taps[::order]))
    columns = np.array([spec.a_column(p) for p in range(k)])
    written = flat[spec.a[0] * np.arange(batch)[:, None, None] + columns[None, None, :]
                   + np.arange(m)[None, :, None]]
    return spec, flat, np.ascontiguousarray(written)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize(
    "batch,channels,hp,wp,o,kh,kw,dh,dw,accumulate,epilogue,constant,order,transposed", [
        (1, 3, 8, 9, 5, 3, 3, 1, 1, False, False, False, 1, True),   # edges of rows, columns
        (2, 4, 12, 14, 30, 3, 3, 1, 1, False, True, True, 1, True),  # bias + relu, B kept
        (3, 2, 9, 11, 16, 3, 2, 2, 1, True, False, False, -1, False),  # dilated, 3 x 2, C +=
        (1, 40, 10, 10, 7, 3, 3, 1, 1, False, True, False, 1, True),  # k = 360: one block
        (2, 1, 5, 40, 33, 1, 5, 1, 2, False, False, True, -1, False),  # 1 x 5, dilated columns
    ])
def test_windows_read_in_place_give_the_plain_products_bits(
        monkeypatch, dtype, threads, batch, channels, hp, wp, o, kh, kw, dh, dw, accumulate,
        epilogue, constant, order, transposed):
    """The kernel over windows (a windows kernel: A read in place, never packed, no shared B)
    against the plain kernel over the same A written out, batch by batch: the same bits where
    k is one block (its values beyond: the plain kernel sums blocks of kc apart), NaN, inf and
    -0 in A and B, at 1 and 2 threads, f32 and f64, C as it lies or stored transposed."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    rng = np.random.default_rng(batch * 1000 + channels * 10 + o)
    windows, flat, written = _windows(batch, channels, hp, wp, kh, kw, dh, dw, dtype, rng,
                                      order)
    m, k = windows.m, windows.k
    windows = dataclasses.replace(
        windows, n=o, b=(0, 1, k), c0=o * m, accumulate=accumulate,
        bias="columns" if epilogue else "", relu=epilogue,
        b_constant="weights" if constant else "", c_transposed=transposed)
    plain = dataclasses.replace(windows, a=(m * k, k, 1), a_taps=())
    host = dataclasses.replace(Target.host(), threads=int(threads))
    table = plan(windows, host)
    assert variant(windows, host).windows and not variant(plain, host).windows
    assert table[INDEX["direct_a"]] == 1 and table[INDEX["shared"]] == 0
    b = rng.standard_normal(o * k).astype(dtype)  # w[o][k]: B = w^T
    b[rng.integers(0, b.size, 2)] = [np.inf, -0.0]
    bias = rng.standard_normal(o).astype(dtype)
    start = rng.standard_normal(batch * o * m).astype(dtype)
    outs = []
    for spec, a in ((windows, flat), (plain, written)):
        out = start.copy()
        extra = [bias.ctypes.data] if epilogue else []
        compiled(spec)(a.ctypes.data, b.ctypes.data, out.ctypes.data, *extra)
        outs.append(out)
    if k <= Target.host().kc:
        assert_same_bits(outs[0], outs[1])
    else:
        tight = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(outs[0], outs[1], rtol=tight, atol=tight)
        assert np.array_equal(np.isnan(outs[0]), np.isnan(outs[1]))


def test_the_verifier_bounds_a_windows_reads():
    """The furthest tap of the last channel, read to its m-th element and A_TAPS_SLACK past
    it, must lie in A; the taps divide k, none negative, their elements contiguous."""
    def module(size: int, taps: str, k: int = 18, a1: int = 1):
        text = f"""
        func.func @f(%a: memref<{size}xf32>, %b: memref<{2 * k}xf32>, %c: memref<20xf32>) {{
          kernel.gemm %a, %b, %c {{batch = 1 : i64, m = 10 : i64, n = 2 : i64, k = {k} : i64,
            a_strides = array<i64: 0, {a1}, 36>, b_strides = array<i64: 0, 1, {k}>,
            c_batch_stride = 20 : i64, accumulate = false, a_taps = array<i64: {taps}>}}
            : memref<{size}xf32>, memref<{2 * k}xf32>, memref<20xf32>
          func.return
        }}"""
        ctx = Context()
        for dialect in (builtin.Builtin, func.Func, Kernel):
            ctx.load_dialect(dialect)
        return Parser(ctx, text).parse_module()

    # 2 channels of 6 x 6, 3 x 3 taps (the furthest first): the last channel's furthest tap
    # starts at 36 + 14 = 50 and is read to 59, and the slack past it
    taps = "14, 0, 1, 2, 6, 7, 8, 12, 13"
    last = 59 + A_TAPS_SLACK
    module(last + 1, taps).verify()
    with pytest.raises(VerifyException, match=f"a is read up to element {last}, past its "
                                              f"{last}"):
        module(last, taps).verify()
    with pytest.raises(VerifyException, match="9 taps \\(a_taps\\) must divide k = 16"):
        module(last + 1, taps, k=16).verify()
    with pytest.raises(VerifyException, match="non-negative"):
        module(last + 1, "14, 0, 1, 2, 6, 7, 8, 12, -1").verify()
    with pytest.raises(VerifyException, match="contiguous"):
        module(200, taps, a1=2).verify()


def test_windows_on_the_emulated_gpu_and_the_interpreter():
    """The GPU's tiled kernel reads a window's columns as the interpreter does."""
    from test_gpu import run_gemm

    spec = GemmSpec("f32", 2, 7 * 4, 5, 2 * 3 * 3, (2 * 9 * 7, 1, 9 * 7), (0, 1, 18), 5 * 28,
                    False, a_taps=tuple(i * 7 + j for i in range(3) for j in range(3))[::-1])
    got, expected = run_gemm(spec, tile=4)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("image_group", [0, 2])
def test_a_convolution_over_windows_interprets_to_the_traces_values(monkeypatch, image_group):
    """tape-to-loops{window_convs}: a stride-1 convolution becomes the copy into a padded
    buffer, one kernel.gemm over its windows (a group of images at a time with
    `image_group`) and the copy of the output's columns; interpreted, the trace's values (a
    small convolution the interpreter runs in seconds, with the size thresholds off)."""
    monkeypatch.setattr(convolutions, "WINDOW_WIDENING", 2.0)
    monkeypatch.setattr(convolutions, "WINDOW_BYTES", 0)
    monkeypatch.setattr(convolutions, "WINDOW_DEPTH", 0)
    rng = np.random.default_rng(5)
    w = rng.standard_normal((3, 2, 3, 3))
    x = rng.standard_normal((4, 2, 6, 7))
    specs, got, expected = lowered_convolution(w, x, 1, image_group=image_group,
                                               window_convs=True)
    assert [s.a_taps for s in specs] == [tuple(i * 9 + j for i in range(3) for j in range(3))]
    assert specs[0].batch == (image_group or 4)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_which_convolutions_take_the_windows():
    """At most WINDOW_ROWS output channels, a phase's rows at most WINDOW_WIDENING wider than
    the output's (or 1 + WINDOW_WIDENING_OUTPUTS / the output channels, where more), k of
    WINDOW_DEPTH or more, an im2col matrix of WINDOW_BYTES or more, no residual in the
    epilogue: the windows, at any stride; anything else, the im2col matrix."""
    geo = convolutions._ConvGeometry
    params = {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1}
    fits = convolutions._windows_fit
    assert fits(geo(1, 16, 55, 55, 64, 16, 3, 3, 55, 55, 1, params), None)
    wide = convolutions.WINDOW_ROWS + 1
    assert not fits(geo(1, 16, 55, 55, wide, 16, 3, 3, 55, 55, 1, params), None)
    assert not fits(geo(1, 64, 13, 13, 64, 64, 3, 3, 13, 13, 1, params), None)  # 15 / 13
    assert fits(geo(64, 16, 14, 14, 32, 16, 3, 3, 14, 14, 1, params), None)  # W4's: 16 / 14,
    # 110 KB, few output channels
    assert not fits(geo(8, 32, 14, 14, 64, 32, 3, 3, 14, 14, 1, params), None)  # 16 / 14, 64
    assert fits(geo(1, 128, 28, 28, 128, 128, 3, 3, 28, 28, 1, params), None)  # 30 / 28
    strided = dict(params, stride=(2, 2))  # phases of 29 x 29 for 28 x 28
    assert fits(geo(1, 16, 55, 55, 64, 16, 3, 3, 28, 28, 1, strided), None)
    assert not fits(geo(1, 256, 13, 13, 64, 256, 3, 3, 7, 7, 1, strided), None)  # 8 / 7
    assert not fits(geo(64, 1, 28, 28, 16, 1, 3, 3, 28, 28, 1, params), None)  # 28 KB
    assert not fits(geo(1, 3, 224, 224, 64, 3, 3, 3, 111, 111, 1, strided), None)  # k = 27
    residual = Epilogue(bias=None, kind="", relu=False, residual=object())
    assert not fits(geo(1, 16, 55, 55, 64, 16, 3, 3, 55, 55, 1, params), residual)


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("batch,pad,dilation,stride,relu", [
    (1, 1, 1, 1, True), (3, 2, 2, 1, False), (2, (0, 2), 1, 1, True),
    (2, 1, 1, 2, True), (1, (3, 1), (1, 2), (2, 3), False)])
def test_compiled_convolutions_over_windows(monkeypatch, threads, batch, pad, dilation,
                                            stride, relu):
    """A compiled convolution (bias and relu folded in, or not; padding on one side only;
    strided, its input split into phases) through the windows: the interpreter's values, NaN
    and inf where they reach."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 8, 60, 150) if stride != 1 else (batch, 8, 30, 60))
    x = x.astype(np.float32)
    x[0, 1, 3, 4], x[-1, 2, 10, 59], x[0, 4, 29, 0] = np.nan, np.inf, -np.inf
    w = rng.standard_normal((20, 8, 3, 3)).astype(np.float32)
    b = rng.standard_normal(20).astype(np.float32)

    def f(x, w, b):
        y = nn.conv2d(x, w, b, stride=stride, padding=pad, dilation=dilation)
        return tapeml.relu(y) if relu else y

    step = tapeml.jit(f)
    got = step(x, w, b)
    assert "a_taps" in step.lower(x, w, b)["loops"]
    expected = tapeml.trace(f, x, w, b)(x, w, b)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)
    assert np.array_equal(np.isnan(got), np.isnan(expected))


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_deep_convolution_of_few_channels_over_windows(monkeypatch, threads):
    """64 -> 16 channels over 14 x 14 (its rows 16 / 14 wider, allowed by its few output
    channels: WINDOW_WIDENING_OUTPUTS): k = 576, more than a packed block of k elsewhere, all
    of it in one block over the windows; the interpreter's values, NaN and inf where they
    reach."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 64, 14, 14)).astype(np.float32)
    x[0, 5, 3, 4], x[-1, 60, 13, 13] = np.nan, np.inf
    w = (0.1 * rng.standard_normal((16, 64, 3, 3))).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)

    def f(x, w, b):
        return tapeml.relu(nn.conv2d(x, w, b, padding=1))

    step = tapeml.jit(f)
    got = step(x, w, b)
    assert "a_taps" in step.lower(x, w, b)["loops"]
    expected = tapeml.trace(f, x, w, b)(x, w, b)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)
    assert np.array_equal(np.isnan(got), np.isnan(expected))
