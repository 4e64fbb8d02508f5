"""One program's machine code for every batch size: LLVM IR whose batch-dependent literals are
loads of globals a small module defines per batch.

A step compiled with `jit(..., batch_argnums=...)` is lowered at two batch sizes (B and 2B + 1:
tapeml/frontend/batch_sizes.py), tapeml's passes only, with loops whose structure no batch
size changes (cpu_pipeline's `any_batch`). Where the two texts are the same but for some
literals (loop bounds, arena offsets, element counts, a mean's divisor), those literals are
the *slots*: the template (`Template.of`) is the first text with each slot a load of a global
`@<program>batch.<n>`, at the entry of each function that reads it; it is optimized and
compiled once. A batch size's own instance is its lowered text, checked against the template
(`Template.values`): every piece of text and every literal but the slots' must be the
template's; then a module of the slots' values and the batch's GEMM callers (under the
template's names for them, `canonical`) is all that is compiled for it.

Nothing is assumed about how a batch size shapes the program: a batch whose lowering differs
anywhere else (a decision made otherwise, a type's size) is no instance, and is compiled as a
program of its own. A template that LLVM rejects (a slot where only a constant may stand)
is no template. The disk cache keeps templates and instances (GenericProgram).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import llvmlite.binding as llvm_binding
from xdsl.dialects.builtin import ModuleOp

from tapeml.codegen import cpu, data, disk_cache, llvm_worker
from tapeml.codegen.arguments import Argument, signature
from tapeml.codegen.cpu import CPUBackend, Native
from tapeml.codegen.gemm import POOL, Target, variant
from tapeml.codegen.llvm_worker import target_machine
from tapeml.codegen.stages import Stages
from tapeml.dialects.kernel import GemmSpec, declared_kernels
from tapeml.profile import record
from tapeml.transforms.to_llvm import SYMBOL_PREFIX

LITERAL = re.compile(r'(?<![\w.%@"#!$-])(-?\d+(?:\.\d+(?:e[+-]?\d+)?)?|0x[0-9A-Fa-f]{16})'
                     r'(?![\w."])')
"""A numeric literal of LLVM IR text (an integer, a float in decimal or hex), not a part of a
name (`%".12"`, `@"tapeml_gemm_f32_m16..."`), an attribute group (`#0`), metadata (`!3`) or a
type (`i64`)."""

_TYPE = re.compile(r"\b(i\d+|half|bfloat|float|double)\b")
_SLOT_USE = re.compile(r'%"batch\.(\d+)"')
_ARENA_OFFSET = re.compile(r'= getelementptr inbounds i8, ptr %"[^"]+", i64 $')
"""A byte offset into a buffer (the arena's views): a slot even where it is alike at the two
sizes, since where the arena places a buffer depends on every size before it."""
_DECLARED = re.compile(r'declare [^@]*@"([^"]+)"\(')
_CALLED = re.compile(r'call [^@]*@"([^"]+)"\(')


def canonical(text: str, callers: Collection[str], prefix: str) -> tuple[str, list[str]]:
    """`text` with the GEMM callers it calls (whose names hold their shapes) named by the
    order of their first calls, `@"<prefix>gemm.<n>"`, and declared last in that order; the
    callers in that order."""
    declarations: dict[str, str] = {}
    kept = []
    for line in text.split("\n"):
        found = _DECLARED.match(line)
        if found and found.group(1) in callers:
            declarations[found.group(1)] = line
        else:
            kept.append(line)
    text = "\n".join(kept)
    order = list(dict.fromkeys(name for name in _CALLED.findall(text) if name in callers))
    for n, symbol in enumerate(order):
        text = text.replace(f'@"{symbol}"', f'@"{prefix}gemm.{n}"')
    return text + "".join("\n" + declarations[symbol].replace(f'@"{symbol}"',
                                                               f'@"{prefix}gemm.{n}"')
                          for n, symbol in enumerate(order)), order


@dataclass
class Template:
    """Two lowerings' common text, with the literals in which they differ as slots."""

    text: str
    """The generic program's LLVM IR: every slot a load."""
    pieces: list[str]
    """The first batch's canonical text, split by LITERAL (text, literal, text, ...)."""
    slots: dict[int, int]
    """The slot of each literal position (its index in `pieces`) that is one."""
    types: list[str]
    """Each slot's LLVM type."""
    prefix: str

    @classmethod
    def of(cls, first: str, second: str, prefix: str) -> Template | None:
        """The template of two batch sizes' canonical texts; None where they differ other
        than in literals an instruction's operand may be a load in place of."""
        pieces, others = LITERAL.split(first), LITERAL.split(second)
        if len(pieces) != len(others) or pieces[0::2] != others[0::2]:
            return None
        slots: dict[int, int] = {}
        types: list[str] = []
        out = list(pieces)
        line = ""  # the current line, up to the piece at hand
        for i, piece in enumerate(pieces):
            if i % 2 == 0 or (piece == others[i] and not _ARENA_OFFSET.search(line)):
                newline = piece.rfind("\n")
                line = piece[newline + 1:] if newline >= 0 else line + piece
                continue
            found = _TYPE.findall(line)
            line += piece
            if not found or line.startswith(("@", "define", "declare")):
                return None  # (outside an instruction: a global's initializer, a signature)
            # one slot per position: two literals alike at two batch sizes need not be at a
            # third (an arena offset rounded up to a cache line)
            slots[i] = len(types)
            types.append(found[-1])
            out[i] = f'%"batch.{slots[i]}"'
        text = _with_loads("".join(out), prefix, types)
        return None if text is None else cls(text, pieces, slots, types, prefix)

    def values(self, text: str) -> list[str] | None:
        """Each slot's literal in `text` (a batch size's canonical text); None if `text` is
        not an instance of the template."""
        pieces = LITERAL.split(text)
        if len(pieces) != len(self.pieces) or pieces[0::2] != self.pieces[0::2]:
            return None
        values = [""] * len(self.types)
        for i in range(1, len(pieces), 2):
            slot = self.slots.get(i)
            if slot is not None:
                values[slot] = pieces[i]
            elif pieces[i] != self.pieces[i]:
                return None
        return values

    def data_module(self, values: Sequence[str]) -> str:
        """The LLVM IR defining the slots' globals with `values`."""
        return "\n".join(f'@"{self.prefix}batch.{n}" = constant {t} {v}'
                         for n, (t, v) in enumerate(zip(self.types, values, strict=True)))


def _with_loads(text: str, prefix: str, types: list[str]) -> str | None:
    """`text` with each function that reads slots loading them at its entry, and the slots'
    globals declared; None where a slot is read outside a function."""
    out: list[str] = []
    lines = text.split("\n")
    start = None
    for number, line in enumerate(lines):
        if line.startswith("define "):
            start = number
        elif line.startswith("}") and start is not None:
            body = lines[start:number]
            used = sorted({int(n) for line in body for n in _SLOT_USE.findall(line)})
            head = next(n for n, line in enumerate(body) if line.endswith("{")) + 1
            if head < len(body) and body[head].endswith(":"):  # (the entry block's label)
                head += 1
            loads = [f'  %"batch.{n}" = load {types[n]}, ptr @"{prefix}batch.{n}"'
                     for n in used]
            out += [*body[:head], *loads, *body[head:], line]
            start = None
        elif start is None:
            if _SLOT_USE.search(line):
                return None
            out.append(line)
    out += [f'@"{prefix}batch.{n}" = external constant {t}' for n, t in enumerate(types)]
    return "\n".join(out)


@dataclass
class Lowered:
    """A program through tapeml's passes as canonical LLVM IR text, and what its instance
    needs: its signature, its arena's bytes, its data (every constant detached: a constant's
    size may depend on the batch) and its GEMM callers' specs in the text's order; `key`, its
    instance's in the disk cache (by the traced program: `GenericProgram.cached`)."""

    name: str
    inputs: list[Argument]
    outputs: list[Argument]
    text: str
    arena_bytes: int
    detached: dict[str, bytes]
    specs: list[GemmSpec]
    key: str

    @classmethod
    def of(cls, backend: CPUBackend, module: ModuleOp, threads: int, key: str) -> Lowered:
        """`module` (the tape dialect, taken) lowered; `key`: instance_key's, or "" where the
        disk cache is off."""
        name, inputs, outputs = signature(module)
        module, arena_bytes, _, _ = backend.passes(module, name, threads, Stages(False),
                                                   in_place=True, any_batch=True)
        detached = data.detach(module, larger_than=0)
        machine = target_machine()
        with cpu.LLVM_LOCK:
            text = cpu.llvm_ir_text(module, machine.triple, str(machine.target_data),
                                    list(detached))
        kernels = declared_kernels(module)
        text, order = canonical(text, kernels, f"{SYMBOL_PREFIX}{name}.")
        return cls(name, inputs, outputs, text, arena_bytes, detached,
                   [kernels[symbol] for symbol in order], key)


def instance_key(backend: CPUBackend, module: ModuleOp, threads: int) -> str:
    """The disk cache's key for the instance of the traced program `module` (the tape
    dialect): what determines its lowering; "" where the disk cache is off."""
    if disk_cache.default() is None:
        return ""
    return disk_cache.key("cpu batch-generic instance", disk_cache.program_text(module),
                          f"fuse={backend.fuse} libm={backend.libm} threads={threads}",
                          disk_cache.sources_digest(), f"xdsl {disk_cache.xdsl_version()}",
                          *cpu.machine_key())


class GenericProgram:
    """A template's machine code (compiled once) and its instances, one per batch size. The
    disk cache keeps the template (its two lowerings' texts and its object code, keyed by its
    text) and each instance (its values, GEMM callers, arena and data, keyed by the traced
    program: `instance_key`), so that a new process's call at a batch size seen before links
    it without lowering anything."""

    def __init__(self, template: Template, code: bytes, pooled: bool, key: str) -> None:
        self.template, self.code, self.pooled, self.key = template, code, pooled, key

    @classmethod
    def compile(cls, first: Lowered, second: Lowered) -> GenericProgram | None:
        """The template of two lowerings of one program at two batch sizes, compiled (or
        from the disk cache); None where they make none (see the module doc)."""
        if first.name != second.name or len(first.specs) != len(second.specs):
            return None
        template = Template.of(first.text, second.text, f"{SYMBOL_PREFIX}{first.name}.")
        if template is None:
            return None
        cache = disk_cache.default()
        key = disk_cache.key("cpu batch-generic", template.text, disk_cache.sources_digest(),
                             f"xdsl {disk_cache.xdsl_version()}", *cpu.machine_key())
        if cache is not None and (found := cls._cached_template(cache, key, template)):
            return found
        with cpu.LLVM_LOCK:
            started = time.perf_counter()
            machine = target_machine()
            try:
                parsed = llvm_binding.parse_assembly(template.text)
                parsed.verify()
            except RuntimeError:  # a slot where LLVM takes only a constant
                return None
            cpu.merge_loop_nests(parsed, machine)
            cpu.optimize_program(parsed, machine)
            record("LLVM O2 (batch-generic)", cpu.instructions(parsed), started,
                   f"(LLVM instructions); {len(template.types)} batch-dependent values")
            started = time.perf_counter()
            code = llvm_worker.emit(machine, parsed, strength_reduction=False)
            record("machine code (batch-generic)", None, started)
        program = cls(template, code, any(f.name == POOL for f in parsed.functions), key)
        if cache is not None:
            cache.put(key, cpu.pack({"pooled": program.pooled, "prefix": template.prefix},
                                    [code, first.text.encode(), second.text.encode()]))
        return program

    @classmethod
    def _cached_template(cls, cache: Any, key: str, template: Template | None = None
                         ) -> GenericProgram | None:
        """The template the disk cache holds under `key` (`template` where it is known: its
        code alone is read), or None."""
        started = time.perf_counter()
        payload = cache.get(key)
        unpacked = None if payload is None else cpu.unpack(payload)
        if unpacked is None or len(unpacked[1]) != 3:
            return None
        meta, (code, first, second) = unpacked
        if template is None:
            template = Template.of(first.decode(), second.decode(), str(meta.get("prefix")))
        if template is None:
            return None
        record("disk cache: hit", None, started, str(cache.path(key)))
        return cls(template, code, bool(meta.get("pooled")), key)

    @classmethod
    def cached(cls, key: str, inputs: list[Argument], outputs: list[Argument],
               program: GenericProgram | None = None
               ) -> tuple[GenericProgram, Native] | None:
        """The instance the disk cache holds under `key` (instance_key), linked with its
        template (`program` where it is that one, else the cache's); None where it holds
        none, or not whole."""
        cache = disk_cache.default()
        payload = None if cache is None or not key else cache.get(key)
        unpacked = None if payload is None else cpu.unpack(payload)
        if unpacked is None:
            return None
        meta = unpacked[0]
        try:
            template_key, name = str(meta["template"]), str(meta["name"])
            values = [str(v) for v in meta["values"]]
            specs = [GemmSpec(**{k: tuple(v) if isinstance(v, list) else v
                                 for k, v in fields.items()}) for fields in meta["specs"]]
            arena_bytes = int(meta["arena_bytes"])
            keys = {str(k): str(v) for k, v in meta["data"].items()}
        except (KeyError, TypeError, ValueError):
            return None
        if program is None or program.key != template_key:
            program = cls._cached_template(cache, template_key)
        detached = data.fetch(cache, keys)
        if program is None or detached is None or len(values) != len(program.template.types):
            return None
        return program, program.link(name, inputs, outputs, values, specs, arena_bytes,
                                     detached)

    def instance(self, lowered: Lowered) -> Native | None:
        """The program at `lowered`'s batch size: the template's code with that batch's values
        and GEMM callers (kept in the disk cache under `lowered.key`); None if `lowered` is no
        instance of the template."""
        values = self.template.values(lowered.text)
        if values is None:
            return None
        native = self.link(lowered.name, lowered.inputs, lowered.outputs, values,
                           lowered.specs, lowered.arena_bytes, lowered.detached)
        cache = disk_cache.default()
        if cache is not None and lowered.key:
            cache.put(lowered.key, cpu.pack({
                "template": self.key, "name": lowered.name, "values": values,
                "specs": [dataclasses.asdict(spec) for spec in lowered.specs],
                "arena_bytes": lowered.arena_bytes,
                "data": data.store(cache, lowered.detached)}, []))
        return native

    def link(self, name: str, inputs: list[Argument], outputs: list[Argument],
             values: list[str], specs: list[GemmSpec], arena_bytes: int,
             detached: dict[str, bytes]) -> Native:
        """The template's code linked with a module of `values` and the callers of `specs`."""
        started = time.perf_counter()
        prefix = f"{SYMBOL_PREFIX}{name}."
        names = [f"{prefix}gemm.{n}" for n in range(len(specs))]
        host = Target.host()
        variants = sorted({variant(spec, host) for spec in specs}, key=lambda v: v.symbol)
        transposed = cpu.stores_transposed(specs, host)
        with cpu.LLVM_LOCK:
            machine = target_machine()
            text = cpu.callers_text(specs, names=names) + "\n" + \
                self.template.data_module(values)
            parsed = llvm_binding.parse_assembly(text)
            parsed.triple, parsed.data_layout = machine.triple, str(machine.target_data)
            code = llvm_worker.emit(machine, parsed, strength_reduction=False)
            for v in variants:
                cpu.load_kernel(v, transposed=v in transposed)
            if self.pooled:
                cpu.load_pool()
            engine = cpu.object_engine(self.code, code)
            address = engine.get_function_address(SYMBOL_PREFIX + name)
            scratch = cpu.bind_scratch(engine, names)
            bound = data.bind(engine, detached)
        native = Native(name, inputs, outputs, engine, cpu.entry(address, inputs, outputs),
                        arena_bytes, scratch, names, variants, transposed,
                        origin="batch-generic", data=detached, bound=bound)
        native.pooled = self.pooled
        record("batch-generic instance", None, started,
               f"{len(values)} values, {len(names)} GEMM callers")
        return native
