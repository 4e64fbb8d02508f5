"""The LLVM worker process (tapeml/codegen/llvm_worker.py): the same object code as this
process makes, errors and a dead worker left to the caller (which compiles in process), a
forked process's own worker, and the worker's exit when its parent lets go."""

from __future__ import annotations

import os

import pytest

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


@pytest.mark.parametrize("passes", [None, 2, cpu.KERNEL_PASSES], ids=["none", "O2", "kernel"])
def test_the_worker_makes_the_bytes_this_process_makes(passes, own_worker):
    for text in (SMALL, _kernel_text()):
        assert llvm_worker.in_worker(text, passes) == llvm_worker.object_code(text, passes)


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
