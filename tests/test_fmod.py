"""tape.fmod, dialect to backend: C's fmod (numpy's np.fmod) on f32/f64, exact, with the sign of
the dividend; fmod(x, +-0) and fmod(+-inf, y) are NaN, fmod(x, +-inf) is x for finite x,
fmod(+-0, y) is +-0, NaN propagates. Every stage (the interpreter, the CPU at 1 and 2 threads,
the emulated GPU) must give numpy's bits; the PTX (libdevice's __nv_fmod[f], not NVPTX's inexact
x - trunc(x/y)*y expansion of frem) must assemble with ptxas. The pullback (d/da = 1,
d/db = -trunc(a/b) of the exact quotient) is checked by finite differences in f64."""

from __future__ import annotations

import os
import shutil
import subprocess
from fractions import Fraction
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tapeml
from tapeml.codegen import get_backend
from tapeml.dialects import tape
from tapeml.frontend.flops import op_flops
from tapeml.interpreters.tape import evaluate
from tapeml.transforms.differentiate import differentiate
from tapeml.transforms.fuse import fuse

TYPES = {np.float32: "f32", np.float64: "f64"}
FLOATS = (np.float32, np.float64)
needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")


def _t(shape, dtype) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{TYPES[dtype]}>"


def _program(args, lines, results) -> tapeml.Program:
    signature = ", ".join(f"%{n}: {t}" for n, t in args)
    types = ", ".join(t for _, t in results)
    body = "\n".join(f"  {line}" for line in lines)
    return tapeml.Program.parse(
        f"func.func @f({signature}) -> ({types}) {{\n{body}\n"
        f"  func.return {', '.join('%' + n for n, _ in results)} : {types}\n}}")


def _fmod_program(shape, dtype) -> tapeml.Program:
    t = _t(shape, dtype)
    return _program([("a", t), ("b", t)], [f"%r = tape.fmod %a, %b : {t}"], [("r", t)])


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(*a.shape, a.dtype.itemsize) if a.ndim else a.view(np.uint8)


def _same_bits(got, expected, context="") -> None:
    got = np.asarray(got)
    assert got.dtype == expected.dtype and got.shape == expected.shape, (context, got, expected)
    assert np.array_equal(_bits(got), _bits(expected)), (context, got, expected)


def _np_fmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.fmod(a, b)


STAGES = ("cpu-1", "cpu-2", "gpu-emulated")


def _compile(program: tapeml.Program, stage: str):
    """A callable running `program` on `stage` (the CPU's thread count set around both the
    compilation and each call)."""
    if stage == "gpu-emulated":
        return get_backend("cuda", emulate=True).compile(program.module)
    threads = stage.removeprefix("cpu-")
    with mock.patch.dict(os.environ, {"TAPEML_NUM_THREADS": threads}):
        compiled = get_backend("cpu").compile(program.module)

    def run(*args):
        with mock.patch.dict(os.environ, {"TAPEML_NUM_THREADS": threads}):
            return compiled(*args)

    return run


def _every_stage_agrees(program: tapeml.Program, *args: np.ndarray, compiled=None) -> list:
    expected = tapeml.interpret(program.module, program.name, *args)
    for stage in STAGES:
        run = compiled[stage] if compiled else _compile(program, stage)
        got = run(*args)
        assert len(got) == len(expected)
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            _same_bits(g, e, f"{stage}, result {i}")
    return expected


def _edge_values(dtype) -> np.ndarray:
    info = np.finfo(dtype)
    big = float(info.max)
    tiny, sub = float(info.tiny), float(info.smallest_subnormal)
    return np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -3.0, 2.5,
                     7.0, -7.25, 0.1, -0.3, 1e30, -1e30, 1e-30, big, -big, tiny, -tiny, sub,
                     -sub, 3 * sub, float(np.nextafter(dtype(1), dtype(2))), 2.0 ** 60 + 2 ** 40,
                     -(2.0 ** 23) - 1], dtype)


def _grid(dtype) -> tuple[np.ndarray, np.ndarray]:
    """Every edge value against every edge value (negative divisors, huge and tiny ratios)."""
    v = _edge_values(dtype)
    a, b = np.meshgrid(v, v, indexing="ij")
    return a.reshape(-1).copy(), b.reshape(-1).copy()


