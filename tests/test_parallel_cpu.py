"""The CPU's parallel loops: the thread pool (tapeml/codegen/pool.py) and outline-parallel-loops.
Each iteration is computed as alone, so results are bit-identical at any thread count."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest
from concurrency import at_once  # tests/concurrency.py

import tapeml
from tapeml import nn, ops
from tapeml.codegen import pool
from tapeml.codegen.cpu import target_machine
from tapeml.frontend.pytree import flatten
from tapeml.transforms.differentiate import differentiate
from tapeml.transforms.fuse import fuse
from tapeml.transforms.outline_parallel import outline_parallel_loops
from tapeml.transforms.to_loops import lower_module

RNG = np.random.default_rng(9)
PART = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
PARALLEL_FOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                ctypes.c_int64)


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
@pytest.mark.parametrize("total", [0, 1, 3, 10, 1000])
def test_the_pool_covers_the_range_once_in_contiguous_chunks(threads, total):
    """Every thread asked for takes part: each one's first chunk waits at a barrier for the
    others (and would time out if one never came)."""
    parallel_for = PARALLEL_FOR(pool.load(target_machine))
    parts: list[tuple[int, int, int]] = []
    lock = threading.Lock()
    taking_part = max(1, min(threads, total))
    barrier = threading.Barrier(taking_part, timeout=20)
    arrived: set[int] = set()
    broken: list[BaseException] = []

    def part(context, start, end):
        me = threading.get_ident()
        with lock:
            parts.append((start, end, me))
            first = me not in arrived
            arrived.add(me)
        if first and taking_part > 1:
            try:
                barrier.wait()
            except threading.BrokenBarrierError as error:
                broken.append(error)

    callback = PART(part)
    parallel_for(ctypes.cast(callback, ctypes.c_void_p), None, total, threads)
    ranges = sorted((s, e) for s, e, _ in parts)
    covered = [i for s, e in ranges for i in range(s, e)]
    assert covered == list(range(total))
    assert total == 0 or all(s < e for s, e in ranges)
    assert len(ranges) <= max(1, min(taking_part * pool.CHUNKS, total))
    assert not broken and len(arrived) == taking_part


def test_outlined_loops_interpret_to_the_same_values():
    params = nn.mlp_init(RNG, [4, 8, 3], dtype=np.float64)
    x, y = RNG.standard_normal((6, 4)), np.eye(3)[[0, 1, 2, 0, 1, 2]]
    step = tapeml.trace(lambda p, x, y: nn.softmax_cross_entropy(nn.mlp(p, x), y), params, x, y)
    differentiate(step.function)
    fuse(step.module)
    expected = flatten(step(params, x, y))[0]
    lowered = tapeml.Program.parse(str(step))
    lower_module(lowered.module)
    assert outline_parallel_loops(lowered.module, min_work=0) > 3
    lowered.module.verify()
    text = str(lowered)
    assert "kernel.parallel_for @_lambda__part0(" in text
    leaves = [np.ascontiguousarray(a).reshape(-1) for a in flatten((params, x, y))[0]]
    outs = [np.zeros(max(1, e.size)) for e in expected]
    tapeml.interpret(lowered.module, lowered.name, *leaves, *outs)
    for got, want in zip(outs, expected, strict=True):
        np.testing.assert_allclose(got.reshape(np.shape(want)), want, rtol=1e-12, atol=1e-12)


def _cnn_step():
    """Big enough for every kind of parallel GEMM: the forward split by batches, the weight
    gradient summed in groups of batches (7 MFLOP), the linear layer's products."""
    params = {"w": RNG.standard_normal((8, 3, 3, 3)).astype(np.float32),
              "v": RNG.standard_normal((8 * 16 * 16, 10)).astype(np.float32) * 0.1}
    x = RNG.standard_normal((16, 3, 32, 32)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[RNG.integers(0, 10, 16)]

    def loss(p, x, y):
        h = nn.max_pool2d(ops.tanh(nn.conv2d(x, p["w"], padding=1)), 2)
        return nn.softmax_cross_entropy(ops.reshape(h, (16, -1)) @ p["v"], y)

    return tapeml.value_and_grad(loss), (params, x, y)


@pytest.mark.parametrize("threads", ["2", "3"])
def test_results_do_not_depend_on_the_thread_count(monkeypatch, threads):
    step, args = _cnn_step()
    monkeypatch.setenv("TAPEML_NUM_THREADS", "1")
    alone = tapeml.jit(step)(*args)
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    shared = tapeml.jit(step)
    with tapeml.profile() as stages:
        together = shared(*args)
    outlined = [s for s in stages if s.name == "outline-parallel-loops"]
    assert outlined and f"shared by {threads} threads" in outlined[0].detail
    assert not outlined[0].detail.startswith("0 ")
    for a, b in zip(flatten(alone)[0], flatten(together)[0], strict=True):
        np.testing.assert_array_equal(a, b)
    reference = tapeml.jit(step, backend="interp")(*args)
    for a, r in zip(flatten(together)[0], flatten(reference)[0], strict=True):
        np.testing.assert_allclose(a, np.asarray(r), rtol=2e-4, atol=2e-5)


def test_programs_called_from_several_threads_at_once(monkeypatch):
    """One job at a time in the pool: a call that finds it busy runs its loops itself."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", "2")
    f = tapeml.jit(lambda a: ops.tanh(a) * 2.0 + a)
    arrays = [RNG.standard_normal((64, 4096)).astype(np.float32) for _ in range(4)]
    expected = [np.asarray(tapeml.jit(lambda a: ops.tanh(a) * 2.0 + a, backend="interp")(a))
                for a in arrays]
    f(arrays[0])  # compiled before the threads start

    def work(i: int) -> None:
        for _ in range(20):
            np.testing.assert_allclose(f(arrays[i]), expected[i], rtol=1e-6, atol=1e-6)

    at_once(work)


def test_calls_at_once_each_get_an_arena_for_their_intermediates(monkeypatch):
    """A compiled program keeps one arena for its intermediates; a call made while another
    thread's call holds it must get one of its own (or they would overwrite each other)."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", "1")

    def f(a, b):
        return ops.tanh(ops.tanh(a @ b) @ b.T) @ b

    compiled = tapeml.jit(f)
    rng = np.random.default_rng(5)
    pairs = [(rng.standard_normal((96, 80)).astype(np.float32),
              rng.standard_normal((80, 80)).astype(np.float32) / 9) for _ in range(4)]
    expected = [np.asarray(tapeml.jit(f, backend="interp")(a, b)) for a, b in pairs]
    compiled(*pairs[0])
    ((_, native),) = compiled.cache.values()
    assert native.arena_bytes >= 2 * 96 * 80 * 4  # two intermediates live at once, at least

    def work(i: int) -> None:
        for _ in range(40):
            np.testing.assert_allclose(compiled(*pairs[i]), expected[i], rtol=1e-4,
                                       atol=1e-5)

    at_once(work)


def test_first_fit_reuses_the_bytes_of_dead_buffers():
    from tapeml.transforms.arena import FirstFit

    arena = FirstFit(64)
    assert arena.place("a", 100) == 0  # 128 bytes
    assert arena.place("b", 64) == 128
    arena.free("a")
    assert arena.place("c", 64) == 0  # in a's place
    assert arena.place("d", 100) == 192  # a's remaining 64 bytes are too few
    arena.free("b")
    assert arena.place("e", 64) == 64
    assert arena.size == 320


def test_workers_asleep_between_jobs_wake_for_the_next():
    """Past its spin a worker sleeps on a futex; the next job must wake it (or the caller
    would wait for it forever)."""
    import time

    parallel_for = PARALLEL_FOR(pool.load(target_machine))
    seen: set[int] = set()
    lock = threading.Lock()
    broken: list[BaseException] = []

    def part(context, start, end):
        with lock:
            first = threading.get_ident() not in seen
            seen.add(threading.get_ident())
        if first:  # the caller's first chunk waits here for the worker's
            try:
                barrier.wait()
            except threading.BrokenBarrierError as error:
                broken.append(error)

    callback = PART(part)
    for _ in range(3):
        seen.clear()
        barrier = threading.Barrier(2, timeout=20)
        time.sleep(0.05)  # far past the spin: the workers are asleep
        parallel_for(ctypes.cast(callback, ctypes.c_void_p), None, 8, 2)
        assert not broken and len(seen) == 2
