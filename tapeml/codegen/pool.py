"""The CPU's thread pool, written as LLVM IR and compiled once per process: compiled programs
call `tapeml_parallel_for(fn, ctx, total, threads)`, which runs `fn(ctx, start, end)` over
[0, total) on up to `threads` threads, the caller one of them. The range is cut into up to
CHUNKS contiguous chunks per thread; each thread claims the next chunk when it is done with
one, so a thread on a busier core takes fewer.

    workers     threads - 1 pthreads, started on the first job that wants them and kept: each
                waits for the job counter to move (spinning a while with `pause`, then asleep
                on a futex), claims chunks until none is left and counts itself done
    the caller  publishes the job (function, context, total, threads, chunks), bumps the
                counter, wakes sleeping workers, claims chunks too, then spins until every
                chunk is done (not every worker: one that has not woken yet did none, and its
                late claim fails), yielding its core now and then
    one job     at a time: a caller that finds the pool busy (another Python thread's program)
                runs its whole loop itself, so nothing waits on anything but its own workers

Each iteration is computed exactly as alone, whichever thread runs it, so results do not
depend on the thread count. If pthread_create fails, fewer workers take part (down to none).
Linux x86-64 (futex through syscall 202), as the CPU backend.
"""

from __future__ import annotations

import threading

import llvmlite.binding as llvm_binding

CHUNKS = 4
"""Chunks per taking-part thread: each thread claims the next chunk when it finishes one, so a
thread that runs slower (a busier core, colder caches) takes fewer."""

YIELD = 1 << 10
"""pause instructions the caller spins, waiting for the last chunks, between sched_yields."""

SPIN = 1 << 14
"""pause instructions a worker spins before it sleeps (about 0.1 to 0.5 ms)."""

_FUTEX_WAIT, _FUTEX_WAKE = 128, 129  # the _PRIVATE variants
_MAX_WORKERS = 255

