"""merge-loop-nests (tapeml/transforms/merge_nests.py): a loop nest that occurs more than once
becomes one function called where each copy was, thread-pool parts that are the same become
one, and the program computes the same bits before and after, interpreted and compiled."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from unittest import mock

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import func

import tapeml
from tapeml import nn, ops
from tapeml.dialects import kernel
from tapeml.tracing.pytree import flatten
from tapeml.transforms import pipelines
from tapeml.transforms.merge_nests import (
    MAY_ALIAS_ATTR,
    MIN_RUN,
    Merged,
    MergeLoopNestsPass,
    _periodic_runs,
    merge_loop_nests,
)
from tapeml.transforms.outline_parallel import OutlineParallelLoopsPass
from tapeml.transforms.pipelines import cpu_pipeline
from tapeml.transforms.to_loops import ToLoopsPass


def _arena_form(fn, args, threads=1):
    """`fn` traced and lowered to the CPU's loops (and parts, on threads): the pipeline up
    to this pass, but plan-arena, so that the interpreter can run it (it reads no arena);
    tape-to-loops not sharing the ops whose loops are the same, so that this pass finds
    every repeated nest (tests/test_to_loops_share.py tests the sharing)."""
    program = tapeml.trace(fn, *args)
    module = program.module.clone()
    for step in cpu_pipeline(threads=threads):
        if step.pass_.name == "plan-arena":
            break
        if isinstance(step.pass_, ToLoopsPass):
            step = step._replace(pass_=dataclasses.replace(step.pass_, share=False))
        run = getattr(step.pass_, "run", None)
        run(module) if run is not None else step.pass_.apply(Context(), module)
    return program, module


def _interpret(program, module, args):
    shapes = flatten(program.shapes)[0]
    leaves = [np.ascontiguousarray(a).reshape(-1) for a in flatten(args)[0]]
    outs = [np.zeros(max(1, math.prod(s.shape)), s.dtype) for s in shapes]
    tapeml.interpret(module, program.name, *leaves, *outs)
    return [o.tobytes() for o in outs]


def _two_layers():
    rng = np.random.default_rng(0)
    params = [nn.linear_init(rng, 8, 8) for _ in range(2)]
    x = rng.standard_normal((4, 8)).astype(np.float32)

    def f(params, x):
        for p in params:  # the same layer twice: the same nests over other buffers
            x = ops.tanh(nn.linear(p, x)) * 0.5 + x
        return ops.sum(x * x)

    return tapeml.value_and_grad(f), (params, x)


def _calls(module):
    return [op.callee.root_reference.data for op in module.walk() if isinstance(op, func.CallOp)]


def test_repeated_layers_share_their_nests_and_compute_the_same_bits():
    fn, args = _two_layers()
    program, module = _arena_form(fn, args)
    before = _interpret(program, module, args)
    merged = merge_loop_nests(module)
    module.verify()
    calls, outlined = merged.nest_calls, merged.nest_functions
    assert outlined >= 2 and calls >= 2 * outlined and merged.parts == 0
    assert merged.run_calls == 0  # (tape-to-loops' deallocs end every run: no arena here)
    called = _calls(module)
    assert len(called) == calls and len(set(called)) == outlined
    assert _interpret(program, module, args) == before


def test_nests_that_differ_stay_apart():
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)

    def f(x, y):  # the same shapes, other ops or another shape: no two nests alike
        return ops.tanh(x), ops.exp(y), x - y, x + y, x[:3] * y[1:]

    program, module = _arena_form(f, (x, x + 1))
    assert merge_loop_nests(module) == Merged() and not _calls(module)

    def g(x, y):  # the same nests twice, over other buffers (y - x is x - y over (y, x))
        return ops.tanh(x) * 2.0, ops.tanh(y) * 2.0, x - y, y - x

    program, module = _arena_form(g, (x, x + 1))
    before = _interpret(program, module, (x, x + 1))
    merged = merge_loop_nests(module)
    assert (merged.nest_calls, merged.nest_functions) == (4, 2)
    assert _interpret(program, module, (x, x + 1)) == before



def test_nests_over_buffers_of_other_sizes_stay_apart():
    """x[0] of a 2-element x copies one element out of x, then into the result: the same loop
    over a 2- and a 1-element buffer, which a function of one signature cannot take (found by
    TAPEML_CHECKS' verification after each pass)."""
    x = np.array([3.0, 4.0])
    program, module = _arena_form(lambda x: x[0], (x,))
    merge_loop_nests(module)
    module.verify()
    assert tapeml.jit(lambda x: x[0])(x) == 3.0

def test_identical_thread_pool_parts_become_one():
    fn, args = _two_layers()
    every_loop = functools.partial(OutlineParallelLoopsPass, min_work=0)
    with mock.patch.object(pipelines, "OutlineParallelLoopsPass", every_loop):
        program, module = _arena_form(fn, args, threads=2)
    parts = {op.callee.root_reference.data for op in module.walk()
             if isinstance(op, kernel.ParallelForOp)}
    before = _interpret(program, module, args)
    dropped = merge_loop_nests(module).parts
    module.verify()
    after = {op.callee.root_reference.data for op in module.walk()
             if isinstance(op, kernel.ParallelForOp)}
    defined = {op.sym_name.data for op in module.ops if isinstance(op, func.FuncOp)}
    assert dropped > 0 and len(after) == len(parts) - dropped and after <= defined
    assert _interpret(program, module, args) == before


@pytest.mark.parametrize("threads", ["1", "2"])
def test_compiled_with_merged_nests_matches_the_interpreter(threads):
    fn, args = _two_layers()
    with mock.patch.dict(os.environ, {"TAPEML_NUM_THREADS": threads, "TAPEML_CACHE": "0"}):
        compiled = tapeml.jit(fn)
        stages = compiled.lower(*args)
        value, grads = compiled(*args)
    assert "_nest0" in stages["llvm dialect"]  # the layers' nests were merged
    expected_value, expected_grads = tapeml.jit(fn, backend="interp")(*args)
    np.testing.assert_allclose(value, expected_value, rtol=1e-5)
    for g, e in zip(flatten(grads)[0], flatten(expected_grads)[0], strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# runs of ops: a model's repeated layers, after plan-arena


def test_periodic_runs_find_the_longest_repeat_first_and_never_overlap():
    layer = [f"op{i}" for i in range(MIN_RUN + 2)]
    keys = ["head", *layer * 3, "mid", *layer[:MIN_RUN] * 2, "tail"]
    runs = _periodic_runs(keys)
    assert runs[0] == (1, len(layer), 3)  # three layers: two copies' ops saved
    assert (2 + 3 * len(layer), MIN_RUN, 2) in runs
    covered = [i for start, period, copies in runs for i in range(start, start + period * copies)]
    assert len(covered) == len(set(covered))
    assert _periodic_runs([f"op{i}" for i in range(40)]) == []
    assert _periodic_runs(["a"] * (2 * MIN_RUN - 1)) == []  # too short for two copies


def _blocks(layers):
    """A transformer-like stack of identical blocks (layer norm, attention-free mixing, MLP)
    and its loss: each layer's forward and backward repeat."""
    rng = np.random.default_rng(1)
    params = [{"ln": nn.layer_norm_init(16), "fc": nn.linear_init(rng, 16, 32),
               "out": nn.linear_init(rng, 32, 16)} for _ in range(layers)]
    x = rng.standard_normal((8, 16)).astype(np.float32)

    def loss(params, x):
        for p in params:
            h = nn.gelu(nn.linear(p["fc"], nn.layer_norm(p["ln"], x)))
            x = x + nn.linear(p["out"], h)
        return ops.mean(x * x)

    return tapeml.value_and_grad(loss), (params, x)


def _run_functions(module):
    return [op for op in module.ops if isinstance(op, func.FuncOp)
            and MAY_ALIAS_ATTR in op.attributes]


def test_repeated_layers_become_calls_of_one_function_per_run():
    fn, args = _blocks(4)
    module = tapeml.trace(fn, *args).module.clone()
    for step in cpu_pipeline():
        run = getattr(step.pass_, "run", None)
        report = run(module) if run is not None else step.pass_.apply(Context(), module)
        if step.pass_.name == "merge-loop-nests":
            break
    module.verify()
    functions = _run_functions(module)
    called = _calls(module)
    assert functions and report.run_functions == len(functions)
    for f in functions:  # each run is called at least twice, its copies gone
        assert called.count(f.sym_name.data) >= 2
    assert report.run_calls == sum(called.count(f.sym_name.data) for f in functions)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_compiled_with_merged_runs_computes_the_same_bits(threads):
    """The same program compiled with its layers' runs merged and kept apart: bit for bit the
    same (the same ops in the same order), and as the interpreter within rounding."""
    fn, args = _blocks(4)
    results = {}
    for runs in (True, False):
        merge = functools.partial(MergeLoopNestsPass, runs=runs)
        with mock.patch.dict(os.environ, {"TAPEML_NUM_THREADS": threads, "TAPEML_CACHE": "0"}), \
                mock.patch.object(pipelines, "MergeLoopNestsPass", merge):
            compiled = tapeml.jit(fn)
            stages = compiled.lower(*args)
            results[runs] = [np.asarray(leaf).tobytes()
                             for leaf in flatten(compiled(*args))[0]]
        assert ("_run0" in stages["llvm dialect"]) == runs
    assert results[True] == results[False]
    expected = flatten(tapeml.jit(fn, backend="interp")(*args))[0]
    for got, want in zip(results[True], expected, strict=True):
        np.testing.assert_allclose(np.frombuffer(got, np.float32), np.ravel(want),
                                   rtol=1e-4, atol=1e-6)


def _doubling(loop: str, buffer: str, before: str, after: str) -> str:
    """LLVM IR: a loop `loop` doubling 64 floats of `buffer`, entered from `before`."""
    return f"""{loop}:
  %{loop}.i = phi i64 [ 0, %{before} ], [ %{loop}.next, %{loop} ]
  %{loop}.p = getelementptr inbounds float, ptr {buffer}, i64 %{loop}.i
  %{loop}.x = load float, ptr %{loop}.p
  %{loop}.y = fmul float %{loop}.x, 2.0
  store float %{loop}.y, ptr %{loop}.p
  %{loop}.next = add i64 %{loop}.i, 1
  %{loop}.more = icmp slt i64 %{loop}.next, 64
  br i1 %{loop}.more, label %{loop}, label %{after}
"""


_TWO_NESTS = ('define void @"tapeml.{name}"(ptr noalias %a, ptr noalias %b) {{\n'
              "entry:\n  br label %first\n"
              + _doubling("first", "%a", "entry", "between")
              + "between:\n  br label %second\n"
              + _doubling("second", "%b", "between", "done")
              + "done:\n  ret void\n}}\n")


@pytest.mark.parametrize("name", ["step", "損失-é", 'q"uote\\d'])
def test_llvm_nests_that_repeat_become_one_function_called_twice(name):
    """The CPU backend's merge_loop_nests (LLVM's loop-extract and mergefunc, before O2): two
    copies of a loop over other buffers become one function, kept out of line and called
    twice, whatever characters the program's name has (LLVM quotes and escapes them)."""
    import llvmlite.binding as llvm_binding

    from tapeml.codegen.cpu import _calls, _ir_name, merge_loop_nests, target_machine

    quoted = _ir_name(name).strip('"')
    parsed = llvm_binding.parse_assembly(_TWO_NESTS.format(name=quoted))
    (program,) = [f.name for f in parsed.functions]
    assert program == f"tapeml.{name}"
    assert merge_loop_nests(parsed, target_machine()) == 1
    parsed.verify()
    (nest,) = [f.name for f in parsed.functions if f.name != program]
    assert _calls(parsed, [nest, program]) == {nest: 2, program: 0}
