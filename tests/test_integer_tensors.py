"""i1, i32 and i64 tensors through every stage (issue 17, part 1: the ops that existed, on the new
element types; tracing integer arguments is the next part). The reference is numpy written
plainly; every backend must give the same bits."""

from __future__ import annotations

import os
import shutil
import subprocess
from unittest import mock

import numpy as np
import pytest
from real_gpu import GPU, run_on_gpu

import tapeml
from tapeml.codegen import get_backend

PROGRAM = """
func.func @f(%a: tensor<5xi32>, %b: tensor<5xi32>, %x: tensor<5xf32>, %m: tensor<2x3xi64>)
    -> (tensor<5xi32>, tensor<5xi32>, tensor<5xi1>, tensor<5xf32>, tensor<5xi64>, tensor<3xi64>,
        tensor<2xi64>, tensor<5xi32>, tensor<5xi1>, tensor<5xi32>, tensor<5xi32>) {
  %c = tape.add %a, %b : tensor<5xi32>
  %d = tape.maximum %c, %a : tensor<5xi32>
  %n = tape.neg %d : tensor<5xi32>
  %r = tape.relu %n : tensor<5xi32>
  %lt = tape.cmp lt, %a, %b : tensor<5xi32> -> tensor<5xi1>
  %s = tape.select %lt, %a, %b : tensor<5xi1>, tensor<5xi32>, tensor<5xi32> -> tensor<5xi32>
  %fi = tape.cast %a : tensor<5xi32> -> tensor<5xf32>
  %xi = tape.cast %x : tensor<5xf32> -> tensor<5xi64>
  %sum = tape.sum %m axes = [0] : tensor<2x3xi64> -> tensor<3xi64>
  %mx = tape.max %m axes = [1] : tensor<2x3xi64> -> tensor<2xi64>
  %bi = tape.cast %lt : tensor<5xi1> -> tensor<5xi32>
  %xb = tape.cast %x : tensor<5xf32> -> tensor<5xi1>
  %p = tape.mul %a, %b : tensor<5xi32>
  %w = tape.sub %p, %c : tensor<5xi32>
  func.return %r, %s, %lt, %fi, %xi, %sum, %mx, %bi, %xb, %p, %w
      : tensor<5xi32>, tensor<5xi32>, tensor<5xi1>, tensor<5xf32>, tensor<5xi64>, tensor<3xi64>,
        tensor<2xi64>, tensor<5xi32>, tensor<5xi1>, tensor<5xi32>, tensor<5xi32>
}
"""

I32 = np.iinfo(np.int32)
ARGS = (np.array([1, I32.max, -5, I32.min, 0], np.int32),
        np.array([1, 1, 2, -1, 0], np.int32),
        np.array([np.nan, 3e19, -2.7, 2.7, -3e19], np.float32),
        np.array([[2**62, 5, -3], [2**62, -7, 9]], np.int64))


def _reference(a, b, x, m):
    """numpy, wrapping (its integer arrays do), with the one rule every stage defines:
    float to integer truncates, saturating, NaN to 0."""
    with np.errstate(over="ignore"):
        c = a + b
        d = np.maximum(c, a)
        r = np.maximum(-d, 0)
        lt = a < b
        xi = np.array([0, 2**63 - 1, -2, 2, -2**63], np.int64)
        return (r, np.where(lt, a, b), lt, a.astype(np.float32), xi, m.sum(0),
                m.max(1), lt.astype(np.int32), x != 0, a * b, a * b - c)


def _program():
    return tapeml.Program.parse(PROGRAM)