IR = rf"""
@lock = internal global i32 0
@workers = internal global i64 0
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
declare i64 @syscall(i64, ...)
declare void @llvm.x86.sse2.pause()

; thread p's share of job g: if it takes part, chunks claimed one at a time until none is
; left. The ticket holds the job's generation (high half) and its next chunk (low half): a
; claim made for a job that is over (the thread saw it late) fails, whatever fields it read.
define internal void @run_part(i64 %p, i32 %g) {{
entry:
  %fn = load ptr, ptr @job.fn
  %ctx = load ptr, ptr @job.ctx
  %total = load i64, ptr @job.total
  %parts = load i64, ptr @job.parts
  %chunks = load i64, ptr @job.chunks
  %mine = icmp ult i64 %p, %parts
  br i1 %mine, label %claim, label %done
claim:
  %t = load atomic i64, ptr @job.ticket seq_cst, align 8
  %tg64 = lshr i64 %t, 32
  %tg = trunc i64 %tg64 to i32
  %same = icmp eq i32 %tg, %g
  br i1 %same, label %check, label %done
check:
  %c = and i64 %t, 4294967295
  %more = icmp ult i64 %c, %chunks
  br i1 %more, label %take, label %done
take:
  %t1 = add i64 %t, 1
  %pair = cmpxchg ptr @job.ticket, i64 %t, i64 %t1 seq_cst seq_cst
  %ok = extractvalue {{ i64, i1 }} %pair, 1
  br i1 %ok, label %run, label %claim
run:
  %a = mul i64 %total, %c
  %start = udiv i64 %a, %chunks
  %c1 = add i64 %c, 1
  %b = mul i64 %total, %c1
  %end = udiv i64 %b, %chunks
  call void %fn(ptr %ctx, i64 %start, i64 %end)
  atomicrmw add ptr @job.done, i64 1 seq_cst
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
  %g = load atomic i32, ptr @job.generation seq_cst, align 4
  %new = icmp ne i32 %g, %seen
  br i1 %new, label %work, label %idle
idle:
  %spins1 = add i32 %spins, 1
  %long = icmp ugt i32 %spins1, {SPIN}
  br i1 %long, label %sleep, label %spin
spin:
  call void @llvm.x86.sse2.pause()
  br label %wait
sleep:
  atomicrmw add ptr @sleepers, i32 1 seq_cst
  %g2 = load atomic i32, ptr @job.generation seq_cst, align 4
  %still = icmp eq i32 %g2, %seen
  br i1 %still, label %futex, label %awake
futex:
  %seen64 = zext i32 %seen to i64
  call i64 (i64, ...) @syscall(i64 202, ptr @job.generation, i64 {_FUTEX_WAIT}, i64 %seen64,
                               ptr null)
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
  %now = load atomic i32, ptr @job.generation seq_cst, align 4
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
  %pair = cmpxchg ptr @lock, i32 0, i32 1 seq_cst seq_cst
  %free = extractvalue {{ i32, i1 }} %pair, 1
  br i1 %free, label %setup, label %serial
setup:
  %capped = call i64 @llvm.umin.i64(i64 %threads, i64 {_MAX_WORKERS + 1})
  %want = sub i64 %capped, 1
  %workers = call i64 @start_workers(i64 %want)
  %some = icmp ugt i64 %workers, 0
  br i1 %some, label %publish, label %unclaim
unclaim:
  store atomic i32 0, ptr @lock seq_cst, align 4
  br label %serial
publish:
  %all = add i64 %workers, 1
  %some_parts = call i64 @llvm.umin.i64(i64 %all, i64 %threads)
  %parts = call i64 @llvm.umin.i64(i64 %some_parts, i64 %total)
  %split = mul i64 %parts, {CHUNKS}
  %chunks = call i64 @llvm.umin.i64(i64 %split, i64 %total)
  %old = load atomic i32, ptr @job.generation seq_cst, align 4
  %gen = add i32 %old, 1
  %gen64 = zext i32 %gen to i64
  %open = shl i64 %gen64, 32
  %closed = or i64 %open, 4294967295
  store atomic i64 %closed, ptr @job.ticket seq_cst, align 8  ; no claim while fields change
  store ptr %fn, ptr @job.fn
  store ptr %ctx, ptr @job.ctx
  store i64 %total, ptr @job.total
  store i64 %parts, ptr @job.parts
  store i64 %chunks, ptr @job.chunks
  store atomic i64 0, ptr @job.done seq_cst, align 8
  store atomic i64 %open, ptr @job.ticket seq_cst, align 8
  store atomic i32 %gen, ptr @job.generation seq_cst, align 4
  %asleep = load atomic i32, ptr @sleepers seq_cst, align 4
  %wake = icmp ne i32 %asleep, 0
  br i1 %wake, label %futex, label %mine
futex:
  call i64 (i64, ...) @syscall(i64 202, ptr @job.generation, i64 {_FUTEX_WAKE}, i64 2147483647)
  br label %mine
mine:
  call void @run_part(i64 0, i32 %gen)
  br label %join
join:  ; until every chunk is done (not every worker: one that never woke did none)
  %waited = phi i32 [0, %mine], [%waited1, %pause], [0, %yield]
  %finished = load atomic i64, ptr @job.done seq_cst, align 8
  %complete = icmp eq i64 %finished, %chunks
  br i1 %complete, label %release, label %pause
pause:
  call void @llvm.x86.sse2.pause()
  %waited1 = add i32 %waited, 1
  %long = icmp ugt i32 %waited1, {YIELD}
  br i1 %long, label %yield, label %join
yield:  ; the worker may be waiting for this core (the other is busy elsewhere)
  call i64 (i64, ...) @syscall(i64 24)
  br label %join
release:
  store atomic i32 0, ptr @lock seq_cst, align 4
  ret void
serial:
  call void %fn(ptr %ctx, i64 0, i64 %total)
  ret void
}}

declare i64 @llvm.umin.i64(i64, i64)
"""

_LOCK = threading.Lock()
_ENGINE = None


def load(machine_factory) -> int:
    """Compile the pool once per process and publish `tapeml_parallel_for` to the programs
    MCJIT links later; its address. `machine_factory()` makes a host target machine."""
    global _ENGINE
    with _LOCK:
        if _ENGINE is None:
            machine = machine_factory()
            parsed = llvm_binding.parse_assembly(IR)
            parsed.triple, parsed.data_layout = machine.triple, str(machine.target_data)
            parsed.verify()
            passes = llvm_binding.create_pass_builder(
                machine, llvm_binding.create_pipeline_tuning_options(speed_level=2))
            passes.getModulePassManager().run(parsed, passes)
            engine = llvm_binding.create_mcjit_compiler(parsed, machine)
            engine.finalize_object()
            llvm_binding.add_symbol("tapeml_parallel_for",
                                    engine.get_function_address("tapeml_parallel_for"))
            _ENGINE = engine
        return _ENGINE.get_function_address("tapeml_parallel_for")
