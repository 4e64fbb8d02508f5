"""tapeml.profile(): the stages of a first call, in order, with what each did."""

from __future__ import annotations

import numpy as np
import pytest

import tapeml
from tapeml import nn
from tapeml.codegen.gemm import host_threads
from tapeml.profile import Stage
from tapeml.tracing.pytree import flatten
from tapeml.transforms.fuse import fuse


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
                     "tape-to-loops", *outlined, "plan-arena", "loop-bounds-as-arguments",
                     "shared code: declared", "merge-loop-nests", "convert-scf-to-cf",
                     "convert-loops-to-llvm", "LLVM O2", "GEMM kernels", "shared code",
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
    assert 1 <= gemm.ops <= shapes
    origins = gemm.detail.rsplit("; ", 1)[1].split(", ")  # e.g. "1 loaded, 2 compiled"
    assert sum(int(o.split(" ", 1)[0]) for o in origins) == gemm.ops
    assert {o.split(" ", 1)[1] for o in origins} <= {
        "compiled", "loaded", "compiled in a worker process"}  # (conftest: no disk cache)
    with tapeml.profile() as again:
        step(params, x, y)  # cached: nothing compiled, nothing recorded
    assert again == []


def test_the_iree_backend_records_its_stages():
    f = tapeml.jit(lambda x: tapeml.tanh(x) * 2.0, backend="iree")
    with tapeml.profile() as stages:
        f(np.ones(8, np.float32))
    assert [s.name for s in stages] == ["trace _lambda_", "tape-fuse", "StableHLO",
                                        "IREE compile", "IREE runtime: loaded"]
    assert stages[2].ops > 1 and "bytes of IREE module" in stages[3].detail


def test_nothing_is_recorded_outside_a_profile():
    with tapeml.profile() as outer:
        pass
    tapeml.trace(lambda x: x * 2.0, np.ones(3, np.float32))
    assert outer == []
    assert "12.5 ms" in str(Stage("x", 3, 0.0125)) and " ops" not in str(Stage("y", None, 0.1))


def test_a_run_profile_times_every_op_of_the_compiled_program():
    """Jitted.profile: a row per tape op that has loops (the fused program's, in order; none
    for a view: a reshape, a transpose a matmul reads in place), and one for copying results
    out; each ran once per call; the marked time lies within the call's; the cache is left as
    it was."""
    rng = np.random.default_rng(0)
    params = nn.mlp_init(rng, [3, 4, 1])
    x, y = rng.random((5, 3), np.float32), rng.random((5, 1), np.float32)
    step = tapeml.jit(tapeml.value_and_grad(loss))
    report = step.profile(params, x, y, repeat=3)
    assert step.cache == {} and step.explain() == "not compiled yet"
    module = tapeml.trace(tapeml.value_and_grad(loss), params, x, y).module.clone()
    fuse(module)
    body = next(op for op in module.ops if op.name == "func.func").body.block
    names = [op.name for op in body.ops if op.name != "func.return"]
    labels = [row.label for row in report.rows]
    assert labels[-1] == "results copied to the caller's buffers"
    rows = [label.split(" ")[0].split("(")[0] for label in labels[:-1]]
    at = 0
    for name in names:  # in order; only views go without a row
        if at < len(rows) and rows[at] == name:
            at += 1
        else:
            assert name in ("tape.reshape", "tape.permute"), name
    assert at == len(rows)
    assert "tape.matmul 5x3, 3x4 -> 5x4 f32" in labels
    assert all(row.calls == 3 and row.seconds >= 0 for row in report.rows)
    assert sum(row.seconds for row in report.rows) <= report.seconds
    text = str(report)
    assert text.startswith(f"{report.seconds * 1e3:.3f} ms per call")
    row = next(line for line in text.splitlines() if "tape.matmul 5x3, 3x4" in line)
    assert f"#{labels.index('tape.matmul 5x3, 3x4 -> 5x4 f32')} " in row and " us " in row


def test_a_profiled_program_computes_what_the_program_does():
    """The marks compute nothing: the same bits as the program compiled without them, and
    the interpreter's loops stage runs them (as nothing)."""
    from tapeml.codegen.cpu import CPUBackend

    rng = np.random.default_rng(1)
    params = nn.mlp_init(rng, [3, 4, 1])
    x, y = rng.random((5, 3), np.float32), rng.random((5, 1), np.float32)
    program = tapeml.trace(tapeml.value_and_grad(loss), params, x, y)
    leaves = flatten((params, x, y))[0]
    plain = CPUBackend().compile(program.module)(*leaves)
    profiled = CPUBackend().compile(program.module, profile=True)(*leaves)
    for a, b in zip(plain, profiled, strict=True):
        np.testing.assert_array_equal(a, b)


def test_profile_refuses_what_it_cannot_do():
    f = tapeml.jit(lambda x: x * 2.0, backend="interp")
    with pytest.raises(NotImplementedError, match="the cpu backend's"):
        f.profile(np.ones(3, np.float32))
    for repeat in (0, 2.5, "3", True):
        with pytest.raises(ValueError, match="must be an int of at least 1"):
            tapeml.jit(lambda x: x * 2.0).profile(np.ones(3, np.float32), repeat=repeat)
    with pytest.raises(TypeError, match="static arguments .* must be hashable"):
        tapeml.jit(lambda x, n: x * n[0], static_argnums=1).profile(np.ones(3, np.float32), [3])


def test_a_profile_inside_another_gives_its_stages_to_both():
    """The outer profile's list held nothing when an inner one was active around the compile
    (each stage went to the innermost list only)."""
    x = np.ones(3, np.float32)
    with tapeml.profile() as outer:
        with tapeml.profile() as inner:
            tapeml.jit(lambda a: a * 3.0 + 1.0)(x)
        tapeml.jit(lambda a: a - 2.0)(x)
    assert inner and len(outer) > len(inner) and outer[:len(inner)] == inner
