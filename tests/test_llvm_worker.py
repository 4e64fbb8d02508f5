"""The LLVM worker process (tapeml/codegen/llvm_worker.py): the same object code as this
process makes, errors and a dead worker left to the caller (which compiles in process), a
forked process's own worker, and the worker's exit when its parent lets go."""

from __future__ import annotations

import os

import pytest
from isolated import run_isolated

from tapeml.codegen import cpu, llvm_worker
from tapeml.codegen.gemm import Target, kernel, tiles, variant
from tapeml.codegen.gemm.plan import Variant
from tapeml.dialects.kernel import GemmSpec

_ENGINES: list = []  # kernels compiled by the tests, kept as long as the process

SMALL = """define i64 @twice(i64 %x) {
  %y = add i64 %x, %x
  ret i64 %y
}
"""


@pytest.fixture
def own_worker(monkeypatch):
    """A worker of this test's own, stopped after it (the module's state put back)."""
    monkeypatch.setattr(llvm_worker, "_WORKER", None)
    monkeypatch.setattr(llvm_worker, "_DEAD", False)
    yield
    if llvm_worker._WORKER is not None and os.getpid() == llvm_worker._OWNER:
        llvm_worker._stop(llvm_worker._WORKER)


def _kernel_text() -> str:
    spec = GemmSpec("f32", 1, 64, 64, 64, (0, 64, 1), (0, 64, 1), 0, False)
    lanes, mr, nr = tiles(spec, Target.host())
    return kernel(Variant("f32", lanes, mr, nr, True, True))


@pytest.mark.parametrize("reduce", [True, False], ids=["lsr", "no-lsr"])
@pytest.mark.parametrize("passes", [None, 2, cpu.KERNEL_PASSES], ids=["none", "O2", "kernel"])
def test_the_worker_makes_the_bytes_this_process_makes(passes, reduce, own_worker):
    for text in (SMALL, _kernel_text()):
        assert llvm_worker.in_worker(text, passes, strength_reduction=reduce) == \
            llvm_worker.object_code(text, passes, strength_reduction=reduce)


def test_strength_reduction_is_off_only_for_the_code_that_asks():
    """Codegen without LLVM's loop strength reduction (a program's loops) makes other code
    for the kernel's loops, and leaves the option as it was: the next compile with it makes
    the bytes it made before."""
    text = _kernel_text()
    before = llvm_worker.object_code(text, cpu.KERNEL_PASSES)
    without = llvm_worker.object_code(text, cpu.KERNEL_PASSES, strength_reduction=False)
    assert without != before
    assert llvm_worker.object_code(text, cpu.KERNEL_PASSES) == before


def test_ir_the_worker_cannot_compile_is_left_to_the_caller(own_worker):
    """Bad IR: None (the caller compiles it here, and raises LLVM's error itself); the worker
    serves the next request."""
    assert llvm_worker.in_worker("define i64 @f( {", None) is None
    with pytest.raises(RuntimeError, match="parsing error"):
        llvm_worker.object_code("define i64 @f( {", None)
    assert llvm_worker.in_worker(SMALL, 2) == llvm_worker.object_code(SMALL, 2)


def test_after_the_worker_dies_this_process_compiles(own_worker, monkeypatch):
    """A worker killed between requests: None from then on (no other is started), and a
    kernel asked of it is compiled here instead."""
    llvm_worker.start()
    llvm_worker._WORKER.kill()
    llvm_worker._WORKER.wait()
    assert llvm_worker.in_worker(SMALL, None) is None
    assert llvm_worker.in_worker(SMALL, None) is None and llvm_worker._DEAD
    monkeypatch.setenv("TAPEML_CACHE", "0")
    kept: dict = {}
    _ENGINES.append(kept)  # its symbol stays published: its code must outlive the test
    monkeypatch.setattr(cpu, "_KERNELS", kept)
    spec = GemmSpec("f32", 1, 64, 64, 64, (0, 64, 1), (0, 64, 1), 0, False)
    assert cpu.load_kernel(variant(spec, Target.host()), in_worker=True) == "compiled"


def test_a_worker_that_cannot_start_means_compiling_here(own_worker, monkeypatch):
    def no_processes(*args, **kwargs):
        raise OSError("no more processes")

    monkeypatch.setattr(llvm_worker.subprocess, "Popen", no_processes)
    assert llvm_worker.in_worker(SMALL, None) is None


