"""The CPU backend: tape -> tape-fuse -> tape-to-loops -> outline-parallel-loops (more than
one thread) -> plan-arena -> convert-scf-to-cf -> convert-loops-to-llvm ->
LLVM IR (llvm_text, else xDSL's convert_module) -> LLVM O2 for the host CPU and its
features -> MCJIT -> a function over numpy buffers.

The compiled function takes one pointer per input and per output buffer, then the arena's.
`Native.__call__` checks every argument's shape and dtype against the program before any
pointer is passed (a non-contiguous array is copied first), and returns fresh output arrays
each call.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import re
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import IO, Any

import llvmlite
import llvmlite.binding as llvm_binding
import numpy as np
from xdsl.backend.llvm.convert import convert_module
from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target as XTarget

from tapeml import checks
from tapeml.codegen import (
    data,
    disk_cache,
    llvm_text,
    llvm_worker,
    marks,
    perf_map,
    pool,
    shared_code,
    split,
)
from tapeml.codegen.arguments import Argument, checked, signature
from tapeml.codegen.gemm import (
    POOL,
    Target,
    Variant,
    caller,
    host_threads,
    kernel,
    tiles_module,
    tiles_of,
    transposed_module,
    transposed_symbol,
    variant,
)
from tapeml.codegen.gemm.target import compiled_for_threads, cores
from tapeml.codegen.gemm.writer import WIDE
from tapeml.codegen.llvm_worker import target_machine
from tapeml.codegen.outputs import Outputs
from tapeml.codegen.stages import Stages, run_pipeline
from tapeml.dialects import kernel as kernel_dialect
from tapeml.dialects.kernel import GemmSpec, declared_kernels
from tapeml.profile import KernelProfile, KernelTime, profiling, record
from tapeml.transforms import per_example
from tapeml.transforms.arena import ALIGN
from tapeml.transforms.bound_arguments import SHARED_CODE_ATTR
from tapeml.transforms.merge_nests import MAY_ALIAS_ATTR
from tapeml.transforms.pipelines import cpu_pipeline
from tapeml.transforms.to_llvm import SYMBOL_PREFIX
from tapeml.transforms.to_loops import PROFILE_ATTR

LLVM_LOCK = threading.Lock()  # compiling with llvmlite is not thread-safe; running is


def optimize(module: Any, machine: llvm_binding.TargetMachine, detached: Sequence[str] = ()
             ) -> tuple[str, Any]:
    """An llvm-dialect module as LLVM IR text, and parsed, verified and optimized (at
    PROGRAM_LEVEL); the globals data.detach made pointers, `detached`, null."""
    text, parsed = lowered(module, machine, detached)
    optimize_program(parsed, machine)
    return text, parsed


def optimize_program(parsed: Any, machine: llvm_binding.TargetMachine) -> None:
    llvm_worker.run_passes(parsed, machine, PROGRAM_LEVEL)


def lowered(module: Any, machine: llvm_binding.TargetMachine, detached: Sequence[str] = ()
            ) -> tuple[str, Any]:
    """`optimize`'s module before LLVM's passes: its text (`llvm_ir_text`), and parsed,
    verified, its repeated loop nests merged (`parsed_program`)."""
    text = llvm_ir_text(module, machine.triple, str(machine.target_data), detached)
    return text, parsed_program(text, machine)


def parsed_program(text: str, machine: llvm_binding.TargetMachine) -> Any:
    """A program's LLVM IR `text` parsed, verified, its repeated loop nests merged
    (merge_loop_nests)."""
    parsed = llvm_binding.parse_assembly(text)
    parsed.verify()
    merge_loop_nests(parsed, machine)
    return parsed


def shared_names(module: Any) -> set[str]:
    """The functions of the llvm-dialect `module` marked as code to share
    (loop-bounds-as-arguments': tapeml/codegen/shared_code.py)."""
    return {op.sym_name.data for op in module.ops
            if isinstance(op, llvm.FuncOp) and SHARED_CODE_ATTR in op.attributes}


def llvm_ir_text(module: Any, triple: str, data_layout: str, detached: Sequence[str] = (),
                 direct: bool = True) -> str:
    """The llvm-dialect `module` as a program's LLVM IR: the globals data.detach made
    pointers, `detached`, defined null; every pointer parameter of a defined function noalias
    (distinct buffers: inputs, fresh outputs, allocations), but in merge-loop-nests' runs
    that may alias; the functions it calls noinline (merge-loop-nests' stay out of line);
    every definition asking for the widest vectors (_prefer_wide_vectors). Written by llvm_text
    (`direct`) where it can, else by xDSL's convert_module and llvmlite's printer; with
    TAPEML_CHECKS, by both, and the texts compared (an AssertionError where they differ)."""
    called = {op.callee.root_reference.data for op in module.walk()
              if isinstance(op, llvm.CallOp)}
    aliased = {op.sym_name.data for op in module.ops
               if isinstance(op, llvm.FuncOp) and MAY_ALIAS_ATTR in op.attributes}
    text = None
    if direct:
        with contextlib.suppress(llvm_text.Unsupported):
            text = llvm_text.llvm_ir(module, triple, data_layout, null_globals=detached,
                                     noalias=lambda name: name not in aliased,
                                     noinline=called, attributes=WIDE)
        if text is not None and not checks.enabled():
            return text
    ir_module = convert_module(module, fallback_target_triple=triple)
    ir_module.data_layout = data_layout
    data.initialize(ir_module, list(detached))
    for function in ir_module.functions:
        if not function.is_declaration:
            for arg in function.args:
                if arg.type.is_pointer and function.name not in aliased:
                    arg.add_attribute("noalias")
            if function.name in called:
                function.attributes.add("noinline")
    through_llvmlite = _prefer_wide_vectors(str(ir_module))
    if text is not None and text != through_llvmlite:  # (TAPEML_CHECKS: both are written)
        raise AssertionError("tapeml: llvm_text wrote other LLVM IR than xDSL's convert_module:"
                             f"\n{_first_difference(text, through_llvmlite)}")
    return through_llvmlite


def _first_difference(ours: str, theirs: str) -> str:
    for number, (a, b) in enumerate(zip(ours.splitlines(), theirs.splitlines(),
                                        strict=False), 1):
        if a != b:
            return f"line {number}: {a!r}\nxDSL's: {b!r}"
    return f"{ours.count(chr(10))} lines against xDSL's {theirs.count(chr(10))}"


def merge_loop_nests(parsed: Any, machine: llvm_binding.TargetMachine) -> int:
    """Before optimizing: the loop nests that occur more than once (a model's repeated layers
    lower to the same nests over other buffers) become one function each, kept out of line, so
    each is optimized and compiled once; how many there are. Each top-level loop nest is
    extracted into a function (LLVM's loop-extract), functions that are the same become one
    (LLVM's mergefunc), and those left with one call are inlined back (out of line, a nest
    loses what its caller knows of its buffers: the CNN step of bench/ ran 15% slower with
    every nest extracted). The GPT step of bench/ (2 layers): 285 nests, 91 distinct; LLVM O2
    10.4 s -> 0.9 s, and the step ran 84 -> 64 ms (LLVM optimizes one huge function worse)."""
    before = {f.name for f in parsed.functions}
    builder = llvm_binding.create_pass_builder(
        machine, llvm_binding.create_pipeline_tuning_options(speed_level=0))
    extract = llvm_binding.create_new_module_pass_manager()
    extract.add_loop_simplify_pass()
    extract.add_loop_extract_pass()
    extract.add_merge_functions_pass()
    extract.run(parsed, builder)
    nests = [f for f in parsed.functions if f.name not in before]
    if not nests:
        return 0
    calls = _calls(parsed, [f.name for f in nests])
    shared = 0
    for f in nests:
        if calls[f.name] > 1:
            f.add_function_attribute("noinline")
            shared += 1
        else:
            f.add_function_attribute("alwaysinline")
    inline = llvm_binding.create_new_module_pass_manager()
    inline.add_always_inliner_pass()
    inline.add_global_dead_code_eliminate_pass()
    inline.run(parsed, builder)
    return shared


def _calls(parsed: Any, names: Sequence[str]) -> dict[str, int]:
    """How many calls of each of the functions `names`, defined in `parsed`, it makes: its text
    has `@name(` at each call and at the definition. (Walking its instructions through
    llvmlite is an FFI call per instruction: 35 ms for the CNN step's.)"""
    text = str(parsed)
    return {name: text.count(f"@{_ir_name(name)}(") - 1 for name in names}


_BARE = re.compile(r"[-a-zA-Z$._][-a-zA-Z$._0-9]*")


def _ir_name(name: str) -> str:
    """`name` as LLVM IR writes it after an @ (LLVM's printEscapedString): bare, or quoted
    with a backslash doubled and each other byte of its UTF-8 outside printable ASCII, and
    each quote, as \\XX."""
    if _BARE.fullmatch(name):
        return name
    return '"' + "".join("\\\\" if b == 92 else chr(b) if 32 <= b < 127 and b != 34
                         else f"\\{b:02X}" for b in name.encode()) + '"'


PROGRAM_LEVEL = 2
"""LLVM's level for the program (its loops; the kernels have their own). One-process A/Bs
here: the W4 step ran 12% faster at O2 than at O3 (17.5-18.7 against 20.0-21.4 ms, and
15.3 against 16.9 ms on two threads), W3's the same; O1 was in between."""
KERNEL_PASSES = ("instruction_combine", "simplify_cfg", "loop_simplify", "loop_rotate",
                 "new_gvn", "instruction_combine", "loop_unroll", "instruction_combine",
                 "simplify_cfg", "aggressive_dce")
"""LLVM's passes for the generated GEMM kernels. Their IR is already what the machine should
run (an explicit micro-kernel, packing loops): what it needs of LLVM is clean-up and the
packing loops unrolled. W3's kernel compiled in two thirds of O2's time this way (0.40-0.43 s
against 0.56-0.64 s, one core, on a slow day; O3: slower still, and no faster code), and W2
(n=512, 1024), W3, W4 and squeezenet at batch 8 ran the same in alternating processes (W3
8.61-8.98 ms either way; squeezenet medians 80.5 and 81.2 ms of five); with the clean-up
alone (no unrolling) it compiled faster still but W3 ran 3-5% slower: its packing loops
moved an element per turn."""
TILES_PASSES = ("instruction_combine", "simplify_cfg", "loop_simplify", "loop_rotate",
                "loop_unroll", "instruction_combine", "simplify_cfg", "aggressive_dce")
"""... and for their tiles' modules (the micro-kernels, A's packing): KERNEL_PASSES without
new_gvn and the instcombine after it, which found nothing there: W3's tiles (the 16 x 16
f32 ones W4's and the GPT step's products call too) compiled 116 -> 100 ms (one core) to the
same machine code, as did 224 of 264 tiles' modules (every height of f32 and f64, AVX-512 and
AVX2, A's stride 1 or not, windows or not; assembly compared); those of tiles 1 and 2 rows
high pack A with other instructions, as fast (bench/HISTORY.md)."""
_KERNELS: dict[str, Any] = {}  # kernel symbol -> the engine that holds it (published)
_KERNELS_LOCK = threading.Lock()


@dataclass(frozen=True)
class KernelModule:
    """One of a kernel's modules (kernel_modules)."""

    prefix: str
    text: Callable[[], str]
    """Writes its LLVM IR text: written only to be compiled (a fifth of W3's first call with
    its kernels cached was writing their text to find their key)."""
    published: list[str]
    """The symbols callers link to."""
    passes: tuple[str, ...]
    """LLVM's passes for it (KERNEL_PASSES, TILES_PASSES)."""

    def ir(self, machine: llvm_binding.TargetMachine, optimized: bool = True) -> Any:
        """Parsed (and optimized by its passes)."""
        return llvm_worker.optimized(self.text(), machine, self.passes if optimized else None)


def kernel_modules(v: Variant, transposed: bool = False) -> list[KernelModule]:
    """The modules of the kernel `v` (gemm.Variant): the kernel's, then its tiles', then,
    where its callers store a C `transposed`, its store for that (gemm.transposed_module)."""
    tiles = [f"{v.tiles}.prepack_a", *(f for f in tiles_of(v) if f)]
    store = transposed_symbol(v)
    return [KernelModule(v.symbol, lambda: kernel(v),
                         [v.symbol, f"{v.symbol}.prepack_b", f"{v.symbol}.transpose"],
                         KERNEL_PASSES),
            KernelModule(v.tiles, lambda: tiles_module(v), tiles, TILES_PASSES),
            *([KernelModule(store, lambda: transposed_module(v), [store], KERNEL_PASSES)]
              if transposed else [])]


def stores_transposed(specs: Iterable[GemmSpec], host: Target) -> set[Variant]:
    """The kernels some of `specs` call with a C stored transposed: those load their store for
    it (kernel_modules' third)."""
    return {variant(spec, host) for spec in specs if spec.c_transposed}


Made = tuple[bytes, str, str]
"""A module's object code, where it came from ("disk cache", "compiled", "compiled in a
worker process") and its disk cache key ("" without a cache): `cached_code`."""


def cached_code(what: str, source: str, build: Any,
                elsewhere: Callable[[], bytes | None] | None = None, store: bool = True
                ) -> Made:
    """A module's object code from the disk cache (keyed by `what`, `source` and the
    machine), else from `elsewhere()` where that makes it, else compiled here from
    `build(machine)` (the module parsed and optimized); stored in the cache when made (by
    the caller, `stored`, where not `store`). An entry from the cache is checked when it is
    loaded (`cached_engine`)."""
    cache = disk_cache.default()
    key = disk_cache.key(what, source, *machine_key()) if cache is not None else ""
    payload = cache.get(key) if cache is not None else None
    if payload is not None:
        return payload, "disk cache", key
    code = elsewhere() if elsewhere is not None else None
    origin = "compiled" if code is None else "compiled in a worker process"
    if code is None:
        machine = target_machine()
        code = llvm_worker.emit(machine, build(machine))
    if store:
        stored((code, origin, key))
    return code, origin, key


def stored(made: Made) -> None:
    """`cached_code`'s code put in the disk cache, where it was made (not read from there)."""
    code, origin, key = made
    cache = disk_cache.default()
    if cache is not None and origin != "disk cache":
        cache.put(key, code)


def cached_engine(what: str, source: str, build: Any, symbol: str,
                  elsewhere: Callable[[], bytes | None] | None = None,
                  made: Made | None = None) -> tuple[Any, str]:
    """An MCJIT engine defining `symbol` and where its code came from: `made`, or
    `cached_code(what, source, build, elsewhere)`. An entry of the disk cache that is whole
    but does not define `symbol` is deleted and the module compiled here."""
    code, origin, key = made or cached_code(what, source, build, elsewhere)
    engine = object_engine(code)
    if origin != "disk cache" or engine.get_function_address(symbol):
        return engine, origin
    cache = disk_cache.default()
    if cache is not None:
        cache.discard(key)
    return cached_engine(what, source, build, symbol)


def load_pool(in_worker: bool = False, made: Made | None = None) -> int:
    """The thread pool (pool.py), loaded once per process through the disk cache (`made`:
    its code made already; `in_worker`: compiled by llvm_worker's process, where it can be);
    the address of `tapeml_parallel_for`. Only for code that calls it: a process whose
    programs run on one thread never loads it (W3's cold first call on one core: 12-19 ms
    less, the pool's compile)."""
    def engine() -> Any:
        source, build, elsewhere = _pool_module(in_worker)
        return cached_engine("thread pool", source, build, "tapeml_parallel_for", elsewhere,
                             made)[0]

    return pool.load(engine)


def _pool_module(in_worker: bool) -> tuple[str, Any, Callable[[], bytes | None] | None]:
    """cached_code's source, build and elsewhere for the thread pool."""
    source = pool.ir(pool.platform(machine_key()[0]))
    return (source, pool.compile_for,
            (lambda: llvm_worker.in_worker(source, None)) if in_worker else None)


_ORIGINS = ("loaded", "disk cache", "compiled in a worker process", "compiled")


def load_kernel(v: Variant, in_worker: bool = False, pooled: bool = False,
                transposed: bool = False) -> str:
    """Make the kernel `v` callable from every program MCJIT links from now on: each of its
    modules (kernel_modules; its store into a C stored `transposed` where asked) compiled
    once per process (`in_worker`: by llvm_worker's process, where it can be) and loaded in
    an engine of its own (or its object code loaded from the disk cache, where it is stored
    once compiled) and its symbols published; where it came from, the costliest of the
    modules' ("loaded": this process had it). `pooled`: the thread pool too (the program
    runs on more than one thread; a kernel refers to no pool, its callers pass it). The code
    of the pool and of the modules is made before anything is loaded: a worker process
    making it is kept busy (loading the pool here first, while the caller's thread ran the
    passes, held the worker up 110 ms in W3's first call on two cores)."""
    with _KERNELS_LOCK:
        todo = [module for module in kernel_modules(v, transposed)
                if module.prefix not in _KERNELS]
        sources = [f"{module.prefix} kc={v.kc} {disk_cache.sources_digest()} "
                   f"{llvm_worker.spelled(module.passes)}"  # (all else its text reads)
                   for module in todo]
        pool_made = (cached_code("thread pool", *_pool_module(in_worker), store=False)
                     if pooled and not pool.loaded() else None)
        made = [cached_code("gemm kernel", source, module.ir,
                            (lambda module=module: llvm_worker.in_worker(module.text(),
                                                                         module.passes))
                            if in_worker else None, store=False)
                for source, module in zip(sources, todo, strict=True)]
        for code in ([pool_made] if pool_made else []) + made:  # (after the compiles: a
            stored(code)  # put's file calls, each waiting for the GIL, held a worker up 17 ms)
        if pool_made:
            load_pool(made=pool_made)
        origins = ["loaded"]
        for source, module, code in zip(sources, todo, made, strict=True):
            engine, origin = cached_engine("gemm kernel", source, module.ir,
                                           module.published[0], made=code)
            for symbol in module.published:
                llvm_binding.add_symbol(symbol, engine.get_function_address(symbol))
            _KERNELS[module.prefix] = engine
            origins.append(origin)
        return max(origins, key=_ORIGINS.index)


def loaded(v: Variant, transposed: bool = False) -> bool:
    """The kernel `v`'s modules (kernel_modules) are loaded in this process."""
    return all(module.prefix in _KERNELS for module in kernel_modules(v, transposed))


class Prefetch:
    """The GEMM kernels a lowered module's kernel.gemm ops call, loaded (load_kernel) by a
    thread of its own while the passes after tape-to-loops run in the caller's, and compiled
    by llvm_worker's process: llvmlite runs one LLVM call at a time in a process, so a kernel
    compiled here would hold up the program's own LLVM work. Only where there is a second core
    to run on; with one, nothing starts (load_kernels compiles them in line)."""

    def __init__(self, module: Any) -> None:
        self.origins: dict[Variant, str] = {}
        """Each kernel -> where it came from ("compiled", "disk cache", "loaded")."""
        host = Target.host()
        specs = [op.spec for op in module.walk() if isinstance(op, kernel_dialect.GemmOp)]
        self.transposed = stores_transposed(specs, host)
        variants = sorted({variant(spec, host) for spec in specs}, key=lambda v: v.symbol)
        variants = [v for v in variants if not loaded(v, v in self.transposed)]
        self.pooled = host.threads > 1  # (the program's kernel calls share their work)
        self.thread = None
        if variants and cores() > 1:
            self.thread = threading.Thread(target=self._load, args=(variants,), daemon=True,
                                           name="tapeml-kernels")
            self.thread.start()

    def _load(self, variants: list[Variant]) -> None:
        for v in variants:
            try:
                self.origins[v] = load_kernel(v, in_worker=True, pooled=self.pooled,
                                              transposed=v in self.transposed)
            except Exception:  # noqa: BLE001 (load_kernels loads it again, and says why not)
                return

    def busy(self) -> bool:
        """The thread is still loading kernels (by llvm_worker's process, busy with them)."""
        return self.thread is not None and self.thread.is_alive()

    def join(self) -> dict[Variant, str]:
        """Wait for the thread; each kernel's origin, for those it loaded."""
        if self.thread is not None:
            self.thread.join()
        return self.origins


SHARE_LINES = 2000
"""A program whose LLVM IR has at least this many lines (before merge-loop-nests), compiled
in a process with a second core, has about half of its out-of-line functions (a model's
merged layers, thread-pool parts) optimized and compiled by llvm_worker's process meanwhile
(`Share`). The GPT step of bench/ (2 layers, 8,500 LLVM instructions after O2): LLVM O2 and
the machine code 1.1-1.2 s -> the program's half, 0.26 s + 0.30 s, beside the worker's
0.41 s."""

SHARE_IDLE_LINES = 1000
"""... and one of at least this many where the worker is idle (no kernels of the program's
being compiled there: a share would wait behind them). W3's step on two threads (1,373 lines;
its parts make it longer than on one): its first call with its kernels built 0.338 -> 0.28 s
(medians of three, alternating); its cold first call the same (the worker busy with the
kernel: no share); W4's cold first call 0.78 s either way, but 0.99 s where its share waited
for the worker to be idle."""


class Share:
    """About half a program's out-of-line functions, optimized and compiled by llvm_worker's
    process while this one does the rest (llvm_worker.compile_only on both sides). Only
    functions already kept out of line (noinline) go, so what LLVM inlines here is what it
    inlined before; the functions and globals either side calls or reads are made external
    (their objects are linked into one engine)."""

    def __init__(self, parsed: Any, names: list[str], text: str) -> None:
        self.names, self.text = names, text
        self.code: bytes | None = None
        keep = [f.name for f in parsed.functions if not f.is_declaration and f.name not in names]
        llvm_worker.compile_only(parsed, keep, globals_too=False)
        self.thread = threading.Thread(target=self._compile, daemon=True,
                                       name="tapeml-share")
        self.thread.start()

    def _compile(self) -> None:
        self.code = llvm_worker.in_worker(self.text, PROGRAM_LEVEL, self.names,
                                          strength_reduction=False)

    def join(self) -> bytes:
        """The worker's object code (or, where it could not make it, this process's)."""
        self.thread.join()
        if self.code is None:
            self.code = llvm_worker.object_code(self.text, PROGRAM_LEVEL, self.names,
                                                strength_reduction=False)
        return self.code

    @staticmethod
    def start(parsed: Any, entry: str, lines: int, idle: bool = True) -> Share | None:
        """A Share of `parsed` (whose entry point is `entry`), where the program is large
        enough (`lines` of LLVM IR: SHARE_LINES, or SHARE_IDLE_LINES where the worker is
        `idle`) and has out-of-line functions to share."""
        if lines < (min(SHARE_LINES, SHARE_IDLE_LINES) if idle else SHARE_LINES):
            return None
        outlined = [f for f in parsed.functions if not f.is_declaration and f.name != entry
                    and _has_attribute(f, b"noinline")]
        if not outlined:
            return None
        for value in (*parsed.functions, *parsed.global_variables):
            if not value.is_declaration and value.linkage.name in ("internal", "private"):
                value.linkage = "external"
        text = str(parsed)
        sizes = _function_lines(text)
        half, names, taken = sum(sizes.values()) // 2, [], 0
        for f in sorted(outlined, key=lambda f: -sizes.get(f.name, 0)):
            if taken + sizes.get(f.name, 0) <= half:
                names.append(f.name)
                taken += sizes.get(f.name, 0)
        return Share(parsed, names, text) if names else None


WORKER_SHARE = 0.3
"""The fraction of a program's new shared functions (in lines) that llvm_worker's process
compiles, where there is a second core; the worker may be compiling the program's kernels
too, which this process waits for. A constant, not chosen by whether the worker is idle: the
parts are disk cache entries, the same for a program however it was compiled (two processes
compiling one program at once, one with the worker idle, stored two partitions)."""


class SharedCode:
    """The shared functions a program calls (tapeml/codegen/shared_code.py): those this
    process has not loaded read from the disk cache, or compiled as the program is, where
    there is a second core in two modules, one by llvm_worker's process (WORKER_SHARE of
    them) while this one optimizes the program and compiles the other (`make`),
    before it waits for the kernels. (All in one module here, the 2-layer GPT step's first
    call on two cores took 0.90-0.92 s against 0.65-0.71 s with the functions in the program,
    half of them compiled by the worker, cpu.Share; in halves, this process waiting for the
    kernels before it compiled its own, 0.92-0.93 s: the worker's half had gone before the
    kernels.)"""

    def __init__(self, split: shared_code.Split, known: shared_code.Known) -> None:
        self.split, self.known = split, known
        shared_code.learn(known, split)
        cache = disk_cache.default()
        parts = split.parts(WORKER_SHARE) if cores() > 1 else (split.new, [])
        self.parts = [_Part(split, symbols, cache) for symbols in parts if symbols]
        if len(self.parts) > 1 and self.parts[1].code is None:
            self.parts[1].start()

    def make(self) -> None:
        """Compile this process's part (if its code is not there yet)."""
        if self.parts and self.parts[0].thread is None:
            self.parts[0].make()

    def load(self) -> tuple[dict[str, str], list[Any]]:
        """The new functions loaded and published (compiled here if need be, stored in the
        disk cache); the disk cache key of the module of each shared function the program
        calls, by symbol, and the engines that hold them (the program's to keep)."""
        started = time.perf_counter()
        for part in self.parts:
            part.load()
        symbols = {*self.split.modules, *self.known.declared}
        engines = [shared_code.engine(s) for s in symbols]  # (where another program's engine
        # held a function already, the program links against that one and holds it)
        if profiling():
            new = len(self.split.new)
            record("shared code", len(symbols), started,
                   f"(functions shared among programs) {len(symbols) - new} loaded already"
                   + "".join(f", {len(p.symbols)} {p.origin}" for p in self.parts))
        return {symbol: shared_code.key_of(symbol) for symbol in symbols}, engines


class _Part:
    """Some of a program's new shared functions, as one module: its object code from the
    disk cache, from llvm_worker's process (`start`), or compiled here (`load`)."""

    def __init__(self, split: shared_code.Split, symbols: list[str], cache: Any) -> None:
        self.symbols, self.text = symbols, split.group(symbols)
        self.key = disk_cache.key("shared code", self.text, disk_cache.sources_digest(),
                                  *machine_key())
        self.code = cache.get(self.key) if cache is not None else None
        self.origin = "disk cache" if self.code is not None else "compiled"
        self.thread: threading.Thread | None = None
        self.engine: Any = None

    def start(self) -> None:
        def compile_there() -> None:
            self.code = llvm_worker.in_worker(self.text, PROGRAM_LEVEL,
                                              strength_reduction=False)
            if self.code is not None:
                self.origin = "compiled in a worker process"

        self.thread = threading.Thread(target=compile_there, daemon=True,
                                       name="tapeml-shared-code")
        self.thread.start()

    def make(self) -> None:
        """Its object code (the worker's, once it has it; else compiled here)."""
        if self.thread is not None:
            self.thread.join()
        if self.code is None:
            self.code = llvm_worker.object_code(self.text, PROGRAM_LEVEL,
                                                strength_reduction=False)
            self.origin = "compiled"

    def load(self) -> None:
        """Its functions published, from an engine of their own (compiled here if need be;
        stored in the disk cache where made)."""
        for attempt in range(2):
            self.make()
            if shared_code.POOL in self.text:
                load_pool()
            self.engine = object_engine(self.code)  # (held until the program holds it)
            if shared_code.publish(self.engine, self.symbols, self.key):
                break
            cache = disk_cache.default()  # a whole entry without them: never trusted
            if attempt or cache is None or self.origin != "disk cache":
                raise RuntimeError("tapeml: the shared functions' object code does not "
                                   "define them")  # (a bug of tapeml's)
            cache.discard(self.key)
            self.code = None
        stored((self.code, self.origin, self.key))


def _has_attribute(function: Any, attribute: bytes) -> bool:
    """`function` (llvmlite's) has the enum attribute: llvmlite gives a function's attributes
    as one entry, spaced (`noinline "prefer-vector-width"="512"`)."""
    return any(attribute in entry.split(b" ") for entry in function.attributes)


def _function_lines(text: str) -> dict[str, int]:
    """The lines of each function defined in the LLVM IR `text`, by name."""
    sizes: dict[str, int] = {}
    name, count = None, 0
    for line in text.splitlines():
        if line.startswith("define "):
            match = re.search(r'@("(?:[^"]|\\")*"|[\w.$-]+)\(', line)
            name, count = (match.group(1).strip('"') if match else None), 0
        elif line.startswith("}") and name is not None:
            sizes[name] = count
            name = None
        elif name is not None:
            count += 1
    return sizes


def callers_module(specs: Iterable[GemmSpec], machine: llvm_binding.TargetMachine,
                   load: bool = True) -> Any:
    """One module defining `spec.symbol(A, B, C)` for each of `specs` (the call of its kernel
    with its plan and its scratch: gemm.caller), parsed (one module, parsed and linked once:
    the GPT step's 21 callers one by one took 12.9 ms); the kernels they call loaded
    (load_kernel) unless not to `load`."""
    parsed = llvm_binding.parse_assembly(callers_text(specs, load))
    parsed.triple, parsed.data_layout = machine.triple, str(machine.target_data)
    return parsed


def callers_text(specs: Iterable[GemmSpec], load: bool = True,
                 names: Sequence[str] | None = None) -> str:
    """callers_module's LLVM IR; the callers (and their globals) named `names` where given,
    one for each spec."""
    host = Target.host()
    lines, declared = [], set()
    for n, spec in enumerate(specs):
        if load:
            load_kernel(variant(spec, host), transposed=spec.c_transposed)
        text = caller(spec, host)
        if names is not None:  # @<symbol>, @<symbol>.plan, ... -> @"<name>", @"<name>.plan"
            text = re.sub(rf"@{re.escape(spec.symbol)}((?:\.\w+)*)(?!\w)",
                          lambda m, n=n: f'@"{names[n]}{m.group(1)}"', text)
        for line in text.split("\n"):
            if line.startswith("declare "):  # (callers of one kernel declare it alike)
                if line in declared:
                    continue
                declared.add(line)
            lines.append(line)
    if load and f"declare void @{POOL}(ptr, ptr, i64, i64)" in declared:
        load_pool()  # (a caller on more than one thread passes the pool to its kernel)
    return "\n".join(lines)


def link_kernels(module: Any, parsed: Any, machine: llvm_binding.TargetMachine,
                 standalone: bool = False, optimized: bool = True
                 ) -> tuple[list[str], list[Variant], set[Variant]]:
    """Link into `parsed` (the llvm-dialect `module` as LLVM IR) the caller of every GEMM
    `module` declares, from the spec on its declaration, or, `standalone`, the kernels they
    call too (as the CLI prints it; `optimized` or not); the callers' names, the kernels
    (which `load_kernels` makes callable, before the code is linked) and those called with a
    C stored transposed (stores_transposed)."""
    host = Target.host()
    kernels = declared_kernels(module)
    variants = sorted({variant(spec, host) for spec in kernels.values()},
                      key=lambda v: v.symbol)
    transposed = stores_transposed(kernels.values(), host)
    modules = {m.prefix: m for v in variants if standalone
               for m in kernel_modules(v, v in transposed)}
    for kernel_module in modules.values():  # (a kernel shared by two heights once)
        parsed.link_in(kernel_module.ir(machine, optimized))
    if kernels:
        parsed.link_in(callers_module(kernels.values(), machine, load=False))
    return list(kernels), variants, transposed


def load_kernels(variants: list[Variant], shapes: int, prefetch: Prefetch | None,
                 transposed: Collection[Variant] = ()) -> None:
    """Each kernel of `variants` loaded (load_kernel; with its store into a C stored
    transposed, those in `transposed`), for `shapes` calls of them: those a Prefetch loaded
    waited for (it may still be at it), the rest loaded here."""
    started = time.perf_counter()
    found = prefetch.join() if prefetch is not None else {}
    origins = Counter(found.get(v) or load_kernel(v, transposed=v in transposed)
                      for v in variants)
    if variants and profiling():
        record("GEMM kernels", len(variants), started,
               f"(kernels) called by {shapes} shapes"
               + (", loaded in a thread of their own during the passes above (the time: "
                  "what was left to wait for)"
                  if any(origin != "loaded" for origin in found.values()) else "")
               + "; " + ", ".join(f"{count} {origin}"
                                  for origin, count in sorted(origins.items())))


def machine_key() -> tuple[str, ...]:
    """What, besides its source, determines a module's machine code: the CPU, the compiler.
    Read from LLVM once per process (`_host_key`): every llvmlite call waits for the
    process's one LLVM lock, and a Prefetch thread finding its next kernel's key waited out
    the program's LLVM O2 (50 ms of W3's first call on two cores)."""
    return _host_key(llvm_binding.get_default_triple, llvm_binding.get_host_cpu_name,
                     llvm_binding.get_host_cpu_features)


@lru_cache(maxsize=4)
def _host_key(triple: Callable[[], str], name: Callable[[], str],
              features: Callable[[], Any]) -> tuple[str, ...]:
    """machine_key, by the functions that read the host (cached by them, so that a test
    standing in another CPU's for one of them gets its key)."""
    return (triple(), name(), features().flatten(),
            f"llvmlite {llvmlite.__version__} llvm {llvm_binding.llvm_version_info}")


def object_engine(*objects: bytes) -> Any:
    """A new engine holding the object code `objects`, linked (their external symbols
    resolved, among them and outside)."""
    machine = target_machine()
    empty = llvm_binding.parse_assembly("")
    empty.triple, empty.data_layout = machine.triple, str(machine.target_data)
    engine = llvm_binding.create_mcjit_compiler(empty, machine)
    for code in objects:
        engine.add_object_file(llvm_binding.ObjectFileRef.from_data(code))
    engine.finalize_object()
    if perf_map.enabled():
        for code in objects:
            perf_map.record(code, engine.get_function_address)
    return engine


def bind_scratch(engine: Any, kernels: list[str]) -> list[np.ndarray]:
    """Allocate each linked kernel's packing scratch (the module doc of tapeml/codegen/gemm/)
    and the home of its constant operands packed whole (plan.packed_a), and point the kernel at
    them; the buffers, which must live as long as `engine`. Numpy buffers, so a scratch too
    large for this machine is a MemoryError here."""
    buffers = []
    for name in kernels:
        for buffer in ("scratch", "packed"):
            size = ctypes.c_int64.from_address(
                engine.get_global_value_address(f"{name}.{buffer}_bytes")).value
            if size:
                array, address = _aligned(size, f"{name}'s {buffer}")
                ctypes.c_void_p.from_address(
                    engine.get_global_value_address(f"{name}.{buffer}")).value = address
                buffers.append(array)
    return buffers


def _prefer_wide_vectors(text: str) -> str:
    """Ask for the widest vectors (WIDE: the CPU tunings here prefer 256 bits to the 512 they
    have) after the signature of every definition of llvmlite's text: a string attribute,
    which llvmlite's IR builder cannot add."""
    return re.sub(r"^(define [^\n]*)$", rf"\1 {WIDE}", text, flags=re.MULTILINE)


@dataclass(frozen=True)
class HostAsmTarget(XTarget):
    """`-t host-asm`: an llvm-dialect module as assembly for this CPU (LLVM O2, its features),
    codegen as for a program (llvm_worker.emit: no strength reduction; the GEMM kernels
    linked in print so too, where the backend compiles them with it)."""

    name = "host-asm"

    def emit(self, ctx: Context, module: Any, output: IO[str]) -> None:
        with LLVM_LOCK:
            machine = target_machine()
            _, parsed = optimize(module, machine)
            link_kernels(module, parsed, machine, standalone=True)
            output.write(llvm_worker.emit(machine, parsed, strength_reduction=False,
                                          assembly=True))


@dataclass(frozen=True)
class LLVMIRTarget(XTarget):
    """`-t llvm`: an llvm-dialect module as LLVM IR (xDSL's convert_module), with the
    definitions of the generated kernels it calls (and their callers) linked in."""

    name = "llvm"

    def emit(self, ctx: Context, module: Any, output: IO[str]) -> None:
        with LLVM_LOCK:
            machine = target_machine()
            text = str(convert_module(module, fallback_target_triple=machine.triple))
            parsed = llvm_binding.parse_assembly(text)
            linked, _, _ = link_kernels(module, parsed, machine, standalone=True,
                                        optimized=False)
            output.write(str(parsed) if linked else text)


class Native:
    """A compiled program: call it with the program's flat arguments.

    Its intermediates live in an arena (`plan-arena`), allocated on the first call and kept:
    calls reuse it. A call made while other threads' calls hold every arena allocates one more,
    kept too (one per call running at once: a split program's pieces, tapeml/codegen/split.py)."""

    def __init__(self, name: str, inputs: list[Argument], outputs: list[Argument],
                 engine: Any, function: Any, arena_bytes: int, scratch: list[np.ndarray],
                 kernels: list[str], variants: list[Variant], transposed: Collection[Variant],
                 stages: dict[str, str] | None = None, origin: str = "compiled",
                 data: dict[str, bytes] | None = None, bound: list[np.ndarray] | None = None
                 ) -> None:
        self.name, self.inputs, self.outputs = name, inputs, outputs
        self._outputs = Outputs([(a.shape, a.dtype) for a in outputs])
        self.engine, self.function = engine, function
        self.scratch = scratch  # the kernels' packing buffers (bind_scratch)
        self.data = data or {}  # its large constants' bytes, by global (tapeml/codegen/data.py)
        self._bound = bound or []  # the copies the code points at
        self.kernels = kernels  # the GEMM callers linked in, by symbol
        self.variants = variants  # the shape-generic kernels they call (load_kernel)
        self.transposed = sorted(transposed, key=lambda v: v.symbol)  # ... with a C stored
        # transposed (their store for it loaded too)
        self.origin = origin
        """Where the machine code came from: "compiled" or "disk cache"."""
        self.profile_labels: list[str] | None = None
        """Compiled to be profiled: what each entry of the marks' table counts."""
        self.pooled = True
        """Its code calls the thread pool (loaded before it is: `_compile`, `_load`)."""
        self.shared: dict[str, str] = {}
        """The shared functions it calls (tapeml/codegen/shared_code.py), each with the disk
        cache key of its module."""
        self.shared_engines: list[Any] = []
        """The engines holding their code: while it lives, so do they."""
        self.arena_bytes = arena_bytes
        self.stages = stages or {}
        self._arenas: list[int] = []  # the addresses of the arenas no call holds
        self._arena_buffers: list[np.ndarray] = []  # every arena made, kept for the code

    def __call__(self, *leaves: Any) -> tuple[np.ndarray, ...]:
        # written for a small call's cost (W6: 3.3-4.4 -> 2.8-2.9 us here): locals, one list
        # per step, the addresses taken inline
        inputs, name = self.inputs, self.name
        if len(leaves) != len(inputs):
            raise TypeError(f"@{name} takes {len(inputs)} arrays, got {len(leaves)}")
        # (lengths checked above; the list keeps any copy `checked` made alive for the call)
        buffers = [checked(leaf, arg, name) for leaf, arg in zip(leaves, inputs, strict=True)]
        outputs = self._outputs.new()
        self.run_into(buffers, outputs)
        return outputs

    def run_into(self, buffers: list[np.ndarray], outputs: tuple[np.ndarray, ...]) -> None:
        """Run on `buffers` (the inputs, as `checked` returns them) into `outputs` (C-contiguous
        arrays of the results' shapes and dtypes, written whole)."""
        try:
            pointers = [_ADDRESS(_BUFFER(b)) for b in buffers]
            pointers += [_ADDRESS(_BUFFER(o)) for o in outputs]
        except (TypeError, ValueError):  # a read-only or empty array
            pointers = [_address(b) for b in (*buffers, *outputs)]
        arenas = self._arenas
        try:  # (list.pop and list.append are atomic: no lock on the common path)
            arena = arenas.pop()
        except IndexError:  # the first call, or every arena held by a call running now
            buffer, arena = _aligned(self.arena_bytes, f"@{self.name}'s intermediates (its "
                                     "arena)")
            self._arena_buffers.append(buffer)
        try:
            self.function(*pointers, arena)
        finally:
            arenas.append(arena)

    def profile(self, leaves: list[Any], repeat: int) -> KernelProfile:
        """Called once, then `repeat` times with the marks' clock counting (a program compiled
        to be profiled: `profile_labels`)."""
        if self.profile_labels is None:
            raise ValueError(f"@{self.name} was not compiled to be profiled")
        self(*leaves)  # its arena allocated, its pages touched
        with marks.counting(len(self.profile_labels)) as table:
            started = time.perf_counter()
            for _ in range(repeat):
                self(*leaves)
            seconds = (time.perf_counter() - started) / repeat
        return KernelProfile([KernelTime(label, int(ns) / 1e9 / repeat, int(calls)) for
                              label, (ns, calls) in zip(self.profile_labels, table, strict=True)],
                             seconds)


_BUFFER, _ADDRESS = ctypes.c_char.from_buffer, ctypes.addressof


def _address(array: np.ndarray) -> int:
    """The address of `array`'s first byte. Through ctypes' buffer protocol: a fifth of the
    cost of `__array_interface__` (which builds a dict), the most of a small call's time; that
    for a read-only or empty array."""
    try:
        return _ADDRESS(_BUFFER(array))
    except (TypeError, ValueError):
        return array.__array_interface__["data"][0]


def _aligned(nbytes: int, what: str = "a buffer") -> tuple[np.ndarray, int]:
    """A buffer of `nbytes` starting on a multiple of ALIGN bytes, and that address; a
    MemoryError naming `what` where there is no room (numpy's ValueError past its limit too)."""
    try:
        buffer = np.empty(nbytes + ALIGN, np.uint8)
    except (MemoryError, ValueError):
        raise MemoryError(f"{what} takes {nbytes:,} bytes, more than can be allocated "
                          "here") from None
    address = buffer.__array_interface__["data"][0]
    return buffer, address + (-address) % ALIGN


def instructions(module: Any) -> int:
    return sum(1 for f in module.functions for b in f.blocks for _ in b.instructions)


class CPUBackend:
    name = "cpu"

    def __init__(self, fuse: bool = True, libm: bool = False) -> None:
        self.fuse = fuse
        self.libm = libm

    @staticmethod
    def _pieces(module: ModuleOp, threads: int) -> per_example.Split | None:
        """How `module` runs as pieces of its batch (tapeml/codegen/split.py), if it does: on
        several threads, one or PER_THREAD pieces per thread; on one, as small pieces as
        SPLIT_FLOPS and, where the weights are large, VALUE_TRAFFIC allow where its values
        leave the caches (ONE_THREAD_BYTES)."""
        weights = per_example.constant_bytes(module)
        small = weights <= split.PER_THREAD_WEIGHTS
        if threads > 1:
            counts = [split.PER_THREAD * threads, threads][0 if small else 1:]
        elif per_example.largest_value_bytes(module) > split.ONE_THREAD_BYTES:
            flops = per_example.product_flops(module)
            most = flops // split.SPLIT_FLOPS  # (flops per piece)
            if not small:  # (each piece reads every weight)
                values = per_example.value_bytes(module)
                most = min(most, 1 + values // (split.VALUE_TRAFFIC * weights))
            counts = sorted((d for d in per_example.batch_divisors(module) if d <= most),
                            reverse=True)
        else:
            counts = []
        for count in counts:
            pieces = per_example.split(module, count)
            if pieces is not None and \
                    per_example.product_flops(pieces.module) >= split.SPLIT_FLOPS:
                return pieces
        return None

    def compile(self, module: ModuleOp, stages: bool = False, profile: bool = False,
                whole: bool = False, owned: bool = False) -> Native:
        """`module`'s tape function (tapeml/codegen/arguments.py) as machine code: from the
        disk cache (tapeml/codegen/disk_cache.py) when it holds it, else compiled, and stored
        there; run as pieces of its batch where that pays (`_pieces`), unless `whole` (a
        piece itself). Asked for the stages, it compiles (and stores nothing); asked to
        `profile`, it compiles with each tape op's loops marked (the program's
        `profile_labels` name the marks' entries, tapeml/codegen/marks.py counts them) and
        stores nothing. `owned`: the module is given away (the Backend protocol), compiled in
        place."""
        name, inputs, outputs = signature(module)
        threads = host_threads()
        if not (stages or profile or whole):
            pieces = self._pieces(module, threads)
            if pieces is not None:
                with compiled_for_threads(1):
                    piece = self.compile(pieces.module, whole=True)
                return split.SplitProgram(piece, pieces, threads, name, inputs, outputs)
        cache = None if stages or profile else disk_cache.default()
        key = self.cache_key(module, threads) if cache is not None else ""
        if cache is not None:
            started = time.perf_counter()
            payload = cache.get(key)
            loaded = None if payload is None else _load(payload, name, inputs, outputs, cache)
            if loaded is not None:
                record("disk cache: hit", None, started, str(cache.path(key)))
                return loaded
            if payload is not None:  # whole, but not a program of this name: never trusted
                cache.discard(key)
        native, objects = self._compile(module, name, inputs, outputs, threads,
                                        Stages(stages), profile=profile, in_place=owned)
        if cache is not None:
            started = time.perf_counter()
            cache.put(key, pack({"name": name, "arena_bytes": native.arena_bytes,
                                  "kernels": native.kernels,
                                  "variants": [dataclasses.astuple(v) for v in native.variants],
                                  "transposed": [dataclasses.astuple(v)
                                                 for v in native.transposed],
                                  "pool": native.pooled,
                                  "shared": _by_module(native.shared),
                                  "data": data.store(cache, native.data)},
                                 objects))
            record("disk cache: stored", None, started, str(cache.path(key)))
        return native

    def cache_key(self, module: ModuleOp, threads: int) -> str:
        """What determines the machine code: the program, the options, the CPU, the compiler."""
        return disk_cache.key(
            "cpu", disk_cache.program_text(module),
            f"fuse={self.fuse} libm={self.libm} threads={threads}",
            disk_cache.sources_digest(), f"xdsl {disk_cache.xdsl_version()}", *machine_key())

    def passes(self, module: ModuleOp, name: str, threads: int, kept: Stages,
               profile: bool = False, in_place: bool = False, any_batch: bool = False,
               known: shared_code.Known | None = None
               ) -> tuple[ModuleOp, int, list[Prefetch], list[str]]:
        """`module` through tapeml's passes to the llvm dialect (run_pipeline; `any_batch`,
        cpu_pipeline's); its arena's bytes, the kernels' Prefetch (started after
        tape-to-loops) and, `profile`, what each mark counts. Given `known`, the shared
        functions this process has are declared after loop-bounds-as-arguments
        (shared_code.declare_known), and `known` says which."""
        if cores() > 1:  # ready by the time tape-to-loops has found the kernels (Prefetch)
            llvm_worker.start()
        prefetch: list[Prefetch] = []
        labels: list[str] = []

        def after(step: str, lowered: ModuleOp) -> None:  # the kernels, while the rest runs
            if step == "tape-to-loops":
                prefetch.append(Prefetch(lowered))
                if profile:
                    labels.extend(_profile_labels(lowered, name))
            elif step == "loop-bounds-as-arguments" and known is not None:
                started = time.perf_counter()
                found = shared_code.declare_known(lowered, threads)
                known.declared, known.keys = found.declared, found.keys
                record("shared code: declared", len(found.declared), started,
                       "(functions compiled for programs before)")

        module, reports = run_pipeline(
            module, cpu_pipeline(self.fuse, self.libm, threads, profile=profile,
                                 weight_runs=Target.host().weight_runs, any_batch=any_batch),
            kept, after, in_place)
        return module, reports["plan-arena"].sizes[name], prefetch, labels

    def _compile(self, module: ModuleOp, name: str, inputs: list[Argument],
                 outputs: list[Argument], threads: int, kept: Stages,
                 profile: bool = False, in_place: bool = False
                 ) -> tuple[Native, list[bytes]]:
        """Compiled through the pipeline; with its object code (the program's, then the
        share a worker process compiled, if any: Share)."""
        keep = kept.keep
        sharing = not (kept.wanted or profile)  # (the stages show the whole program)
        known = shared_code.Known() if sharing else None
        module, arena_bytes, prefetch, labels = self.passes(module, name, threads, kept,
                                                            profile, in_place, known=known)
        detached = data.detach(module)
        with LLVM_LOCK:
            started = time.perf_counter()
            machine = target_machine()
            ir_text = llvm_ir_text(module, machine.triple, str(machine.target_data),
                                   list(detached))
            shared = (SharedCode(shared_code.split(ir_text, shared_names(module)), known)
                      if known is not None else None)
            program_text = ir_text if shared is None else shared.split.program
            parsed = parsed_program(program_text, machine)
            idle = not (prefetch and prefetch[0].busy())
            share = (Share.start(parsed, SYMBOL_PREFIX + name, program_text.count("\n"), idle)
                     if cores() > 1 and not (kept.wanted or profile) else None)
            optimize_program(parsed, machine)
            if profiling():
                record("LLVM O2", instructions(parsed), started, "(LLVM instructions)" + (
                    f"; {len(share.names)} out-of-line functions in a worker process meanwhile"
                    if share is not None else ""))
            kernels, variants, transposed = link_kernels(module, parsed, machine)
            keep("llvm ir", lambda: ir_text)
            keep("optimized llvm ir", lambda: str(parsed))
            keep("assembly", lambda: llvm_worker.emit(machine, parsed, strength_reduction=False,
                                                      assembly=True))
            started = time.perf_counter()
            objects = [llvm_worker.emit(machine, parsed, strength_reduction=False)]
            if share is not None:
                objects.append(share.join())
            if profile:
                marks.load(target_machine())  # tapeml_profile_mark, what kernel.mark calls
            if shared is not None:  # (before waiting for the kernels)
                shared.make()
            made = time.perf_counter() - started
            # the kernels are needed only now, where the objects are linked: a Prefetch had
            # the program's machine code made as well to finish in
            load_kernels(variants, len(kernels), prefetch[0] if prefetch else None,
                         transposed)
            started = time.perf_counter()
            pooled = any(f.name == POOL for f in parsed.functions)
            if pooled:  # its parallel loops or GEMM callers pass work to the thread pool (on
                load_pool()  # more than one thread; after the kernels: a Prefetch loads both)
            used, engines = shared.load() if shared is not None else ({}, [])
            engine = object_engine(*objects)
            address = engine.get_function_address(SYMBOL_PREFIX + name)
            scratch = bind_scratch(engine, kernels)
            bound = data.bind(engine, detached)
            record("machine code (MCJIT)", None, started - made)
        native = Native(name, inputs, outputs, engine, entry(address, inputs, outputs),
                        arena_bytes, scratch, kernels, variants, transposed, kept.texts,
                        data=detached,
                        bound=bound)
        native.profile_labels = labels if profile else None
        native.pooled = pooled
        native.shared, native.shared_engines = used, engines
        return native, objects


def _profile_labels(module: ModuleOp, name: str) -> list[str]:
    """What each kernel.mark entry of the function `name` counts (tape-to-loops{profile})."""
    f = next(op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == name)
    return [label.data for label in f.attributes[PROFILE_ATTR].data]


def entry(address: int, inputs: list[Argument], outputs: list[Argument]) -> Any:
    c_type = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(inputs) + len(outputs) + 1))
    return c_type(address)