# ----------------------------------------------------------------------------------------------
# Semantics


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: TYPES[d])
def test_the_edge_cases_are_cs_fmod(dtype):
    f = dtype
    nan, inf = np.nan, np.inf
    a = np.array([5.5, -5.5, 5.5, -5.5, 1.0, inf, -inf, 3.0, -3.0, 0.0, -0.0, -0.0, nan, 1.0,
                  1e30 if f == np.float64 else 1e20, 0.3], f)
    b = np.array([2.0, 2.0, -2.0, -2.0, 0.0, 2.0, 1.0, inf, -inf, 3.0, 3.0, -inf, 1.0, nan,
                  7.0, 0.1], f)
    got = evaluate(tape.FmodOp, a, b)
    _same_bits(got, _np_fmod(a, b))
    assert got.dtype == f
    assert np.array_equal(got[:4], [1.5, -1.5, 1.5, -1.5])  # the sign of the dividend
    assert np.isnan(got[4:7]).all() and np.isnan(got[12:14]).all()
    assert np.array_equal(got[7:9], [3.0, -3.0])  # x fmod inf is x
    assert np.array_equal(got[9:12], [0.0, -0.0, -0.0]) and list(np.signbit(got[9:12])) == [
        False, True, True]
    # exact: a - trunc(a / b) * b in rational arithmetic, representable, so no rounding
    for x, y, r in zip(a[[0, 1, 14, 15]], b[[0, 1, 14, 15]], got[[0, 1, 14, 15]], strict=True):
        x, y = Fraction(float(x)), Fraction(float(y))
        n = abs(x / y).__floor__() * (1 if x / y > 0 else -1)
        assert Fraction(float(r)) == x - n * y


def _floats(dtype):
    width = 32 if dtype == np.float32 else 64
    special = st.sampled_from(list(_edge_values(dtype)))
    return st.one_of(st.floats(width=width), st.floats(width=width, min_value=-2.0 ** -116,
                                                        max_value=2.0 ** -116), special)


@settings(max_examples=80, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(FLOATS))
def test_the_semantics_is_numpys(data, dtype):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, max_side=4))
    a = data.draw(hnp.arrays(dtype, shape, elements=_floats(dtype)))
    b = data.draw(hnp.arrays(dtype, shape, elements=_floats(dtype)))
    _same_bits(evaluate(tape.FmodOp, a, b), _np_fmod(a, b))


# ----------------------------------------------------------------------------------------------
# Every stage


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: TYPES[d])
def test_every_stage_gives_numpys_bits_on_the_edge_grid(dtype):
    a, b = _grid(dtype)
    (expected,) = _every_stage_agrees(_fmod_program(a.shape, dtype), a, b)
    _same_bits(expected, _np_fmod(a, b))


_COMPILED: dict = {}
_N = 24


def _compiled(dtype):
    if dtype not in _COMPILED:
        program = _fmod_program((_N,), dtype)
        _COMPILED[dtype] = program, {s: _compile(program, s) for s in STAGES}
    return _COMPILED[dtype]


@settings(max_examples=25, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(FLOATS))
def test_every_stage_gives_numpys_bits(data, dtype):
    """Drawn values (NaN, +-inf, +-0, subnormals, huge and tiny ratios, both signs) on one
    compiled program per type."""
    a = data.draw(hnp.arrays(dtype, (_N,), elements=_floats(dtype)))
    b = data.draw(hnp.arrays(dtype, (_N,), elements=_floats(dtype)))
    program, compiled = _compiled(dtype)
    (expected,) = _every_stage_agrees(program, a, b, compiled=compiled)
    _same_bits(expected, _np_fmod(a, b))


@needs_ptxas
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: TYPES[d])
def test_the_ptx_calls_libdevices_fmod_and_assembles(dtype, tmp_path):
    program = _fmod_program((6,), dtype)
    try:
        stages = get_backend("cuda", arch="sm_90").compile(program.module, stages=True).stages
    except Exception as error:  # no libdevice here
        if "libdevice" in str(error):
            pytest.skip(str(error))
        raise
    (tmp_path / "k.ptx").write_text(stages["ptx"])
    subprocess.run(["ptxas", "--gpu-name", "sm_90", str(tmp_path / "k.ptx"), "-o",
                    str(tmp_path / "k.cubin")], check=True)
    text = "\n".join(v for k, v in stages.items() if isinstance(v, str) and k != "ptx")
    assert f"__nv_fmod{'f' if dtype == np.float32 else ''}" in text, list(stages)


def test_the_gpu_lowers_frem_to_libdevice_and_the_cpu_to_libm():
    from xdsl.dialects import llvm

    from tapeml.transforms.gpu_to_nvvm import LIBDEVICE

    assert LIBDEVICE[llvm.FRemOp] == "fmod"
    stages = get_backend("cpu").compile(_fmod_program((6,), np.float32).module,
                                        stages=True).stages
    assert "frem float" in stages["llvm ir"]
    assert "fmodf" in stages["assembly"]  # x86 has no remainder instruction: libm's fmodf