def _same(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape and np.array_equal(g, e), (g, e)


def test_the_interpreter_computes_numpy_semantics():
    program = _program()
    _same(tapeml.interpret(program.module, program.name, *ARGS), _reference(*ARGS))


@pytest.mark.parametrize("threads", ["1", "2"])
def test_the_cpu_agrees(threads):
    with mock.patch.dict(os.environ, {"TAPEML_NUM_THREADS": threads}):
        _same(get_backend("cpu").compile(_program().module)(*ARGS), _reference(*ARGS))


def test_the_emulated_gpu_agrees():
    _same(get_backend("cuda", emulate=True, gemm_tile=4).compile(_program().module)(*ARGS),
          _reference(*ARGS))
    if GPU:
        _same(run_on_gpu(_program().module, *ARGS), _reference(*ARGS))


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")
def test_the_ptx_assembles(tmp_path):
    stages = get_backend("cuda", arch="sm_90").compile(_program().module, stages=True).stages
    (tmp_path / "k.ptx").write_text(stages["ptx"])
    subprocess.run(["ptxas", "--gpu-name", "sm_90", str(tmp_path / "k.ptx"), "-o",
                    str(tmp_path / "k.cubin")], check=True)
    assert "cvt.rzi.s64.f32" in stages["ptx"]  # float to integer, saturating


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("target", [np.int32, np.int64])
def test_float_to_integer_saturates_and_nan_is_zero(dtype, target):
    info = np.iinfo(target)
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 2.9, -2.9, -0.0, float(info.max),
                  float(info.min)], dtype)
    expected = np.array([0, info.max, info.min, info.max, info.min, 2, -2, 0, info.max,
                         info.min], target)
    t = {np.float32: "f32", np.float64: "f64"}[dtype]
    i = {np.int32: "i32", np.int64: "i64"}[target]
    program = tapeml.Program.parse(
        f"func.func @f(%x: tensor<10x{t}>) -> tensor<10x{i}> {{\n"
        f"  %y = tape.cast %x : tensor<10x{t}> -> tensor<10x{i}>\n"
        f"  func.return %y : tensor<10x{i}>\n}}")
    for backend in (get_backend("interp"), get_backend("cpu"), get_backend("cuda", emulate=True)):
        (got,) = backend.compile(program.module)(x)
        assert got.dtype == target and np.array_equal(got, expected), (backend.name, got)


def _edge_ints(dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.array([0, 1, -1, 2, -2, 7, -7, 3, -3, info.max, info.min, info.max - 1,
                     info.min + 1, 31, 32, 63, 64, -64], dtype)


def _integer_op_program(name: str, t: str, unary: bool) -> tapeml.Program:
    n = 18 * 18
    if unary:
        return tapeml.Program.parse(
            f"func.func @f(%a: tensor<{n}x{t}>) -> tensor<{n}x{t}> {{\n"
            f"  %c = tape.{name} %a : tensor<{n}x{t}>\n  func.return %c : tensor<{n}x{t}>\n}}")
    return tapeml.Program.parse(
        f"func.func @f(%a: tensor<{n}x{t}>, %b: tensor<{n}x{t}>) -> tensor<{n}x{t}> {{\n"
        f"  %c = tape.{name} %a, %b : tensor<{n}x{t}>\n  func.return %c : tensor<{n}x{t}>\n}}")


INTEGER_OPS = {"floordiv": np.floor_divide, "rem": np.remainder, "and": np.bitwise_and,
               "or": np.bitwise_or, "xor": np.bitwise_xor, "shl": np.left_shift,
               "shr": np.right_shift, "not": np.invert}


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_], ids=["i32", "i64", "i1"])
@pytest.mark.parametrize("name", list(INTEGER_OPS))
def test_the_integer_ops_on_edge_values_at_every_stage(name, dtype):
    """Every pair of edge values (extremes, 0, +-1, shifts past the width and negative):
    numpy's results (division by 0 gives 0, INT_MIN // -1 wraps), bit for bit, on the
    interpreter, the CPU at 1 and 2 threads and the emulated GPU."""
    if dtype == np.bool_ and name in ("floordiv", "rem", "shl", "shr"):
        pytest.skip("integers only (the verifier refuses i1: test_shape_rules)")
    v = np.array([False, True]) if dtype == np.bool_ else _edge_ints(dtype)
    a, b = (x.reshape(-1) for x in np.meshgrid(v, v, indexing="ij"))
    a, b = np.resize(a, 18 * 18), np.resize(b, 18 * 18)
    unary = name == "not"
    with np.errstate(all="ignore"):
        expected = INTEGER_OPS[name](a) if unary else INTEGER_OPS[name](a, b)
    t = {np.int32: "i32", np.int64: "i64", np.bool_: "i1"}[dtype]
    program = _integer_op_program(name, t, unary)
    args = (a,) if unary else (a, b)
    (got,) = tapeml.interpret(program.module, program.name, *args)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)
    for threads in ("1", "2"):
        with mock.patch.dict(os.environ, {"TAPEML_NUM_THREADS": threads}):
            (got,) = get_backend("cpu").compile(program.module)(*args)
        assert np.array_equal(got, expected), (threads, a[got != expected], b[got != expected])
    (got,) = get_backend("cuda", emulate=True).compile(program.module)(*args)
    assert np.array_equal(got, expected)
    if GPU:
        (got,) = run_on_gpu(program.module, *args)
        assert np.array_equal(got, expected), (a[got != expected], b[got != expected])