def pack(meta: dict[str, Any], objects: list[bytes]) -> bytes:
    """A cache entry's payload: its metadata as JSON (with the objects' lengths),
    length-prefixed, then the object code, one object after another."""
    text = json.dumps({**meta, "objects": [len(code) for code in objects]}).encode()
    return struct.pack("<Q", len(text)) + text + b"".join(objects)


def unpack(payload: bytes) -> tuple[dict[str, Any], list[bytes]] | None:
    """`pack`'s metadata and objects; None if `payload` is not what it wrote."""
    try:
        (length,) = struct.unpack_from("<Q", payload)
        meta = json.loads(payload[8:8 + length])
        objects, start = [], 8 + length
        for size in meta["objects"]:
            objects.append(payload[start:start + int(size)])
            start += int(size)
    except (ValueError, struct.error, KeyError, TypeError):
        return None
    return (meta, objects) if start == len(payload) else None


def _by_module(shared: dict[str, str]) -> list[list[Any]]:
    """A program's shared functions (symbol -> key) as [key, [symbols]] per module."""
    modules: dict[str, list[str]] = {}
    for symbol, key in shared.items():
        modules.setdefault(key, []).append(symbol)
    return [[key, symbols] for key, symbols in modules.items()]


def _load_shared(modules: Any, cache: Any) -> tuple[dict[str, str], list[Any]] | None:
    """The shared functions a cache entry's program calls ([key, [symbols]] per module), each
    module not loaded yet read from `cache` and published; their keys by symbol and the
    engines that hold them, or None if one is not there (or not whole: then deleted)."""
    used: dict[str, str] = {}
    engines: list[Any] = []
    for key, symbols in modules:
        key, symbols = str(key), [str(s) for s in symbols]
        if any(shared_code.engine(s) is None for s in symbols):
            code = cache.get(key)
            if code is None:
                return None
            if shared_code.POOL.encode() in code:
                load_pool()
            engine = object_engine(code)
            if not shared_code.publish(engine, symbols, key):
                cache.discard(key)
                return None
        # each symbol's engine: where another program's held some of them already, the
        # program links against that one (the symbols published first stay), and holds it
        engines.extend(shared_code.engine(s) for s in symbols)
        used.update((s, shared_code.key_of(s)) for s in symbols)
    return used, engines


