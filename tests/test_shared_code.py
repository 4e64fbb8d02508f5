"""Code a process compiles once for all its programs: loop-bounds-as-arguments makes the functions
tape-to-loops lowers for ops take their outer loops' bounds as arguments
(tapeml/transforms/bound_arguments.py), and the CPU backend compiles each such function once per
process by its LLVM IR and links every program that has it against that code
(tapeml/codegen/shared_code.py). A new batch size of a step compiles only what differs; its
results are bit for bit what the program compiled whole computes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_merge_nests import _interpret  # the loops form on the interpreter
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import IndexType
from xdsl.ir import Block

import tapeml
from tapeml import nn, ops
from tapeml.codegen import shared_code
from tapeml.codegen.cpu import CPUBackend
from tapeml.codegen.gemm.target import compiled_for_threads
from tapeml.tracing.pytree import flatten
from tapeml.transforms.bound_arguments import (
    LOWERED_ONCE_ATTR,
    SHARED_CODE_ATTR,
    bounds_as_arguments,
)
from tapeml.transforms.fuse import fuse
from tapeml.transforms.to_loops import lower_module


def _loss(params, x, y):
    for p in params["layers"]:
        x = nn.layer_norm(p["norm"], ops.tanh(nn.linear(p, x)) + x)
    return nn.softmax_cross_entropy(nn.linear(params["out"], x), y)


def _params():
    rng = np.random.default_rng(0)
    layers = []
    for _ in range(2):
        layer = nn.linear_init(rng, 16, 16)
        layer["norm"] = {"scale": 1 + rng.standard_normal(16).astype(np.float32) * 0.1,
                         "bias": rng.standard_normal(16).astype(np.float32) * 0.1}
        layers.append(layer)
    return {"layers": layers, "out": nn.linear_init(rng, 16, 5)}


def _batch(n, seed=1):
    rng = np.random.default_rng(seed + n)
    x = rng.standard_normal((n, 16)).astype(np.float32)
    y = np.eye(5, dtype=np.float32)[rng.integers(0, 5, n)]
    return x, y


def _bits(tree):
    return [np.asarray(leaf).tobytes() for leaf in flatten(tree)[0]]


def _whole(fn, args):
    """`fn` at `args` compiled with nothing shared (the stages wanted: the program whole)."""
    program = tapeml.trace(fn, *args)
    native = CPUBackend().compile(program.module, stages=True)
    return native(*flatten(args)[0])


# --- loop-bounds-as-arguments ---------------------------------------------------------------


def _lowered(fn, args):
    program = tapeml.trace(fn, *args)
    module = program.module.clone()
    fuse(module)
    lower_module(module, row_reductions=True, share=True)
    return program, module


def test_outer_bounds_become_arguments_and_the_program_computes_the_same():
    fn, args = tapeml.value_and_grad(_loss), (_params(), *_batch(12))
    program, module = _lowered(fn, args)
    before = _interpret(program, module, args)
    functions = [op for op in module.ops if isinstance(op, func.FuncOp)
                 and LOWERED_ONCE_ATTR in op.attributes]
    assert functions
    made = bounds_as_arguments(module)
    module.verify()
    assert made > 0
    for f in functions:
        assert SHARED_CODE_ATTR in f.attributes and LOWERED_ONCE_ATTR not in f.attributes
    indexed = [f for f in functions if isinstance(f.function_type.inputs.data[-1], IndexType)]
    assert indexed
    for f in indexed:  # each bound an argument: no top-level loop of it has a constant bound
        for loop in f.body.block.ops:
            if isinstance(loop, scf.ForOp):
                assert not isinstance(loop.ub.owner, arith.ConstantOp) or not any(
                    isinstance(o, scf.ForOp | scf.ParallelOp) for o in loop.body.walk())
    calls = [op for op in module.walk() if isinstance(op, func.CallOp)
             and op.callee.root_reference.data in {f.sym_name.data for f in indexed}]
    assert calls and all(isinstance(op.arguments[-1].owner, arith.ConstantOp) for op in calls)
    assert _interpret(program, module, args) == before


@pytest.fixture(autouse=True)
def every_op_a_function(monkeypatch):
    """Every op its own function, and shared however few its lines, as in a model's step
    (to_loops.EVERY_OP_FUNCTIONS, shared_code.LEAST_LINES): the programs here are small."""
    from tapeml.transforms import to_loops

    monkeypatch.setattr(to_loops, "EVERY_OP_FUNCTIONS", 1)
    monkeypatch.setattr(shared_code, "LEAST_LINES", 0)


def test_a_program_with_few_lines_to_share_keeps_them():
    """Below LEAST_LINES of new functions, a program keeps them (a module of their own costs
    more than compiling them again would); with some already loaded it shares."""
    text = (_HEADER + _function("p.a", '  %".4" = load float, ptr %".1"\n')
            + _function("p", '  call void @"p.a"(ptr %".1", i64 4)\n'))
    assert shared_code.split(text, {"p.a"}).program != text
    shared_code.LEAST_LINES = 400  # (the fixture puts it back)
    kept = shared_code.split(text, {"p.a"})
    assert kept.program == text and not kept.modules


def test_an_innermost_loop_passes_its_bound_as_a_number_of_vector_multiples():
    x = np.ones((4, 32), np.float32)  # 128 elements: a flat loop, 128 = 2 x 64
    program, module = _lowered(lambda x: ops.tanh(x) * 2.0, (x,))
    before = _interpret(program, module, (x,))
    bounds_as_arguments(module)
    calls = [op for op in module.walk() if isinstance(op, func.CallOp)]
    assert [op.arguments[-1].owner.value.value.data for op in calls] == [2]
    assert _interpret(program, module, (x,)) == before
    odd = np.ones((3, 5), np.float32)  # 15 elements: its bound stays a constant
    _, module = _lowered(lambda x: ops.tanh(x) * 2.0, (odd,))
    assert bounds_as_arguments(module) == 0


# --- the CPU backend ------------------------------------------------------------------------


@pytest.mark.parametrize("threads", [1, 2])
def test_a_new_batch_size_calls_the_functions_compiled_for_the_first(monkeypatch, threads):
    """With TAPEML_CHECKS off (on, every function is lowered and compiled again, and its
    key checked: below), the second batch size declares the functions it shares."""
    monkeypatch.setenv("TAPEML_CHECKS", "0")
    params = _params()
    with compiled_for_threads(threads):
        step = tapeml.jit(tapeml.value_and_grad(_loss))
        step(params, *_batch(16))
        with tapeml.profile() as stages:
            got = step(params, *_batch(8))
        want = _whole(tapeml.value_and_grad(_loss), (params, *_batch(8)))
    assert _bits(got) == _bits(want)
    found = {stage.name: stage for stage in stages}
    shared = found["shared code"]
    loaded = int(shared.detail.split(" loaded already")[0].rsplit(" ", 1)[-1])
    assert found["shared code: declared"].ops == loaded > shared.ops // 2, shared.detail


def test_results_are_the_whole_programs_bits_at_each_batch_size():
    """TAPEML_CHECKS on (the suite's): every function lowered and split at each size, and the
    loop form that keys a shared function checked to lower to that function's code."""
    params = _params()
    step = tapeml.jit(tapeml.value_and_grad(_loss))
    for n in (16, 8, 33, 1, 16):
        x, y = _batch(n)
        assert _bits(step(params, x, y)) == _bits(_whole(tapeml.value_and_grad(_loss),
                                                         (params, x, y))), n


def test_the_loop_form_key_tells_threads_apart():
    fn, args = tapeml.value_and_grad(_loss), (_params(), *_batch(12))
    _, module = _lowered(fn, args)
    bounds_as_arguments(module)
    f = next(op for op in module.ops if isinstance(op, func.FuncOp)
             and SHARED_CODE_ATTR in op.attributes)
    functions = {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}
    assert shared_code.loops_key(f, 1, functions) != shared_code.loops_key(f, 2, functions)
    assert shared_code.loops_key(f, 1, functions) == shared_code.loops_key(f.clone(), 1,
                                                                           functions)


# --- split ------------------------------------------------------------------------------------

_HEADER = 'target triple = "x86_64-unknown-linux-gnu"\ntarget datalayout = "e-m:e"\n\n'


def _function(name, body, params='ptr noalias %".1", i64 %".2"'):
    return f'define void @"{name}"({params}) noinline\n{{\n.3:\n{body}  ret void\n}}\n'


def test_split_declares_shared_functions_and_keeps_those_that_read_the_programs_globals():
    pure = '  %".4" = load float, ptr %".1"\n  %".5" = call float @"llvm.exp.f32"(float %".4")\n'
    reads = '  %".4" = load ptr, ptr @"g"\n'
    calls = '  call void @"tapeml_gemm_x"(ptr %".1")\n'
    text = (_HEADER + '@"g" = global ptr null\n'
            + _function("p.a", pure) + _function("p.b", pure) + _function("p.c", reads)
            + _function("p.d", calls)
            + _function("p", '  call void @"p.a"(ptr %".1", i64 4)\n'
                        '  call void @"p.b"(ptr %".1", i64 8)\n'
                        '  call void @"p.c"(ptr %".1", i64 8)\n'
                        '  call void @"p.d"(ptr %".1", i64 8)\n')
            + 'declare float @"llvm.exp.f32"(float %".1")\n'
            + 'declare void @"tapeml_gemm_x"(ptr %".1")\n')
    split = shared_code.split(text, {"p.a", "p.b", "p.c", "p.d"})
    assert set(split.renamed) == {"p.a", "p.b"}  # one code: one module, declared once
    (symbol,) = set(split.renamed.values())
    assert symbol.startswith(shared_code.PREFIX) and list(split.modules) == [symbol]
    assert split.program.count(f'declare void @"{symbol}"') == 1
    assert 'define void @"p.a"' not in split.program and 'define void @"p.c"' in split.program
    assert split.program.count(f'call void @"{symbol}"') == 2
    module = split.modules[symbol].text
    assert f'define void @"{symbol}"' in module and '@"llvm.exp.f32"' in module
    assert "tapeml_gemm" not in module and '@"g"' not in module
    # the same function in another program (other names, other callers): the same symbol
    other = shared_code.split(_HEADER + _function("q.z", pure) + _function(
        "q", '  call void @"q.z"(ptr %".1", i64 9)\n')
        + 'declare float @"llvm.exp.f32"(float %".1")\n', {"q.z"})
    assert other.renamed == {"q.z": symbol}


# --- the disk cache ---------------------------------------------------------------------------

_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np, tapeml
    from test_shared_code import _loss, _params, _batch, _bits
    step = tapeml.jit(tapeml.value_and_grad(_loss))
    params = _params()
    for n in sys.argv[2:]:
        out = step(params, *_batch(int(n)))
    print(step.explain().replace(chr(10), " | "))
    print("".join(b.hex() for b in _bits(out)))
""")


def _child(cache, *sizes):
    env = {**os.environ, "TAPEML_CACHE": "1", "TAPEML_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(Path(__file__).parent),
                           *map(str, sizes)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")[:2]


def test_a_program_from_the_disk_cache_links_its_shared_functions(tmp_path):
    _, bits = _child(tmp_path, 16, 8)
    log, again = _child(tmp_path, 8)  # a new process: the program at 8 from the disk cache
    assert again == bits and "disk cache" in log
    removed = 0
    for entry in tmp_path.iterdir():  # its shared functions' modules gone: compiled again
        payload = entry.read_bytes()
        if shared_code.PREFIX.encode() in payload and b'"name"' not in payload[:4096]:
            entry.unlink()
            removed += 1
    assert removed
    log, third = _child(tmp_path, 8)
    assert third == bits and "disk cache" not in log


def test_shared_code_lives_as_long_as_a_program_that_calls_it(monkeypatch):
    """The engine holding shared functions is the programs' to keep: with every program that
    calls them gone, their code is freed, and the next program compiles them again (a
    process compiling many programs does not keep them all)."""
    import gc

    monkeypatch.setenv("TAPEML_CHECKS", "0")
    params = _params()

    def second_call(keep_first):
        first = tapeml.jit(tapeml.value_and_grad(_loss))
        first(params, *_batch(24))
        if not keep_first:
            del first
            gc.collect()
        with tapeml.profile() as stages:
            got = tapeml.jit(tapeml.value_and_grad(_loss))(params, *_batch(20))
        shared = next(s for s in stages if s.name == "shared code")
        return got, shared.detail

    got, detail = second_call(keep_first=True)
    assert " 0 loaded already" not in detail
    again, detail = second_call(keep_first=False)
    assert " 0 loaded already" in detail and "compiled" in detail
    assert _bits(got) == _bits(again)


_OVERLAP = textwrap.dedent("""
    import gc, sys
    sys.path.insert(0, sys.argv[1])
    import tapeml
    from test_shared_code import _loss, _params, _batch, _bits
    fn, params = tapeml.value_and_grad(_loss), _params()
    a = tapeml.jit(fn)
    want = _bits(a(params, *_batch(8)))  # stored with its shared module, then freed
    del a
    gc.collect()
    b = tapeml.jit(fn)
    b(params, *_batch(16))  # much of the same code, in an engine of b's
    c = tapeml.jit(fn)
    c(params, *_batch(8))  # from the disk cache: links some functions against b's engine
    del b
    gc.collect()
    print(_bits(c(params, *_batch(8))) == want, c.explain().count("disk cache"))
""")


def test_a_program_from_the_disk_cache_holds_every_engine_it_links_against(tmp_path):
    """A program loaded from the disk cache whose shared functions another program's engine
    held already links against that engine, and must keep it (it did not: freed with the
    other program, the next call jumped into freed code, a segmentation fault)."""
    env = {**os.environ, "TAPEML_CACHE": "1", "TAPEML_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _OVERLAP, str(Path(__file__).parent)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["True", "1"]


def test_a_thread_pool_part_takes_its_count_and_computes_the_same():
    """On more than one thread an op function's loop is a kernel.parallel_for of a part: its
    count becomes the function's argument (`count`), the part unchanged."""
    from xdsl.context import Context

    from tapeml.dialects import kernel
    from tapeml.transforms.outline_parallel import OutlineParallelLoopsPass

    fn, args = tapeml.value_and_grad(_loss), (_params(), *_batch(12))
    program, module = _lowered(fn, args)
    OutlineParallelLoopsPass(min_work=1).apply(Context(), module)
    before = _interpret(program, module, args)
    parts = {op.callee.root_reference.data: str(op) for op in module.walk()
             if isinstance(op, kernel.ParallelForOp)}
    bounds_as_arguments(module)
    module.verify()
    counted = [op for op in module.walk() if isinstance(op, kernel.ParallelForOp)
               and op.count is not None]
    assert counted and all(isinstance(op.count.owner, Block) for op in counted)
    assert {op.callee.root_reference.data for op in counted} <= set(parts)
    assert _interpret(program, module, args) == before
