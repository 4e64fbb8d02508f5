"""The CPU's parallel loops: the thread pool (tapeml/codegen/pool.py) and outline-parallel-loops.
Each iteration is computed as alone, so results are bit-identical at any thread count."""

from __future__ import annotations

import ctypes
import re
import threading

import numpy as np
import pytest
from bits import assert_same_bits
from concurrency import at_once  # tests/concurrency.py
from hypothesis import given, settings
from hypothesis import strategies as st
from isolated import run_isolated
from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, memref, scf
from xdsl.parser import Parser

import tapeml
from tapeml import nn, ops
from tapeml.codegen import pool
from tapeml.codegen.cpu import load_pool, target_machine
from tapeml.dialects import kernel
from tapeml.dialects.kernel import Kernel
from tapeml.tracing.pytree import flatten
from tapeml.transforms.differentiate import differentiate
from tapeml.transforms.fuse import fuse
from tapeml.transforms.loops import convolutions
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
    parallel_for = PARALLEL_FOR(load_pool())
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


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("total", [2, 8, 1000])
def test_the_caller_takes_the_front_of_the_range_and_the_workers_its_back(threads, total):
    """So that loops over the same range one after another give each core about the same
    rows each time. Each thread's first chunk waits at a barrier for the others', so every
    thread takes one before any takes a second: the caller's first is the range's first
    chunk, and the workers' are the last ones."""
    parallel_for = PARALLEL_FOR(load_pool())
    caller = threading.get_ident()
    firsts: dict[int, tuple[int, int]] = {}
    lock = threading.Lock()
    taking_part = min(threads, total)
    barrier = threading.Barrier(taking_part, timeout=20)

    def part(context, start, end):
        with lock:
            first = threading.get_ident() not in firsts
            firsts.setdefault(threading.get_ident(), (start, end))
        if first:
            barrier.wait()

    callback = PART(part)
    for _ in range(3):
        firsts.clear()
        parallel_for(ctypes.cast(callback, ctypes.c_void_p), None, total, threads)
        assert firsts[caller][0] == 0
        workers = sorted(span for thread, span in firsts.items() if thread != caller)
        assert len(workers) == taking_part - 1 and workers[-1][1] == total
        assert all(a[1] == b[0] for a, b in zip(workers[:-1], workers[1:], strict=True))


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
    assert outlined and not outlined[0].detail.startswith("0 ")
    (converted,) = [s for s in stages if s.name == "convert-loops-to-llvm"]
    assert f"shared by {threads} threads" in converted.detail
    for a, b in zip(flatten(alone)[0], flatten(together)[0], strict=True):
        assert_same_bits(a, b)
    reference = tapeml.jit(step, backend="interp")(*args)
    for a, r in zip(flatten(together)[0], flatten(reference)[0], strict=True):
        np.testing.assert_allclose(a, np.asarray(r), rtol=2e-4, atol=2e-5)


def test_one_thread_compiles_no_pool_and_two_threads_later_share_its_kernel():
    """A process on one thread never makes the thread pool: its programs and GEMM kernels refer
    to none (a caller passes its kernel the pool only where its plan shares the work). A
    program compiled later in the same process on two threads loads the pool, and the kernel
    loaded before (without one) shares its products' work through it: the same bits."""
    out = run_isolated("""
        import os
        os.environ["TAPEML_CACHE"] = "0"
        os.environ["TAPEML_NUM_THREADS"] = "1"
        import numpy as np
        import tapeml
        from tapeml import ops
        from tapeml.codegen import pool

        rng = np.random.default_rng(0)
        x = rng.standard_normal((384, 256)).astype(np.float32)
        w = rng.standard_normal((256, 320)).astype(np.float32) / 16
        step = tapeml.value_and_grad(lambda w, x: ops.sum(ops.tanh(x @ w)))  # (a sum over
        with tapeml.profile() as stages:  # the batch: one program, not pieces of the batch)
            alone = tapeml.jit(step)(w, x)
        print(pool.loaded(), [s.detail for s in stages if s.name == "GEMM kernels"])
        os.environ["TAPEML_NUM_THREADS"] = "2"
        with tapeml.profile() as stages:
            shared = tapeml.jit(step)(w, x)
        print(pool.loaded(), [s.detail for s in stages if s.name == "GEMM kernels"])
        h = np.tanh(x.astype(np.float64) @ w)
        print(all(p.tobytes() == q.tobytes() for p, q in zip(alone, shared)),
              np.allclose(shared[1], x.T.astype(np.float64) @ (1 - h * h), rtol=1e-3,
                          atol=1e-3))
        """)
    first, second, same = out.strip().split("\n")
    assert first.startswith("False") and "1 compiled" in first
    assert second.startswith("True") and "1 loaded" in second
    assert same == "True True"


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



