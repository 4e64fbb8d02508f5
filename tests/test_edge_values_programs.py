"""Edge values through whole programs on every stage: the generated programs of the naturality
tests (test_naturality.py's strategy) fed edge values, and gradient programs at ties, NaN and
infinities (max pooling's backward, grouped convolutions with padding, the max reduction,
maximum, relu), each against the interpreter or a reference, through the tolerance table.

`make test` runs a few generated programs, derandomized (the same ones every run);
TAPEML_FUZZ_EXAMPLES=N (`make fuzz`) runs N random ones."""

from __future__ import annotations

import os

import numpy as np
import pytest
import reference as ref
from bits import assert_same_bits, assert_within
from edge_values import (
    DTYPES,
    INF,
    KIND,
    NAN,
    STAGES,
    edge_values,
    maxpool2d,
    maxpool2d_backward,
    run_interp,
    traced,
    zero_padded,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_edge_values import Case, check, stages_for
from test_naturality import generated_program
from tolerances import tolerance

import tapeml
from tapeml import nn, ops

FUZZ = int(os.environ.get("TAPEML_FUZZ_EXAMPLES", "0"))
SETTINGS = settings(max_examples=FUZZ or 6, deadline=None, derandomize=not FUZZ,
                    suppress_health_check=[HealthCheck.too_slow])

PROGRAM_STAGES = ["eager", "loops", "outlined", "cpu-fused-t1", "cpu-unfused-t1",
                  "cpu-fused-t2", "gpu-fused"]
"""The stages a generated program runs on, against the interpreter (gpu-fused on small ones)."""

REORDERED = {"tape.sum", "tape.matmul", "tape.fold", "tape.conv2d", "tape.softmax",
             "tape.softmax_backward", "tape.layer_norm", "tape.layer_norm_backward"}
"""Ops whose sums a stage may add in another order or precision (a softmax's and a layer
norm's row sums in f64 partials; a softmax's exp as the elementwise exp computes it)."""
INEXACT = REORDERED | {"tape.exp", "tape.log", "tape.tanh", "tape.sigmoid", "tape.pow"}


def edge_pool(dtype, largest: bool) -> np.ndarray:
    """The edge values a generated program's inputs are drawn from; without the largest finite
    values where the program sums (a sum of max, max and -max overflows in one order, not in
    another: see test_f32_partial_sums_that_overflow_are_inf_as_in_numpy)."""
    fi = np.finfo(dtype)
    values = [NAN, INF, -INF, 0.0, -0.0, fi.smallest_subnormal, -fi.smallest_subnormal,
              np.nextafter(fi.smallest_normal, dtype(0)), 1.0, -1.0]
    return np.array(values + ([fi.max, -fi.max] if largest else []), dtype)


def with_edge_values(inputs, seed: int, largest: bool) -> list[np.ndarray]:
    """The inputs with about half their elements replaced by edge values."""
    rng = np.random.default_rng(seed)
    out = []
    for x in inputs:
        x = x.copy()
        pool = edge_pool(x.dtype.type, largest)
        mask = rng.random(x.shape) < 0.5
        x[mask] = pool[rng.integers(0, len(pool), size=x.shape)][mask]
        out.append(x)
    return out


def compare_program(fn, inputs, stage: str, row: str) -> None:
    expected = run_interp(fn, inputs)
    got = STAGES[stage](fn, inputs)
    dtype = inputs[0].dtype
    tol = tolerance(row, KIND[stage], dtype)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        context = f"{row} on {stage}, result {i}, inputs {[x.tolist() for x in inputs]}"
        if tol.bitwise or e.dtype.kind != "f":
            assert_same_bits(g, e, context=context)
        else:
            assert_within(g, e, tol.rtol * np.abs(e.astype(np.float64)) + tol.atol,
                          context=context)


@SETTINGS
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_generated_programs_on_edge_values(data, dtype):
    fn, inputs = generated_program(data, dtype, max_dim=3, max_steps=5)
    names = {op.name for op in traced(fn, inputs).function.body.ops}
    inputs = with_edge_values(inputs, data.draw(st.integers(0, 2**32 - 1)),
                              largest=not names & REORDERED)
    row = "program" if names & INEXACT else "program-exact"
    for stage in PROGRAM_STAGES:
        compare_program(fn, inputs, stage, row)


# ----------------------------------------------------------------------------------------------
# Gradient programs at edge values


def _pool_loss(x, w):
    return ops.sum(nn.max_pool2d(x, 3, 2, 1) * w)


def _grad_cases(dt) -> list[Case]:
    # windows of 3 with stride 2 overlap; a NaN, ties of -0 and +0, a window of -inf and padding
    x = np.array([[NAN, 1.0, 0.0, -0.0], [1.0, 1.0, -0.0, 0.0], [-INF, -INF, 2.0, 2.0],
                  [-INF, -INF, 2.0, -INF]], dt)[None, None]
    w = np.array([[1.0, 2.0], [-3.0, 0.5]], dt)[None, None]
    cases = [Case("maxpool-grad", tapeml.grad(_pool_loss), (x, w),
                  lambda x, w: (maxpool2d_backward(x, w, (3, 3), (2, 2), (1, 1, 1, 1)),),
                  "maxpool2d_backward",
                  lambda x, w: (maxpool2d_backward(np.abs(x), np.abs(w), (3, 3), (2, 2),
                                                   (1, 1, 1, 1)),))]
    # the forward idioms, raised to tape.maxpool2d / tape.avgpool2d by tape-fuse
    cases.append(Case("maxpool-idiom", lambda x: nn.max_pool2d(x, 3, 2, 1), (x,),
                      lambda x: (maxpool2d(x, (3, 3), (2, 2), (1, 1, 1, 1)),), "maxpool2d"))
    cases.append(Case("avgpool-idiom", lambda x: nn.avg_pool2d(x, 2, 1, 1), (x,),
                      lambda x: (ref.avgpool2d(x, (2, 2), (1, 1), (1, 1, 1, 1)),), "avgpool2d",
                      lambda x: (ref.avgpool2d(np.abs(x), (2, 2), (1, 1), (1, 1, 1, 1)),)))
    # a convolution and its gradients, raised to tape.conv2d and its two backward ops
    v = edge_values(dt)
    cases.append(Case("conv-grad", tapeml.value_and_grad(
        lambda x, w, c: ops.sum(nn.conv2d(x, w, padding=1) * c), argnums=(0, 1)),
        (v[[4, 5, 6, 7, 13, 14, 15, 16, 17]].reshape(1, 1, 3, 3).copy(),  # +-0, +-tiny, ...
         np.array([[[[1.0, -0.5], [0.0, 2.0]]]], dt),
         np.array([[1.0, 1.0, 1.0, 1.0], [1.0, INF, -1.0, 1.0], [0.5, 1.0, 1.0, -0.0],
                   [1.0, 1.0, 2.0, 1.0]], dt)[None, None]),
        None, "conv2d"))
    ones, inf = np.ones((1, 2, 1, 1), dt), np.full((2, 1, 1, 1), INF, dt)
    padded = zero_padded(ones, (1, 1, 1, 1))
    cases.append(Case("conv-grouped-padding", lambda x, w: nn.conv2d(x, w, padding=1, groups=2),
                      (ones, inf), lambda x, w: (ref.conv2d(padded, w, (1, 1), (0, 0, 0, 0),
                                                            (1, 1), 2),),
                      "conv2d", lambda x, w: (np.full((1, 2, 3, 3), INF),)))
    # the weight's gradient reads the padding too: 0 * inf where the cotangent is infinite
    c = np.array([[1.0, INF, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, -1.0]], dt)
    c = np.stack([c, c[::-1]])[None]
    cases.append(Case("conv-grouped-padding-grad", tapeml.grad(
        lambda x, w, c: ops.sum(nn.conv2d(x, w, padding=1, groups=2) * c), argnums=(0, 1)),
        (ones * 2, np.ones((2, 1, 1, 1), dt), c), None, "conv2d"))
    ties = np.array([[-0.0, 0.0, -1.0], [NAN, 1.0, 1.0], [2.0, 2.0, 2.0], [-INF, -INF, 0.5]], dt)
    ct = np.array([1.0, -2.0, 3.0, INF], dt)
    cases.append(Case("max-grad", tapeml.grad(lambda x, c: ops.sum(ops.max(x, axis=1) * c)),
                      (ties, ct), None, "sum"))
    a, b = np.array([-0.0, 0.0, NAN, 1.0, INF, -INF], dt), np.array([0.0, -0.0, 1.0, 1.0,
                                                                     INF, 3.0], dt)
    cases.append(Case("maximum-minimum-relu-grad", tapeml.grad(
        lambda a, b: ops.sum(ops.maximum(a, b) * 3.0 + ops.minimum(a, b) + ops.relu(a) * 5.0
                             + ops.abs(b) * 7.0), argnums=(0, 1)), (a, b), None, "sum"))
    return cases


GRAD_CASES = {(np.float32, case.name): case for case in _grad_cases(np.float32)}
"""In f32 only (each op's edge values are checked in both dtypes in test_edge_values.py)."""


@pytest.mark.parametrize(("dtype", "name", "stage"), [
    pytest.param(dt, name, stage, id=f"{name}-{np.dtype(dt)}-{stage}")
    for (dt, name), case in GRAD_CASES.items() for stage in stages_for(case)
    if stage != "gpu-unfused"])  # the unfused ops are each on the GPU in test_edge_values.py
def test_gradient_programs_on_edge_values(dtype, name, stage):
    check(GRAD_CASES[(dtype, name)], stage, dtype)


def test_the_gradient_cases_reach_the_fused_ops():
    """What the cases above are for: the fused max-pool backward, the grouped convolution."""
    pool = GRAD_CASES[(np.float32, "maxpool-grad")]
    assert "tape.maxpool2d_backward" in tapeml.jit(pool.fn).lower(*pool.inputs)["fused tape"]
    conv = GRAD_CASES[(np.float32, "conv-grouped-padding")]
    fused = tapeml.jit(conv.fn).lower(*conv.inputs)["fused tape"]
    assert "tape.conv2d" in fused and "groups = 2" in fused
    conv = GRAD_CASES[(np.float32, "conv-grad")]
    fused = tapeml.jit(conv.fn).lower(*conv.inputs)["fused tape"]
    assert "tape.conv2d_backward_input" in fused and "tape.conv2d_backward_weight" in fused
    for name, op in [("maxpool-idiom", "tape.maxpool2d "), ("avgpool-idiom", "tape.avgpool2d ")]:
        case = GRAD_CASES[(np.float32, name)]
        assert op in tapeml.jit(case.fn).lower(*case.inputs)["fused tape"]


SUMS_IN_F64 = (
    "issue 15: f32 sums are accumulated in f64 on the loops, the CPU and the GPU, in f32 by "
    "numpy: where an f32 partial sum overflows, the interpreter gives inf and the others a "
    "finite sum (the README says they 'agree within rounding')")


@pytest.mark.parametrize("stage", [
    pytest.param(s, marks=[] if s in ("eager", "interp") else
                 [pytest.mark.xfail(strict=True, reason=SUMS_IN_F64)]) for s in STAGES])
def test_f32_partial_sums_that_overflow_are_inf_as_in_numpy(stage):
    """max + max - max in f32: numpy (the interpreter) overflows at the first addition and gives
    inf; a sum accumulated in f64 gives max."""
    big = np.finfo(np.float32).max
    x = np.array([big, big, -big], np.float32)
    assert_same_bits(STAGES[stage](ops.sum, (x,))[0], np.float32(INF), context=stage)