@pytest.mark.parametrize("name", ["floordiv", "rem", "shl", "shr", "and", "not"])
def test_the_integer_ops_refuse_floats(name):
    with pytest.raises(tapeml.ShapeError, match=f"tape.{name}: .* must be a statically shaped "
                                                 "tensor of i"):
        _integer_op_program(name, "f32", name == "not")


def _integer_products(a, b, at, p, q):
    """Integer products as a user writes them: plain, an operand transposed (read in place by
    the lowering), batched, a vector, a bias and a relu after it (which fold into a float
    product's kernel: not into loops), booleans (numpy's or of ands)."""
    return a @ b, at.T @ b, tapeml.einsum("bij,bjk->bik", a[None] - 1, b[None] * 3), a @ b[:, 0], \
        tapeml.relu(at.T @ b + b[0]), p @ q


@pytest.mark.parametrize("dtype", [np.int32, np.int64], ids=["i32", "i64"])
def test_integer_matmul_at_every_stage(dtype):
    """An integer matmul on edge values (the extremes, whose products and sums wrap around),
    numpy's bits at every stage: the interpreter, the lowered loops, the CPU fused and not at
    1 and 2 threads (every parallel loop to the pool), the emulated GPU, and IREE (StableHLO's
    dot_general). Wide enough (19 columns) for a vector loop and its remainder; small, for
    the stages on xDSL's interpreter."""
    from edge_values import STAGES

    rng = np.random.default_rng(7)
    values = _edge_ints(dtype)
    a = rng.choice(values, (5, 7))
    b = rng.choice(values, (7, 19))
    p, q = rng.random((3, 7)) < 0.2, rng.random((7, 5)) < 0.2
    inputs = (a, b, np.ascontiguousarray(a.T), p, q)
    with np.errstate(over="ignore"):
        expected = [np.asarray(x) for x in _integer_products(*inputs)]
    assert expected[0].dtype == dtype and expected[-1].dtype == np.bool_
    runs = dict(STAGES)
    try:
        import iree.runtime  # noqa: F401
        runs["iree"] = lambda fn, xs: list(tapeml.jit(fn, backend="iree")(*xs))
    except ImportError:
        pass
    for stage, run in runs.items():
        got = run(_integer_products, inputs)
        for g, e in zip(got, expected, strict=True):
            assert g.dtype == e.dtype and np.array_equal(g, e), stage


def _padded_and_unfolded(ids, mask):
    """Padding token ids and masks, and windows over them, as a user writes them."""
    return (tapeml.pad(ids, ((0, 0), (2, 1))), tapeml.pad(ids, 1, -7),
            tapeml.pad(mask, ((1, 0), (0, 3)), True), tapeml.pad(ids, ((0, 0), (-1, 2))),
            tapeml.unfold(ids, (2,)), tapeml.unfold(mask, (3,), (2,)))


def test_pad_and_unfold_of_integers_and_booleans_at_every_stage():
    """pad and unfold move integers and booleans as they move floats (they refused them: a
    ShapeError, though the layout ops take any type), numpy's bits at every stage; a pad
    constant is converted to the array's dtype, an int that does not fit an OverflowError."""
    from edge_values import STAGES

    ids = _edge_ints(np.int64)[:12].reshape(2, 6)
    mask = np.array([[True, False, True, True, False, False]] * 2)
    windows = np.lib.stride_tricks.sliding_window_view
    expected = (np.pad(ids, ((0, 0), (2, 1))), np.pad(ids, 1, constant_values=-7),
                np.pad(mask, ((1, 0), (0, 3)), constant_values=True),
                np.pad(ids[:, 1:], ((0, 0), (0, 2))), windows(ids, 2, axis=-1),
                windows(mask, 3, axis=-1)[:, ::2])
    for stage, run in STAGES.items():
        for got, want in zip(run(_padded_and_unfolded, (ids, mask)), expected, strict=True):
            assert got.dtype == want.dtype and np.array_equal(got, want), stage
    with pytest.raises(OverflowError, match="pad: the Python integer 1099511627776 does not "
                                            "fit in int32"):
        tapeml.pad(ids.astype(np.int32), 1, 2**40)