@given(st.lists(st.tuples(st.booleans(), st.integers(0, 300)), max_size=60))
@settings(max_examples=200, deadline=None)
def test_first_fit_places_as_a_scan_of_the_live_buffers_does(steps):
    """FirstFit (live buffers kept in order) against the plain rule: the lowest aligned
    offset below which, between live buffers, the new one fits, the live ones sorted afresh;
    random allocations and frees, zero-sized ones among them, never two live ones
    overlapping."""
    from tapeml.transforms.arena import FirstFit

    arena, live, size = FirstFit(64), {}, 0
    for n, (free, nbytes) in enumerate(steps):
        if free and live:
            key = sorted(live)[nbytes % len(live)]
            arena.free(key)
            del live[key]
            continue
        rounded = -(-nbytes // 64) * 64
        offset = 0
        for start, length in sorted(live.values()):
            if offset + rounded <= start:
                break
            offset = max(offset, start + length)
        assert arena.place(n, nbytes) == offset
        assert all(offset + rounded <= s or s + length <= offset
                   for s, length in live.values() if length and rounded)
        live[n] = (offset, rounded)
        size = max(size, offset + rounded)
    assert arena.size == size

def test_workers_asleep_between_jobs_wake_for_the_next():
    """Past its spin a worker sleeps on a futex; the next job must wake it (or the caller
    would wait for it forever)."""
    import time

    parallel_for = PARALLEL_FOR(load_pool())
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


_SHARED = re.compile(r"@(job\.\w+|sleepers|lock)\b")


@pytest.mark.parametrize("triple", ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"])
def test_every_access_to_the_pools_shared_state_is_atomic(triple):
    """A plain load racing a plain store is undefined in LLVM's memory model (it only happens
    to work on x86): every load and store of a job's fields, the ticket, the lock and the
    sleeper count is atomic, and a caller publishes in the module doc's order."""
    text = pool.ir(pool.platform(triple))
    accesses = [line.strip() for line in text.splitlines()
                if _SHARED.search(line) and re.search(r"\b(load|store)\b", line)]
    assert len(accesses) > 20
    assert [a for a in accesses if " atomic " not in a] == []
    publish = text[text.index("publish:"):text.index("mine:")]
    steps = ["store atomic i64 %closed, ptr @job.ticket monotonic", "fence release",
             "store atomic ptr %fn, ptr @job.fn monotonic", "store atomic i64 0, ptr @job.done",
             "store atomic i64 %open, ptr @job.ticket release",
             "store atomic i32 %gen, ptr @job.generation seq_cst"]
    assert [publish.index(s) for s in steps] == sorted(publish.index(s) for s in steps)
    part = text[text.index("@run_part"):text.index("claim:")]
    assert "monotonic" in part and part.index("@job.chunks") < part.index("fence acquire")


_COUNT = """
define void @count(ptr %counts, i64 %start, i64 %end) {
entry:
  br label %head
head:
  %i = phi i64 [%start, %entry], [%next, %body]
  %more = icmp slt i64 %i, %end
  br i1 %more, label %body, label %done
body:
  %p = getelementptr i64, ptr %counts, i64 %i
  atomicrmw add ptr %p, i64 1 monotonic
  %next = add i64 %i, 1
  br label %head
done:
  ret void
}
"""


def test_jobs_back_to_back_each_run_every_chunk_once():
    """Thousands of short jobs, sizes and thread counts varying, so that workers often see a
    job late (its successor already published) and must neither run a chunk of it twice nor
    miss one; now and then the workers fall asleep first. Each call must return with its whole
    range counted once."""
    import time

    import llvmlite.binding as llvm

    parallel_for = PARALLEL_FOR(load_pool())
    machine = target_machine()
    module = llvm.parse_assembly(_COUNT)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    count = engine.get_function_address("count")
    rng = np.random.default_rng(1)
    counts = np.zeros(64, np.int64)
    expected = np.zeros(64, np.int64)
    for job in range(10000):
        total, threads = int(rng.integers(2, 65)), int(rng.integers(2, 6))
        if job % 2500 == 2499:
            time.sleep(0.02)
        parallel_for(count, counts.ctypes.data, total, threads)
        expected[:total] += 1
        if not np.array_equal(counts, expected):
            raise AssertionError(f"job {job} ({total} on {threads} threads): {counts - expected}")


@pytest.mark.parametrize("triple,futex", [("x86_64-unknown-linux-gnu", 202),
                                          ("x86_64-pc-linux-gnu", 202),
                                          ("aarch64-unknown-linux-gnu", 98)])
def test_the_pool_runs_on_linux_x86_64_and_aarch64(triple, futex):
    assert pool.platform(triple).futex == futex
    assert f"@syscall(i64 {futex}," in pool.ir(pool.platform(triple))


@pytest.mark.parametrize("triple", ["x86_64-apple-darwin", "arm64-apple-macosx14.0.0",
                                    "x86_64-pc-windows-msvc", "riscv64-unknown-linux-gnu",
                                    "i686-pc-linux-gnu", "x86_64-unknown-linux-gnux32",
                                    "unknown"])
def test_elsewhere_the_pool_is_one_thread_with_a_reason(triple):
    """No syscall whose number we do not know, and no abort: the range on the caller's thread."""
    target = pool.platform(triple)
    assert not target.threaded and triple in target.reason and "one thread" in target.reason
    text = pool.ir(target)
    assert "syscall" not in text and "pthread" not in text and "llvm.x86" not in text


def test_the_fallback_runs_the_whole_range_on_the_calling_thread():
    import llvmlite.binding as llvm

    machine = target_machine()
    module = llvm.parse_assembly(pool.ir(pool.platform("x86_64-apple-darwin")))
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    parallel_for = PARALLEL_FOR(engine.get_function_address("tapeml_parallel_for"))
    calls = []
    callback = PART(lambda context, start, end: calls.append((start, end,
                                                              threading.get_ident())))
    parallel_for(ctypes.cast(callback, ctypes.c_void_p), None, 10, 4)
    assert calls == [(0, 10, threading.get_ident())]


def test_the_pool_compiles_for_aarch64_linux():
    """Generated and compiled for aarch64 (not run: no such machine here): the futex is
    syscall 98 there, and the spin hint is `yield`."""
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    machine = llvm.Target.from_triple("aarch64-unknown-linux-gnu").create_target_machine()
    assembly = machine.emit_assembly(pool.compile_for(machine))
    assert "yield" in assembly and "#98" in assembly and "bl\tsyscall" in assembly
    assert "pause" not in assembly


def test_a_platform_without_the_pool_runs_programs_on_one_thread_and_says_so(monkeypatch):
    """The message reaches the user once, as a warning, and compiled programs are correct on
    one thread whatever TAPEML_NUM_THREADS says."""
    import warnings

    import llvmlite.binding as llvm

    from tapeml.codegen.gemm import host_threads

    monkeypatch.setattr(llvm, "get_default_triple", lambda: "x86_64-pc-windows-msvc")
    monkeypatch.setattr(pool, "_HOST", None)
    monkeypatch.setenv("TAPEML_NUM_THREADS", "3")
    with pytest.warns(RuntimeWarning, match="not on x86_64-pc-windows-msvc: compiled programs "
                                            "run on one thread"):
        assert host_threads() == 1
    a = RNG.standard_normal((256, 300)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once, not again
        with tapeml.profile() as stages:
            got = tapeml.jit(lambda a: ops.tanh(a @ a.T) + 1.0)(a)
    assert "outline-parallel-loops" not in [s.name for s in stages]  # one thread: nothing to share
    np.testing.assert_allclose(got, np.tanh(a.astype(np.float64) @ a.T) + 1.0, rtol=1e-4,
                               atol=1e-4)


def test_a_convolution_a_group_of_images_at_a_time_interprets_to_the_same_values(monkeypatch):
    """tape-to-loops{image_group}: a loop over groups of images, each a kernel.view of x and of
    the result, the group's im2col (parallel loops in the loop, outlined too) and its
    kernel.gemm; printed, parsed back and interpreted, the trace's values (a small convolution
    the interpreter runs in seconds, with the size thresholds off)."""
    monkeypatch.setattr(convolutions, "GROUP_BYTES", 0)
    monkeypatch.setattr(convolutions, "GROUP_FLOPS", 0)
    w = RNG.standard_normal((3, 2, 3, 3))
    x = RNG.standard_normal((4, 2, 6, 7))
    step = tapeml.trace(lambda x: nn.conv2d(x, w, padding=1), x)
    expected = step(x)
    fuse(step.module)  # the traced im2col and matmul raised into tape.conv2d
    lowered = tapeml.Program.parse(str(step))
    lower_module(lowered.module, image_group=2)
    assert outline_parallel_loops(lowered.module, min_work=0) >= 9  # a nest per tap
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, memref.MemRef, scf.Scf, Kernel):
        ctx.load_dialect(dialect)
    module = Parser(ctx, str(lowered.module)).parse_module()  # printed and parsed back
    module.verify()
    loop = next(op for op in module.walk() if isinstance(op, scf.ForOp)
                and any(isinstance(inner, kernel.ViewOp) for inner in op.body.block.ops))
    inside = [op.name for op in loop.body.block.ops]
    assert inside.count("kernel.view") == 2 and inside.count("kernel.gemm") == 1
    assert inside.count("kernel.parallel_for") >= 9
    out = np.zeros(expected.size)
    tapeml.interpret(module, lowered.name, x.reshape(-1), out)
    np.testing.assert_allclose(out.reshape(expected.shape), expected, rtol=1e-12, atol=1e-12)
