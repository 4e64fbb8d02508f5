"""The CPU's thread pool, written as LLVM IR and compiled once per process, by the first program
that runs on more than one thread (one on one thread, and the GEMM kernels, refer to no pool:
a kernel is passed it by its callers that share their work): compiled programs
call `tapeml_parallel_for(fn, ctx, total, threads)`, which runs `fn(ctx, start, end)` over
[0, total) on up to `threads` threads, the caller one of them. The range is cut into up to
CHUNKS contiguous chunks per thread; each thread claims another chunk when it is done with
one, so a thread on a busier core takes fewer. The caller claims from the front of the range,
the workers from its back: in a run of loops over the same range (a model's row-wise ops)
each core takes about the same rows in each, and reads what it wrote in its own cache (the
GPT step on two threads, `step.profile`, AVX-512 Xeon: its elementwise ops 17-20% and its
permutes 9% faster than with every thread claiming the next chunk from the front).

    workers     threads - 1 pthreads, started on the first job that wants them and kept: each
                waits for the job's generation to move (spinning a while with the target's
                spin-wait hint, then asleep on a futex), claims chunks until none is left
    the caller  publishes the job, wakes sleeping workers, claims chunks too, then spins until
                every chunk is done (not every worker: one that has not woken yet did none, and
                its late claim fails), yielding its core now and then
    one job     at a time: a caller that finds the pool busy (another Python thread's program)
                runs its whole loop itself, so nothing waits on anything but its own workers

The protocol, in LLVM's (C++'s) memory model. Every variable two threads touch is atomic, so
there is no data race; the orderings are the weakest that make each step below true.

    ticket   i64: the job's generation (high half), then the first chunk left and one past the
             last (16 bits each; front = back: none left, closed). A claim is a cmpxchg, while
             f < b, from (g, f, b) to (g, f + 1, b), the caller taking chunk f, or to
             (g, f, b - 1), a worker taking chunk b - 1.
    caller   (holding @lock: acquired by cmpxchg acquire, released by a release store, so the
             previous job's writes, @workers included, are its)
             1. ticket = (g, closed)                              monotonic
             2. fence release
             3. fn, ctx, total, parts, chunks = the job's         monotonic stores
             4. done = 0                                          monotonic
             5. ticket = (g, 0)                                   release
             6. generation = g                                    seq_cst
             7. sleepers read; if any, FUTEX_WAKE                 seq_cst
             8. its own claims (as a worker), then spins until done == chunks (acquire)
    worker   1. generation read, g                                acquire (seq_cst asleep)
             2. fn, ctx, total, parts, chunks read                monotonic loads
             3. fence acquire
             4. claims: cmpxchg acquire; after each chunk, done += 1 (release)

Why it holds. (a) A worker that read generation g (its 1., from the caller's 6., a release)
reads job g's fields or a later job's (caller 3. happens before). (b) If it read a later job
g' > g's fields, its claim for g fails: the fields were stored after g''s fence (2.) and read
before the worker's (3.), so g''s closing of the ticket (1.) happens before the worker's
cmpxchg, which reads that value or a later one in the ticket's order, whose generation is not
g. So a claim that succeeds ran on job g's own fields; and job g cannot end, and no caller
rewrite them, while that chunk is unfinished. Without 1. and 2. a late worker could claim
a chunk of the old generation with a newer job's `chunks` and `total`. (c) A successful
claim reads from the release sequence of 5. (the ticket's later values are claims, RMWs), so
the caller's reset of done (4.) happens before the worker's add, and every add counts. (d) The
caller's acquire read of done == chunks synchronizes with every chunk's release add: what the
chunks wrote (the program's buffers) is visible when tapeml_parallel_for returns. (e) Sleep:
the worker increments sleepers, reads generation again, and sleeps on a futex only if it is
still the old one (the kernel checks that again); the caller stores generation and then reads
sleepers. All four seq_cst: in their single total order either the caller sees the sleeper
and wakes it, or the sleeper sees the new generation and does not sleep.

Each iteration is computed exactly as alone, whichever thread runs it, so results do not
depend on the thread count. If pthread_create fails, fewer workers take part (down to none).

Platforms (`platform(triple)`, the one place the choice is made): Linux on x86-64 (futex is
syscall 202, the spin hint `pause`) and on aarch64 (futex 98, `yield`; the IR is generated and
compiled for an aarch64 triple in the tests, not run). Anywhere else `tapeml_parallel_for` runs
the whole range on the calling thread, `host_threads()` is 1, and the first compilation warns
once saying so.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import llvmlite.binding as llvm_binding

CHUNKS = 4
"""Chunks per taking-part thread: each thread claims another chunk when it finishes one, so a
thread that runs slower (a busier core, colder caches) takes fewer. (At most
(_MAX_WORKERS + 1) * CHUNKS chunks: the ticket holds a chunk's number in 16 bits.)"""

YIELD = 1 << 10
"""Spin hints the caller runs, waiting for the last chunks, between sched_yields."""

SPIN = 1 << 14
"""Spin hints a worker runs before it sleeps (about 0.1 to 0.5 ms)."""

_FUTEX_WAIT, _FUTEX_WAKE = 128, 129  # the _PRIVATE variants
_MAX_WORKERS = 255


@dataclass(frozen=True)
class Platform:
    """What the pool needs of a target: the futex syscall's number and a spin-wait hint (an
    intrinsic call and its declaration), or, where it does not know them, why not."""

    triple: str
    futex: int | None = None
    pause: str = ""
    declare: str = ""
    reason: str = ""

    @property
    def threaded(self) -> bool:
        return self.futex is not None


def platform(triple: str) -> Platform:
    """The pool's platform for an LLVM target triple: Linux on x86-64 or aarch64, else the
    one-thread fallback (no syscall, no intrinsic) with its reason."""
    parts = triple.lower().split("-")
    arch, rest = parts[0], parts[1:]
    linux = any(p.startswith("linux") for p in rest) and "gnux32" not in rest
    if linux and arch in ("x86_64", "amd64"):
        return Platform(triple, 202, "call void @llvm.x86.sse2.pause()",
                        "declare void @llvm.x86.sse2.pause()")
    if linux and arch in ("aarch64", "arm64"):
        return Platform(triple, 98, "call void @llvm.aarch64.hint(i32 1)",  # 1: yield
                        "declare void @llvm.aarch64.hint(i32)")
    return Platform(triple, reason=(
        f"tapeml: the CPU thread pool runs on Linux x86-64 and aarch64, not on {triple}: "
        "compiled programs run on one thread (TAPEML_NUM_THREADS is ignored)"))


_HOST: Platform | None = None


def host() -> Platform:
    """The platform of the target machines the CPU backend makes (LLVM's default triple).
    The first call on a platform without the pool warns, once per process."""
    global _HOST
    if _HOST is None:
        _HOST = platform(llvm_binding.get_default_triple())
        if not _HOST.threaded:
            warnings.warn(_HOST.reason, RuntimeWarning, stacklevel=2)
    return _HOST


_SERIAL = """
define void @tapeml_parallel_for(ptr %fn, ptr %ctx, i64 %total, i64 %threads) {
entry:
  call void %fn(ptr %ctx, i64 0, i64 %total)
  ret void
}
"""
"""The pool where there is none: the whole range on the calling thread."""


def ir(target: Platform) -> str:
    """The pool's LLVM IR for `target` (see the module doc), or the serial fallback."""
    if not target.threaded:
        return _SERIAL
    futex, pause = target.futex, target.pause
    return rf"""
@lock = internal global i32 0
@workers = internal global i64 0  ; read and written only by the caller holding @lock
@job.fn = internal global ptr null
@job.ctx = internal global ptr null
@job.total = internal global i64 0
@job.parts = internal global i64 0
@job.chunks = internal global i64 0
@job.ticket = internal global i64 0
@job.done = internal global i64 0
@job.generation = internal global i32 0
@sleepers = internal global i32 0

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i32 @sched_yield()
declare i64 @syscall(i64, ...)
{target.declare}

; thread p's share of job g: if it takes part, chunks claimed one at a time until none is
; left. A claim made for a job that is over (the thread saw it late) fails, whatever fields it
; read (the module doc, (b)).
define internal void @run_part(i64 %p, i32 %g) {{
entry:
  %fn = load atomic ptr, ptr @job.fn monotonic, align 8
  %ctx = load atomic ptr, ptr @job.ctx monotonic, align 8
  %total = load atomic i64, ptr @job.total monotonic, align 8
  %parts = load atomic i64, ptr @job.parts monotonic, align 8
  %chunks = load atomic i64, ptr @job.chunks monotonic, align 8
  fence acquire  ; a later job's fields read here: its closed ticket is what the claim sees
  %mine = icmp ult i64 %p, %parts
  br i1 %mine, label %claim, label %done
claim:
  %t = load atomic i64, ptr @job.ticket monotonic, align 8  ; the cmpxchg checks it
  %tg64 = lshr i64 %t, 32
  %tg = trunc i64 %tg64 to i32
  %same = icmp eq i32 %tg, %g
  br i1 %same, label %check, label %done
check:
  %f64 = lshr i64 %t, 16
  %f = and i64 %f64, 65535  ; the first chunk left
  %back = and i64 %t, 65535  ; one past the last
  %more = icmp ult i64 %f, %back
  br i1 %more, label %take, label %done
take:  ; the caller from the front, the workers from the back
  %front = icmp eq i64 %p, 0
  %last = sub i64 %back, 1
  %c = select i1 %front, i64 %f, i64 %last
  %step = select i1 %front, i64 65536, i64 -1
  %t1 = add i64 %t, %step
  %pair = cmpxchg ptr @job.ticket, i64 %t, i64 %t1 acquire monotonic
  %ok = extractvalue {{ i64, i1 }} %pair, 1
  br i1 %ok, label %run, label %claim
run:
  %a = mul i64 %total, %c
  %start = udiv i64 %a, %chunks
  %c1 = add i64 %c, 1
  %b = mul i64 %total, %c1
  %end = udiv i64 %b, %chunks
  call void %fn(ptr %ctx, i64 %start, i64 %end)
  atomicrmw add ptr @job.done, i64 1 release  ; the chunk's writes, to the caller's acquire
  br label %claim
done:
  ret void
}}

define internal ptr @worker(ptr %arg) {{
entry:
  %packed = ptrtoint ptr %arg to i64
  %index = and i64 %packed, 65535
  %born = lshr i64 %packed, 16
  %first = trunc i64 %born to i32  ; the generation when it was started: the next one is its
  br label %wait
wait:
  %seen = phi i32 [%first, %entry], [%seen, %spin], [%seen, %slept], [%now, %ran]
  %spins = phi i32 [0, %entry], [%spins1, %spin], [0, %slept], [0, %ran]
  %g = load atomic i32, ptr @job.generation acquire, align 4
  %new = icmp ne i32 %g, %seen
  br i1 %new, label %work, label %idle
idle:
  %spins1 = add i32 %spins, 1
  %long = icmp ugt i32 %spins1, {SPIN}
  br i1 %long, label %sleep, label %spin
spin:
  {pause}
  br label %wait
sleep:  ; the sleep handshake (the module doc, (e)): seq_cst both sides
  atomicrmw add ptr @sleepers, i32 1 seq_cst
  %g2 = load atomic i32, ptr @job.generation seq_cst, align 4
  %still = icmp eq i32 %g2, %seen
  br i1 %still, label %futex, label %awake
futex:
  %seen64 = zext i32 %seen to i64
  call i64 (i64, ...) @syscall(i64 {futex}, ptr @job.generation, i64 {_FUTEX_WAIT},
                               i64 %seen64, ptr null)
  br label %awake
awake:
  atomicrmw sub ptr @sleepers, i32 1 seq_cst
  br label %slept
slept:
  br label %wait
work:
  %now = phi i32 [%g, %wait]
  call void @run_part(i64 %index, i32 %now)
  br label %ran
ran:
  br label %wait
}}

; starts workers until there are `want` (fewer if pthread_create fails); how many there are
define internal i64 @start_workers(i64 %want) {{
entry:
  %tid = alloca i64
  %have = load i64, ptr @workers
  br label %loop
loop:
  %n = phi i64 [%have, %entry], [%n1, %started]
  %more = icmp ult i64 %n, %want
  br i1 %more, label %create, label %done
create:
  %n1 = add i64 %n, 1
  %now = load atomic i32, ptr @job.generation monotonic, align 4  ; only this caller writes it
  %now64 = zext i32 %now to i64
  %born = shl i64 %now64, 16
  %packed = or i64 %born, %n1
  %arg = inttoptr i64 %packed to ptr
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @worker, ptr %arg)
  %ok = icmp eq i32 %rc, 0
  br i1 %ok, label %started, label %done
started:
  %t = load i64, ptr %tid
  call i32 @pthread_detach(i64 %t)
  store i64 %n1, ptr @workers
  br label %loop
done:
  %count = phi i64 [%n, %loop], [%n, %create]
  ret i64 %count
}}

define void @tapeml_parallel_for(ptr %fn, ptr %ctx, i64 %total, i64 %threads) {{
entry:
  %few = icmp ult i64 %threads, 2
  %small = icmp ult i64 %total, 2
  %alone = or i1 %few, %small
  br i1 %alone, label %serial, label %claim
claim:
  %pair = cmpxchg ptr @lock, i32 0, i32 1 acquire monotonic
  %free = extractvalue {{ i32, i1 }} %pair, 1
  br i1 %free, label %setup, label %serial
setup:
  %capped = call i64 @llvm.umin.i64(i64 %threads, i64 {_MAX_WORKERS + 1})
  %want = sub i64 %capped, 1
  %workers = call i64 @start_workers(i64 %want)
  %some = icmp ugt i64 %workers, 0
  br i1 %some, label %publish, label %unclaim
unclaim:
  store atomic i32 0, ptr @lock release, align 4
  br label %serial
publish:  ; steps 1. to 7. of the module doc
  %all = add i64 %workers, 1
  %some_parts = call i64 @llvm.umin.i64(i64 %all, i64 %threads)
  %parts = call i64 @llvm.umin.i64(i64 %some_parts, i64 %total)
  %split = mul i64 %parts, {CHUNKS}
  %chunks = call i64 @llvm.umin.i64(i64 %split, i64 %total)
  %old = load atomic i32, ptr @job.generation monotonic, align 4
  %gen = add i32 %old, 1
  %gen64 = zext i32 %gen to i64
  %closed = shl i64 %gen64, 32  ; no chunk left (front 0, back 0)
  store atomic i64 %closed, ptr @job.ticket monotonic, align 8
  fence release  ; the closed ticket before the fields, to a late worker that reads them
  store atomic ptr %fn, ptr @job.fn monotonic, align 8
  store atomic ptr %ctx, ptr @job.ctx monotonic, align 8
  store atomic i64 %total, ptr @job.total monotonic, align 8
  store atomic i64 %parts, ptr @job.parts monotonic, align 8
  store atomic i64 %chunks, ptr @job.chunks monotonic, align 8
  store atomic i64 0, ptr @job.done monotonic, align 8
  %open = or i64 %closed, %chunks  ; chunks [0, chunks) left
  store atomic i64 %open, ptr @job.ticket release, align 8
  store atomic i32 %gen, ptr @job.generation seq_cst, align 4
  %asleep = load atomic i32, ptr @sleepers seq_cst, align 4
  %wake = icmp ne i32 %asleep, 0
  br i1 %wake, label %futex, label %mine
futex:
  call i64 (i64, ...) @syscall(i64 {futex}, ptr @job.generation, i64 {_FUTEX_WAKE},
                               i64 2147483647)
  br label %mine
mine:
  call void @run_part(i64 0, i32 %gen)
  br label %join
join:  ; until every chunk is done (not every worker: one that never woke did none)
  %waited = phi i32 [0, %mine], [%waited1, %pause], [0, %yield]
  %finished = load atomic i64, ptr @job.done acquire, align 8
  %complete = icmp eq i64 %finished, %chunks
  br i1 %complete, label %release, label %pause
pause:
  {pause}
  %waited1 = add i32 %waited, 1
  %long = icmp ugt i32 %waited1, {YIELD}
  br i1 %long, label %yield, label %join
yield:  ; the worker may be waiting for this core (the other is busy elsewhere)
  call i32 @sched_yield()
  br label %join
release:
  store atomic i32 0, ptr @lock release, align 4
  ret void
serial:
  call void %fn(ptr %ctx, i64 0, i64 %total)
  ret void
}}

declare i64 @llvm.umin.i64(i64, i64)
"""


def compile_for(machine: llvm_binding.TargetMachine) -> llvm_binding.ModuleRef:
    """The pool for `machine`'s triple, parsed and verified. No IR passes: it is written in
    SSA form, and its paths are waits and a few atomic operations. O2 cost a cold first call
    13-22 ms (a tenth of W3's kernel; its code 306 instructions against 265 without), and W1,
    W3 and W4 on two threads ran the same without it (alternating process pairs: 1.52-1.56,
    3.44-3.71 and 5.79-5.87 ms against 1.56-1.61, 3.60-3.69 and 5.80-5.83)."""
    parsed = llvm_binding.parse_assembly(ir(platform(machine.triple)))
    parsed.triple, parsed.data_layout = machine.triple, str(machine.target_data)
    parsed.verify()
    return parsed


_LOCK = threading.Lock()
_ENGINE = None


def loaded() -> bool:
    """The pool is loaded in this process (`load`)."""
    return _ENGINE is not None


def load(make_engine: Callable[[], Any]) -> int:
    """Load the pool once per process and publish `tapeml_parallel_for` to the programs MCJIT
    links later; its address. `make_engine()` gives an MCJIT engine defining it, made of
    `compile_for`'s module (cpu.load_pool: or its object code from the disk cache)."""
    global _ENGINE
    with _LOCK:
        if _ENGINE is None:
            engine = make_engine()
            llvm_binding.add_symbol("tapeml_parallel_for",
                                    engine.get_function_address("tapeml_parallel_for"))
            _ENGINE = engine
        return _ENGINE.get_function_address("tapeml_parallel_for")
