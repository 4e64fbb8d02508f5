"""tapeml.profile(): the stages of a first call, in order, with what each did."""

from __future__ import annotations

import numpy as np

import tapeml
from tapeml import nn
from tapeml.codegen.gemm import host_threads
from tapeml.profile import Stage


def loss(params, x, y):
    return nn.mse(nn.mlp(params, x, activation=tapeml.tanh), y)


def test_a_first_call_records_every_stage_in_order():
    rng = np.random.default_rng(0)
    params = nn.mlp_init(rng, [3, 4, 1])
    x, y = rng.random((5, 3), np.float32), rng.random((5, 1), np.float32)
    step = tapeml.jit(tapeml.value_and_grad(loss))
    with tapeml.profile() as stages:
        step(params, x, y)
    names = [s.name for s in stages]
    outlined = ["outline-parallel-loops"] if host_threads() > 1 else []  # the pool's share
    assert names == ["trace loss", "tape-differentiate", "trace loss", "tape-fuse",
                     "tape-to-loops", *outlined, "plan-arena", "merge-loop-nests",
                     "convert-scf-to-cf",
                     "convert-loops-to-llvm", "LLVM O2", "GEMM kernels",
                     "machine code (MCJIT)"]
    traced, differentiated = stages[0], stages[1]
    forward = len(tapeml.trace(loss, params, x, y).function.body.block.ops) - 1
    assert traced.ops == forward
    assert differentiated.ops > forward
    assert f"{differentiated.ops - forward} backward ops appended" in differentiated.detail
    assert all(s.seconds >= 0 for s in stages)
    assert "elementwise groups" in stages[3].detail and "peak" in stages[4].detail
    assert "one arena of" in stages[names.index("plan-arena")].detail
    gemm = stages[names.index("GEMM kernels")]  # the kernels, and how many shapes call them
    shapes = int(gemm.detail.split("called by ")[1].split()[0])
    assert 1 <= gemm.ops <= shapes and gemm.detail.endswith(("compiled", "loaded"))
    with tapeml.profile() as again:
        step(params, x, y)  # cached: nothing compiled, nothing recorded
    assert again == []


def test_nothing_is_recorded_outside_a_profile():
    with tapeml.profile() as outer:
        pass
    tapeml.trace(lambda x: x * 2.0, np.ones(3, np.float32))
    assert outer == []
    assert "12.5 ms" in str(Stage("x", 3, 0.0125)) and " ops" not in str(Stage("y", None, 0.1))