def test_fmod_joins_a_fused_chain():
    """fmod(a * b, c) + a: one tape.fused group, with the interpreter's bits at every stage."""
    t = _t((4, 5), np.float64)
    lines = [f"%m = tape.mul %a, %b : {t}", f"%r = tape.fmod %m, %c : {t}",
             f"%y = tape.add %r, %a : {t}"]
    program = _program([("a", t), ("b", t), ("c", t)], lines, [("y", t)])
    rng = np.random.default_rng(0)
    a, b, c = rng.normal(0, 4, (3, 4, 5))
    c[0, :3] = [0.0, -np.inf, -0.5]
    expected = tapeml.interpret(program.module, program.name, a, b, c)
    _same_bits(expected[0], _np_fmod(a * b, c) + a)
    fuse(program.module)
    ops = [op.name for op in program.function.body.ops]
    assert ops == ["tape.fused", "func.return"], ops
    body = [op.name for op in program.function.body.ops.first.walk()]
    assert "tape.fmod" in body, body
    _same_bits(tapeml.interpret(program.module, program.name, a, b, c)[0], expected[0])
    _every_stage_agrees(program, a, b, c)


def test_fmod_is_one_flop_per_element():
    program = _fmod_program((3, 7), np.float32)
    (op,) = [op for op in program.function.body.ops if isinstance(op, tape.FmodOp)]
    assert op_flops(op) == 21


# ----------------------------------------------------------------------------------------------
# Pullback


def _gradients(a, b, w):
    """(d/da, d/db) of sum(fmod(a, b) * w) by tape-differentiate, and the loss as a function."""
    t = _t(a.shape, np.float64)
    axes = ", ".join(map(str, range(a.ndim)))
    body = [f"%y = tape.fmod %a, %b : {t}", f"%p = tape.mul %y, %w : {t}",
            f"%l = tape.sum %p axes = [{axes}] : {t} -> tensor<f64>"]
    args = [("a", t), ("b", t), ("w", t)]
    forward = _program(args, body, [("l", "tensor<f64>")])
    grad = _program(args, body, [("l", "tensor<f64>")])
    differentiate(grad.function, wrt=(0, 1))
    _, da, db = tapeml.interpret(grad.module, grad.name, a, b, w)
    return da, db, lambda a, b: tapeml.interpret(forward.module, forward.name, a, b, w)[0]


def test_the_pullback_matches_finite_differences():
    rng = np.random.default_rng(3)
    a = rng.uniform(-20, 20, (3, 4))
    b = rng.choice([-1.0, 1.0], (3, 4)) * rng.uniform(0.5, 4, (3, 4))
    q = np.abs(a / b)
    a = np.where(np.abs(q - np.round(q)) < 0.05, a + 0.3 * b, a)  # away from the jumps
    w = rng.normal(0, 1, (3, 4))
    da, db, loss = _gradients(a, b, w)
    np.testing.assert_array_equal(da, w)
    np.testing.assert_array_equal(db, -w * np.trunc(a / b))
    eps = 1e-6
    for x, d, which in ((a, da, 0), (b, db, 1)):
        numeric = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            step = np.zeros_like(x)
            step[i] = eps
            up = loss(a + step, b) if which == 0 else loss(a, b + step)
            down = loss(a - step, b) if which == 0 else loss(a, b - step)
            numeric[i] = (up - down) / (2 * eps)
        np.testing.assert_allclose(d, numeric, rtol=1e-6, atol=1e-6, err_msg=str(which))


def test_the_pullbacks_quotient_is_fmods_not_the_rounded_division():
    """a / b rounds up to 5.0 here while fmod's exact quotient is 4 (fmod(a, b) ~ b): d/db is
    -4, as finite differences give."""
    a = np.array([1.988514052614398, 7.0, 3.0])
    b = np.array([0.39770281052287965, np.inf, -2.0])
    w = np.array([1.0, 2.0, 3.0])
    assert a[0] / b[0] == 5.0 and _np_fmod(a, b)[0] > 0.39
    da, db, _ = _gradients(a, b, w)
    np.testing.assert_array_equal(da, w)
    np.testing.assert_array_equal(db, [-4.0, -0.0, 3.0])  # -1 * 3 * trunc(3 / -2) = 3


@pytest.mark.parametrize("dtype", [np.int32, np.int64], ids=["i32", "i64"])
def test_fmod_of_integers_is_numpys_at_every_stage(dtype):
    """tapeml.fmod of integers is numpy's (the sign of the dividend, x fmod 0 = 0, INT_MIN fmod
    -1 = 0), in the integers' dtype at every stage: it was computed in float64 (a float64
    result, wrong past 2**53: fmod(2**53 + 1, 2) gave 0)."""
    from edge_values import STAGES

    info = np.iinfo(dtype)
    values = np.array([0, 1, -1, 2, -2, 3, -3, 7, -7, 10, info.max, info.min, info.max - 1,
                       info.min + 1, *([2**53 + 1, -(2**62) - 1] if dtype == np.int64 else [])],
                      dtype)
    x, y = (v.reshape(-1) for v in np.meshgrid(values, values, indexing="ij"))
    with np.errstate(all="ignore"):
        expected = np.fmod(x, y)
    for stage, run in STAGES.items():
        (got,) = run(tapeml.fmod, (x, y))
        assert got.dtype == dtype and np.array_equal(got, expected), stage
    assert tapeml.fmod(x, 3).dtype == dtype and np.array_equal(tapeml.fmod(x, 3), np.fmod(x, 3))