def test_a_forked_process_starts_a_worker_of_its_own(own_worker, monkeypatch):
    """The worker's pipes are inherited by a fork; the child must not talk on them (its
    requests would interleave with the parent's): it starts its own."""
    llvm_worker.start()
    parents = llvm_worker._WORKER
    with monkeypatch.context() as child:
        child.setattr(llvm_worker.os, "getpid", lambda: -1)
        assert llvm_worker.in_worker(SMALL, 2) == llvm_worker.object_code(SMALL, 2)
        childs = llvm_worker._WORKER
        assert childs is not parents and parents.poll() is None
        llvm_worker._stop(childs)
    assert childs.poll() is not None
    llvm_worker._WORKER, llvm_worker._OWNER = parents, os.getpid()


def test_the_worker_exits_when_its_input_closes():
    worker = llvm_worker._start()
    worker.stdin.close()
    assert worker.wait(timeout=30) == 0


def _layers_step():
    """A step with repeated layers: merge-loop-nests keeps their loop nests out of line."""
    import numpy as np

    import tapeml
    from tapeml import nn, ops

    rng = np.random.default_rng(5)
    params = {f"l{i}": nn.linear_init(rng, 24, 24) for i in range(4)}
    x = rng.standard_normal((20, 24)).astype(np.float32)
    x[0, :3] = [np.nan, np.inf, -0.0]

    def loss(p, x):
        for i in range(4):
            x = ops.tanh(nn.linear(p[f"l{i}"], x))
        return ops.sum(x * x)

    return tapeml.value_and_grad(loss), (params, x)


def _compiled(monkeypatch, cores: int, **settings):
    import tapeml
    from tapeml.codegen import get_backend
    from tapeml.tracing.pytree import flatten

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    for name, value in settings.items():
        monkeypatch.setattr(cpu, name, value)
    step, args = _layers_step()
    with tapeml.profile() as stages:
        native = get_backend("cpu").compile(tapeml.trace(step, *args).module)
    details = [s.detail for s in stages if s.name == "LLVM O2"]  # (none: from the cache)
    return native, native(*flatten(args)[0]), "".join(details)