def _load(payload: bytes, name: str, inputs: list[Argument], outputs: list[Argument],
          cache: Any) -> Native | None:
    """A cache entry's program, linked into a new engine; None if it is not `name`'s (or its
    data is no longer in `cache`)."""
    unpacked = unpack(payload)
    if unpacked is None or not isinstance(unpacked[0], dict) or \
            unpacked[0].get("name") != name:
        return None
    meta, objects = unpacked
    try:
        variants = [Variant(*fields) for fields in meta["variants"]]
        transposed = ({Variant(*fields) for fields in meta["transposed"]}
                      if "transposed" in meta else set(variants))
        kernels = [str(symbol) for symbol in meta["kernels"]]
        arena_bytes = int(meta["arena_bytes"])
        keys = {str(k): str(v) for k, v in meta.get("data", {}).items()}
        pooled = bool(meta.get("pool", True))
        modules = [(key, list(symbols)) for key, symbols in meta.get("shared", [])]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    detached = data.fetch(cache, keys)
    if detached is None:
        return None
    with LLVM_LOCK:
        if pooled:  # tapeml_parallel_for, for the programs that call it
            load_pool()
        for v in variants:  # before the program's calls of them are resolved
            load_kernel(v, transposed=v in transposed)
        shared = _load_shared(modules, cache)
        if shared is None:
            return None
        engine = object_engine(*objects)
        address = engine.get_function_address(SYMBOL_PREFIX + name)
        if not address:
            return None
        scratch = bind_scratch(engine, kernels)
        bound = data.bind(engine, detached)
    native = Native(name, inputs, outputs, engine, entry(address, inputs, outputs),
                    arena_bytes, scratch, kernels, variants, transposed, origin="disk cache",
                    data=detached, bound=bound)
    native.pooled = pooled  # (as `_compile` sets it: the entry says)
    native.shared, native.shared_engines = shared
    return native
