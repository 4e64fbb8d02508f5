"""LLVM for this CPU (`target_machine`, `optimized`, `object_code`), and a worker process that
compiles beside this one (`in_worker`).

llvmlite runs every call into LLVM under one lock for the whole process, so a thread compiling a
GEMM kernel while the program's own module is optimized only takes turns with it: W3's first
call spent 0.53 s waiting for its kernel with a second core idle. A process has an LLVM of its
own. Where this process may run on more than one core, the kernels go there (cpu.Prefetch), and
so does about half of a large program's functions (cpu.Share, with `compile_only`).

    the worker   this file run as a script (`python -P llvm_worker.py`): it imports llvmlite
                 and the standard library, nothing of tapeml's, so it is ready in about 0.1 s.
                 Started when a cold compile begins (`start`) or by the first request, and kept
                 for the life of the process (a process forked from this one starts its own);
                 it exits when its stdin closes
    a request    "<QQQ?": the lengths of the passes (`optimized`'s, as text), of the functions
                 to compile (`only`: "=" and their names, comma-separated; empty: all) and
                 of the module's LLVM IR, and whether codegen reduces strength (`emit`); the
                 three
    the answer   "<?Q": ok, the length; the object code, or what LLVM said was wrong
    failure      a worker that cannot start, answers an error, or dies: `in_worker` returns
                 None and the caller compiles in this process (where an error is raised as
                 it always was); after a worker dies no other is started

Both sides make the code with the same functions below, the same LLVM and the same options, so
the object code is the same bytes either way (tests/test_llvm_worker.py).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Collection, Iterator
from typing import IO

import llvmlite.binding as llvm_binding

FULL_UNROLL = 4
"""The most iterations LLVM unrolls a loop of known trip count into straight code (an LLVM
option, so for this process's LLVM). Its default follows a size threshold alone, so a loop
becomes straight code once its trip count shrinks: the GPT step at batch 8 had 14161 LLVM
instructions after O2 against 8942 at batch 16, and compiled in 2.9-3.6 s against 2.0-2.6 s
with this bound (8675); W4's step ran 14-17 against 17-19.5 ms (four alternating process
pairs, one core), W3's and the GPT step's within noise."""

MASKED_INTERLEAVING = "-enable-masked-interleaved-mem-accesses"
"""An LLVM option, set for this process's LLVM (and the worker's): the loop vectorizer may
read and write interleaved groups (x[2q], x[2q + 1]: a 2x2 pool's taps) under a mask, as wide
loads and shuffles, where a loop's short trip count makes it fold its tail into masked lanes
(a 2x2 pool backward's rows of 14 or 7 windows). Without it those groups were gathers and
scatters, one element at a time: the W4 step's 64x16x28x28 max pool backward 1331 -> 331 us
(one core, with a multiply fused), the step 10.6-10.8 -> 8.8-8.9 ms in one process with the
option toggled between compiles (two copies each, alternated); W1 and W3 the same, their
first calls too. LLVM leaves it off by default; AVX-512 has the masked loads it needs."""

PARTIAL_UNROLLING = "-unroll-allow-partial"
"""An LLVM option, set by every compile (run_passes), off for a program's loops and on for the
GEMM kernels'. On (x86's default on Zen 4) LLVM unrolls a loop whose trip count it knows but
cannot unroll whole (every loop of a program: its shapes are static) up to its micro-op
buffer's size after vectorizing it, doubling the code: W3's program 2,144 -> 1,018 lines of
optimized IR and its LLVM O2 + machine code 115-162 -> 89-91 ms, W4's 398-407 -> 302-311, the
GPT step's 564-612 -> 378-406 (one core; `-unroll-allow-partial=false`, process-wide). Its
speed the same without (W3 8.76-8.81 against 8.90-8.98 ms, W4 8.45-8.55 against 8.42-8.47,
the GPT step 35.2-35.4 against 35.8-36.1, in one process, two copies each, alternated; W1's
machine code identical: its loop's trip count is the thread's part, known at run time). The
kernels' packing loops need it (without, they move an element per turn); forced on, their
code is the same bytes as by default (x86's choice), as is the PTX of the GPU's kernels.
LLVM's options cannot be unset, only set: each compile sets it, under a lock."""

RUNTIME_UNROLLING = "-unroll-runtime"
"""An LLVM option, set off by every CPU compile (`unrolling`). On (x86's choice for a program
at a level) LLVM unrolls a loop whose trip count is known only at run time by 8, with a
remainder loop and the checks to choose: a function of loop-bounds-as-arguments' (its
outermost bound an argument) grew eightfold, the 2-layer GPT step's program 3,189 -> 5,706
LLVM instructions. Off, a program whose bounds are all constants is the same machine code
(W3's, W4's and the GPT step's assembly on one thread compared), as are the GEMM kernels that
W2, W3, W4 and the GPT step call on one and two threads (their modules' objects compared);
a 7-row tile's packing of A is no longer unrolled by 8 (products of 49 x 1024 x 1024,
7 x 4096 x 512 and 98 x 512 x 512 ran the same, in alternating processes), and on two threads
neither are the thread pool's parts (a range of iterations, known at run time). The GPU's
compile sets it on (the examples' MLP: the same PTX either way)."""

_REQUEST = struct.Struct("<QQQ?")
_ANSWER = struct.Struct("<?Q")
_INITIALIZED = False


def target_machine() -> llvm_binding.TargetMachine:
    """A new machine for this CPU and all its features (AVX-512 where there is one), O3.
    A new one each time: an MCJIT engine takes ownership of the machine it is given."""
    global _INITIALIZED
    if not _INITIALIZED:
        llvm_binding.initialize_native_target()
        llvm_binding.initialize_native_asmprinter()
        llvm_binding.set_option("tapeml", f"-unroll-full-max-count={FULL_UNROLL}")
        llvm_binding.set_option("tapeml", MASKED_INTERLEAVING)
        _INITIALIZED = True
    return llvm_binding.Target.from_default_triple().create_target_machine(
        cpu=llvm_binding.get_host_cpu_name(),
        features=llvm_binding.get_host_cpu_features().flatten(), opt=3, jit=True)


Passes = int | tuple[str, ...] | None
"""How a module is optimized: at one of LLVM's levels (0-3), by the passes named (llvmlite's
`add_<name>_pass` of a module pass manager, in order), or not at all."""


def pipeline_options(level: int) -> llvm_binding.PipelineTuningOptions:
    """LLVM's pipeline at `level`, with its SLP vectorizer (llvmlite leaves it off) from level 1
    on: it makes the side-by-side partial sums of a contiguous sum (loops/reductions.py's
    LANES) vector adds. The GPT step's 16 x 4 x 64 x 64 softmax sums: 83 -> 31 us on one
    core; W1-W4, squeezenet and ResNet-50 the same with it (paired one-core runs), W3's LLVM
    O2 77-102 against 82-91 ms."""
    options = llvm_binding.create_pipeline_tuning_options(speed_level=level)
    options.slp_vectorization = level > 0
    return options


def optimized(text: str, machine: llvm_binding.TargetMachine, passes: Passes,
              only: Collection[str] | None = None) -> llvm_binding.ModuleRef:
    """The module `text` parsed for `machine`, verified, and optimized by `passes` (run_passes);
    `only`: of its definitions, just those functions are optimized and compiled
    (`compile_only`)."""
    parsed = llvm_binding.parse_assembly(text)
    parsed.triple, parsed.data_layout = machine.triple, str(machine.target_data)
    parsed.verify()
    if only is not None:
        compile_only(parsed, only)
    if passes is not None:
        run_passes(parsed, machine, passes)
    return parsed


def run_passes(parsed: llvm_binding.ModuleRef, machine: llvm_binding.TargetMachine,
               passes: int | tuple[str, ...], partial_unrolling: bool | None = None) -> None:
    """Optimize `parsed` in place: at a level, by LLVM's pipeline (pipeline_options); named, by
    those passes in order. With LLVM's partial unrolling (PARTIAL_UNROLLING) or without it:
    by default without at a level (a program's loops) and with for named passes (the GEMM
    kernels')."""
    if partial_unrolling is None:
        partial_unrolling = not isinstance(passes, int)
    builder = llvm_binding.create_pass_builder(
        machine, pipeline_options(passes if isinstance(passes, int) else 0))
    if isinstance(passes, int):
        manager = builder.getModulePassManager()
    else:
        manager = llvm_binding.create_new_module_pass_manager()
        for name in passes:
            getattr(manager, f"add_{name}_pass")()
    with unrolling(partial=partial_unrolling):
        manager.run(parsed, builder)


@contextlib.contextmanager
def unrolling(partial: bool, runtime: bool = False) -> Iterator[None]:
    """Optimize in this block with LLVM's partial unrolling (PARTIAL_UNROLLING) or without,
    and its unrolling of loops of a trip count known at run time (RUNTIME_UNROLLING) or
    without."""
    with _OPTIONS:
        llvm_binding.set_option("tapeml", f"{PARTIAL_UNROLLING}={str(partial).lower()}")
        llvm_binding.set_option("tapeml", f"{RUNTIME_UNROLLING}={str(runtime).lower()}")
        yield


def compile_only(parsed: llvm_binding.ModuleRef, names: Collection[str],
                 globals_too: bool = True) -> None:
    """Of `parsed`'s definitions, the functions `names` are to be compiled; every other one
    (and, `globals_too`, every global variable) stays readable to LLVM but is another
    module's to define: available_externally (not emitted), and a function optnone (not
    optimized either) and noinline. The two modules' objects, linked together, are the
    program: each function compiled once, by one of them."""
    for f in parsed.functions:
        if not f.is_declaration and f.name not in names:
            f.linkage = "available_externally"
            f.add_function_attribute("noinline")
            f.add_function_attribute("optnone")
    for g in parsed.global_variables if globals_too else ():
        if not g.is_declaration:
            g.linkage = "available_externally"


def spelled(passes: Passes) -> str:
    """`passes` as text (what a request carries, and a cache key): "O2", "a,b", or ""."""
    if passes is None:
        return ""
    return f"O{passes}" if isinstance(passes, int) else ",".join(passes)


def _read_passes(text: str) -> Passes:
    if not text:
        return None
    return int(text[1:]) if text[0] == "O" else tuple(text.split(","))


_OPTIONS = threading.Lock()
"""Held while an LLVM option a compile sets (PARTIAL_UNROLLING, -disable-lsr) is in force:
LLVM's options are the process's."""


def emit(machine: llvm_binding.TargetMachine, parsed: llvm_binding.ModuleRef,
         strength_reduction: bool = True, assembly: bool = False) -> bytes | str:
    """`machine`'s object code for `parsed` (its assembly, `assembly`), with LLVM's loop
    strength reduction or without it. Without it for a program's own loops (tape-to-loops'
    affine nests, cpu.py): it was a third of their codegen (W4's step: 148 -> 93-103 ms,
    W3's, the GPT step's and squeezenet's likewise) and W3, W4, the 2-layer GPT step and
    squeezenet ran the same without it (alternating process pairs, one core); with it for the
    GEMM kernels (the CNN step ran 3-6% slower without it there), the thread pool and the
    GPU. An LLVM option is the process's: every compile of tapeml's sets it under one lock,
    and it is left at LLVM's default (on) after each."""
    with _OPTIONS:
        if not strength_reduction:
            llvm_binding.set_option("tapeml", "-disable-lsr")
        try:
            return machine.emit_assembly(parsed) if assembly else bytes(
                machine.emit_object(parsed))
        finally:
            if not strength_reduction:
                llvm_binding.set_option("tapeml", "-disable-lsr=false")


def object_code(text: str, passes: Passes, only: Collection[str] | None = None,
                strength_reduction: bool = True) -> bytes:
    """The object code of the module `text` optimized by `passes` (`only` those functions:
    `optimized`), for this CPU, with or without strength reduction (`emit`)."""
    machine = target_machine()
    return emit(machine, optimized(text, machine, passes, only), strength_reduction)


_LOCK = threading.Lock()
_WORKER: subprocess.Popen | None = None
_OWNER = 0  # the process that started _WORKER (a fork inherits the object, not the worker)
_DEAD = False


def start() -> None:
    """Start the worker now (if it is not running), to have it ready when asked."""
    with _LOCK:
        _worker()


def in_worker(text: str, passes: Passes, only: Collection[str] | None = None,
              strength_reduction: bool = True) -> bytes | None:
    """`object_code(text, passes, only, strength_reduction)` made by the worker process, or
    None where it cannot be."""
    global _DEAD
    with _LOCK:
        worker = _worker()
        if worker is None:
            return None
        try:
            how, data = spelled(passes).encode(), text.encode()
            names = b"" if only is None else ("=" + ",".join(only)).encode()
            worker.stdin.write(_REQUEST.pack(len(how), len(names), len(data),
                                             strength_reduction) + how + names)
            worker.stdin.write(data)
            worker.stdin.flush()
            ok, size = _ANSWER.unpack(_read(worker.stdout, _ANSWER.size))
            payload = _read(worker.stdout, size)
        except (OSError, EOFError, struct.error):
            _DEAD = True
            _stop(worker, at_once=True)
            return None
        return payload if ok else None


def _worker() -> subprocess.Popen | None:
    """This process's worker (started if need be), or None where there is none to be had."""
    global _WORKER, _OWNER, _DEAD
    if not _DEAD and (_WORKER is None or os.getpid() != _OWNER):
        try:
            _WORKER, _OWNER = _start(), os.getpid()
        except OSError:
            _DEAD = True
    return None if _DEAD else _WORKER


def _start() -> subprocess.Popen:
    llvmlite_home = os.path.dirname(os.path.dirname(os.path.dirname(llvm_binding.__file__)))
    path = os.pathsep.join([llvmlite_home, *filter(None, [os.environ.get("PYTHONPATH")])])
    worker = subprocess.Popen([sys.executable, "-P", os.path.abspath(__file__)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": path})
    atexit.register(_stop, worker)
    return worker


def _stop(worker: subprocess.Popen, at_once: bool = False) -> None:
    """Close the worker's input (it exits), or kill it `at_once` or if it has not exited in 5
    s; its pipes closed. Only in the process that started it (not in a fork of that one)."""
    if os.getpid() != _OWNER:
        return
    if at_once:
        worker.kill()
    for pipe in (worker.stdin, worker.stdout):
        with contextlib.suppress(OSError):
            pipe.close()
    try:
        worker.wait(timeout=5)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


def _read(stream: IO[bytes], size: int) -> bytes:
    data = stream.read(size)
    if data is None or len(data) != size:
        raise EOFError("the LLVM worker process ended")
    return data


def _serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """The worker: requests in, answers out, until its input ends."""
    while True:
        head = requests.read(_REQUEST.size)
        if len(head) < _REQUEST.size:
            return
        how, listed, size, strength_reduction = _REQUEST.unpack(head)
        passes = _read_passes(_read(requests, how).decode())
        names = _read(requests, listed).decode()
        text = _read(requests, size).decode()
        try:
            only = None if not names else names[1:].split(",") if names[1:] else []
            ok, payload = True, object_code(text, passes, only, strength_reduction)
        except Exception as error:  # noqa: BLE001 (said to the caller, which compiles it itself)
            ok, payload = False, str(error).encode()
        answers.write(_ANSWER.pack(ok, len(payload)))
        answers.write(payload)
        answers.flush()


if __name__ == "__main__":
    _serve(sys.stdin.buffer, sys.stdout.buffer)