def _same_bits(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes()


def test_a_program_shared_with_the_worker_computes_the_same_bits(own_worker, monkeypatch):
    """Half the out-of-line functions compiled by the worker, the rest here, linked: the
    program's bits are those of the whole module compiled here (NaN, inf and -0 inputs)."""
    monkeypatch.setenv("TAPEML_CACHE", "0")
    _, whole, detail = _compiled(monkeypatch, 1)
    assert "worker" not in detail
    _, shared, detail = _compiled(monkeypatch, 2, SHARE_LINES=0)
    assert "in a worker process meanwhile" in detail
    _same_bits(whole, shared)


def test_a_mid_sized_program_is_shared_only_with_an_idle_worker(own_worker, monkeypatch):
    """Above SHARE_IDLE_LINES (below SHARE_LINES) a program is shared where the worker has
    no kernels of its to compile, and compiled whole here where it has: the same bits."""
    monkeypatch.setenv("TAPEML_CACHE", "0")
    monkeypatch.setattr(cpu.Prefetch, "busy", lambda self: False)
    _, idle, detail = _compiled(monkeypatch, 2, SHARE_LINES=10**9, SHARE_IDLE_LINES=0)
    assert "in a worker process meanwhile" in detail
    monkeypatch.setattr(cpu.Prefetch, "busy", lambda self: True)
    _, busy, detail = _compiled(monkeypatch, 2, SHARE_LINES=10**9, SHARE_IDLE_LINES=0)
    assert "worker" not in detail
    _same_bits(idle, busy)


def test_a_share_the_worker_cannot_compile_is_compiled_here(own_worker, monkeypatch):
    monkeypatch.setenv("TAPEML_CACHE", "0")
    _, whole, _ = _compiled(monkeypatch, 1)
    monkeypatch.setattr(llvm_worker, "in_worker", lambda *args, **options: None)
    _, shared, detail = _compiled(monkeypatch, 2, SHARE_LINES=0)
    assert "in a worker process meanwhile" in detail
    _same_bits(whole, shared)


def test_a_shared_program_from_the_disk_cache(own_worker, monkeypatch, tmp_path):
    """Its two objects stored in one entry, loaded into one engine: the same bits."""
    monkeypatch.setenv("TAPEML_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TAPEML_CACHE", "1")
    compiled, first, detail = _compiled(monkeypatch, 2, SHARE_LINES=0)
    assert compiled.origin == "compiled" and "in a worker process meanwhile" in detail
    loaded, again, _ = _compiled(monkeypatch, 2, SHARE_LINES=0)
    assert loaded.origin == "disk cache"
    _same_bits(first, again)


def test_function_lines_reads_quoted_and_plain_names():
    text = ('define void @"tapeml.f"(ptr %a) #0 {\nentry:\n  ret void\n}\n'
            'define internal i64 @g.1(i64 %x) {\n  %y = add i64 %x, 1\n  ret i64 %y\n}\n')
    assert cpu._function_lines(text) == {"tapeml.f": 2, "g.1": 2}


LOOP = """define void @scale(ptr noalias %x, ptr noalias %y) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %p = getelementptr float, ptr %x, i64 %i
  %v = load float, ptr %p
  %w = fmul float %v, 2.0
  %q = getelementptr float, ptr %y, i64 %i
  store float %w, ptr %q
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, 4096
  br i1 %more, label %loop, label %exit
exit:
  ret void
}
"""


def test_partial_unrolling_is_each_compiles_own_whatever_compiled_before():
    """A program's loops (a level's pipeline) are not partially unrolled after vectorizing,
    the kernels' (named passes) are, and neither depends on what this process compiled
    before: LLVM's options are the process's, and each compile sets its own."""
    machine = llvm_worker.target_machine()

    def multiplies(**partial: bool) -> int:
        parsed = llvm_worker.optimized(LOOP, machine, None)
        llvm_worker.run_passes(parsed, machine, 2, **partial)
        return str(parsed).count("fmul")

    text = _kernel_text()
    kernel_before = llvm_worker.object_code(text, cpu.KERNEL_PASSES)
    unrolled = multiplies(partial_unrolling=True)
    program = multiplies()
    assert program == multiplies(partial_unrolling=False) < unrolled  # (4 against 16 here)
    assert llvm_worker.object_code(text, cpu.KERNEL_PASSES) == kernel_before
    assert multiplies() == program


def test_the_pool_made_by_the_worker_is_the_code_made_here(own_worker):
    """load_kernel has the thread pool made by the worker along with the kernel (cpu's
    _pool_module): the same object code as this process makes of it."""
    source, build, elsewhere = cpu._pool_module(in_worker=True)
    machine = cpu.target_machine()
    assert elsewhere() == llvm_worker.emit(machine, build(machine))


def test_a_kernel_made_by_the_worker_is_all_made_before_anything_is_loaded(tmp_path):
    """load_kernel in a fresh process with an empty cache, for a program on more than one
    thread: the worker makes the thread pool and both of the kernel's modules, one request
    after another, before this process loads any of them (loading is llvmlite calls, which
    wait for the process's LLVM lock: the worker would sit idle meanwhile)."""
    out = run_isolated(f"""
        import os
        os.environ["TAPEML_CACHE_DIR"] = {str(tmp_path)!r}
        os.environ["TAPEML_CACHE"] = "1"
        from tapeml.codegen import cpu, llvm_worker, pool
        from tapeml.codegen.gemm import Target, variant
        from tapeml.dialects.kernel import GemmSpec

        events = []
        real_worker, real_engine = llvm_worker.in_worker, cpu.object_engine
        llvm_worker.in_worker = lambda *a, **k: (events.append("made"), real_worker(*a, **k))[1]
        cpu.object_engine = lambda *a: (events.append("loaded"), real_engine(*a))[1]
        spec = GemmSpec("f32", 1, 64, 64, 64, (0, 64, 1), (0, 64, 1), 0, False)
        print(cpu.load_kernel(variant(spec, Target.host()), in_worker=True, pooled=True),
              pool.loaded())
        print(" ".join(events))
        """)
    origin, events = out.strip().split("\n")
    assert origin == "compiled in a worker process True"
    assert events == "made made made loaded loaded loaded"
