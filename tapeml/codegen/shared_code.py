"""Code compiled once per process for every program that has it: the functions
loop-bounds-as-arguments marked (SHARED_CODE_ATTR: an op's loops, their outer bounds as
arguments), keyed by their LLVM IR.

A program's LLVM IR is split before LLVM sees it (`split`): each marked function whose text
(with the functions it calls: a thread-pool part and its entry) is self-contained becomes a
module of its own, named by a digest of that text (`tapeml.shared.<digest>`); the program
declares it and calls it by that name. Those this process has not loaded yet are compiled as
the program is (LLVM at PROGRAM_LEVEL, no loop strength reduction), in one module, or two where
there is a second core (llvm_worker's process compiles one: cpu.SharedCode), loaded in an engine
of their own, and their symbols published for MCJIT to link the program against (as the GEMM
kernels' are). The engine lives while a program that calls its code does (each program holds
the engines it links against; the registry's references are weak): with every such program
gone, the code is freed and a later program compiles it again.

Earlier still, after loop-bounds-as-arguments, a function whose loop form (`loops_key`) this
process has compiled and still holds is replaced by a declaration of its symbol
(`declare_known`), so that the passes after it do not convert it again either. A new batch size
of a model lowers its ops to the same functions but for their bounds: the 2-layer GPT step at
batch 8 after 16 declares 40 of its 50 op functions (35 of 50 on two threads) and compiles 10
(15): 0.42 of its first call on one thread (0.79 before), 0.53 on two (0.90).

The disk cache keeps each module of a program's new functions as an entry (keyed by its text),
and a program's entry names the modules it links against; a new process loads them with the
program, or, where one is gone, compiles the program again.

A function is left in its program where it reads a global of the program (its constants) or
calls something other than LLVM's intrinsics, the C library and the thread pool: code that
holds another program's addresses would not be the same for two programs.
"""

from __future__ import annotations

import hashlib
import re
import threading
import weakref
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import llvmlite.binding as llvm_binding
from xdsl.dialects import func
from xdsl.dialects.builtin import MemRefType, ModuleOp, SymbolRefAttr

from tapeml import checks
from tapeml.dialects import kernel
from tapeml.transforms.bound_arguments import SHARED_CODE_ATTR
from tapeml.transforms.merge_nests import structure
from tapeml.transforms.to_llvm import SYMBOL_PREFIX

_NAME = r'@("(?:[^"\\]|\\.)*"|[-a-zA-Z$._][-a-zA-Z$._0-9]*)'
_REFERENCE = re.compile(_NAME)
_DEFINE = re.compile(r"^define [^@]*" + _NAME + r"\((.*?)\)", re.MULTILINE)
_DECLARE = re.compile(r"^declare [^@]*" + _NAME + r"\(", re.MULTILINE)
_GLOBAL = re.compile(r"^" + _NAME + r" = ", re.MULTILINE)
PREFIX = SYMBOL_PREFIX + "shared."
"""Every shared function's symbol starts so (no C symbol has a dot)."""
POOL = "tapeml_parallel_for"

_LOADED: dict[str, tuple[weakref.ref, str]] = {}  # symbol -> (its engine, its module's key)
_BY_LOOPS: dict[Hashable, str] = {}  # a shared function's loop form (`loops_key`) -> symbol
_LOCK = threading.Lock()


def loops_key(f: func.FuncOp, threads: int, functions: dict[str, func.FuncOp]
              ) -> tuple[Hashable, list[str]] | None:
    """A key equal for two functions of loops exactly when they are the same but for their
    names and the sizes of their buffer arguments (merge_nests.structure of their bodies and
    of the thread-pool parts they hand their loops to, each part named by its place), with
    the threads their parallel loops are lowered for: such functions lower to the same LLVM
    IR, where a buffer is a pointer. (With TAPEML_CHECKS every function is lowered and
    `learn` checks that.) And the parts (of `functions`, the module's by name). None for a
    function that calls another function, or a part that does."""
    parts: list[str] = []
    counted: list[bool] = []  # each parallel_for's, in order: its count an operand
    for op in f.walk():
        if isinstance(op, func.CallOp):
            return None
        if isinstance(op, kernel.ParallelForOp):
            part = functions.get(op.callee.root_reference.data)
            if part is None or part is f or any(
                    isinstance(inner, func.CallOp | kernel.ParallelForOp)
                    for inner in part.walk()):
                return None
            parts.append(part.sym_name.data)
            counted.append(op.count is not None)
    keys = [structure([g], []) for g in (f, *(functions[p] for p in parts))]
    if any(key is None for key in keys):
        return None
    places = {SymbolRefAttr(p): ("part", i) for i, p in enumerate(parts)}
    counts = iter(counted)
    body = tuple(_part_call(entry, places, next(counts))
                 if entry[0] == kernel.ParallelForOp.name else entry for entry in keys[0][1:])
    return (threads, _erased(f), body, tuple((_erased(functions[p]), key[1:])
                                             for p, key in zip(parts, keys[1:], strict=True))
            ), parts


def _erased(f: func.FuncOp) -> tuple:
    """`f`'s argument types, a buffer's size left out (a pointer in LLVM IR)."""
    return tuple(("buffer", t.element_type) if isinstance(t, MemRefType) else t
                 for t in f.function_type.inputs)


def _part_call(entry: tuple, places: dict[SymbolRefAttr, Hashable], counted: bool) -> tuple:
    """A kernel.parallel_for's entry of a structural key, its part named by its place and,
    where its count is an operand, the `iterations` it was outlined for left out (the code
    reads the count)."""
    name, operands, results, properties, *rest = _named(entry, places)
    if counted:
        properties = tuple(p for p in properties if p[0] != "iterations")
    return (name, operands, results, properties, *rest)


def _named(key: Any, places: dict[SymbolRefAttr, Hashable]) -> Any:
    """`key` (a structural key's entry) with the symbols of `places` replaced by theirs."""
    if isinstance(key, tuple):
        return tuple(_named(k, places) for k in key)
    return places.get(key, key) if isinstance(key, SymbolRefAttr) else key


@dataclass
class Known:
    """What `declare_known` did to a program's loop form: the shared functions it declared
    (by symbol), and the loop forms of the others (by their LLVM names), for `learn`."""

    declared: dict[str, Any] = field(default_factory=dict)  # symbol -> its engine
    keys: dict[str, Hashable] = field(default_factory=dict)


def declare_known(module: ModuleOp, threads: int) -> Known:
    """Each function of `module` (after loop-bounds-as-arguments) marked SHARED_CODE_ATTR whose
    loop form this process has compiled and loaded becomes a declaration of that shared
    function, which its calls name: the passes after and LLVM see it no more (a new batch size
    of a model converts and compiles none of its layers' ops again)."""
    known = Known()
    renamed: dict[str, str] = {}
    functions = {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}
    handed = Counter(op.callee.root_reference.data for f in functions.values()
                     if not f.is_declaration for op in f.walk()
                     if isinstance(op, kernel.ParallelForOp))  # (a part goes with its caller)
    for f in [op for op in functions.values()
              if SHARED_CODE_ATTR in op.attributes and not op.is_declaration]:
        found = loops_key(f, threads, functions)
        if found is None:
            continue
        key, parts = found
        with _LOCK:
            symbol = _BY_LOOPS.get(key)
            engine = _engine(symbol) if symbol is not None else None
        if engine is None or checks.enabled():
            known.keys[SYMBOL_PREFIX + f.sym_name.data] = key
            continue
        name = symbol[len(SYMBOL_PREFIX):]
        renamed[f.sym_name.data] = name
        if symbol not in known.declared:
            known.declared[symbol] = engine  # (held: the program links against it)
            module.body.block.insert_op_before(
                func.FuncOp.external(name, list(f.function_type.inputs), []), f)
        for gone in [f, *(functions[p] for p in parts if handed[p] == 1)]:
            gone.detach()
            gone.erase()
    if renamed:
        for f in module.ops:  # (tape-to-loops calls them from its functions' blocks)
            if isinstance(f, func.FuncOp) and not f.is_declaration:
                for op in f.body.block.ops:
                    if isinstance(op, func.CallOp) and \
                            (callee := op.callee.root_reference.data) in renamed:
                        op.properties["callee"] = SymbolRefAttr(renamed[callee])
    return known


def learn(known: Known, split: Split) -> None:
    """Remember the symbol each function `known` keeps the loop form of was given by `split`,
    so that a later program with the same loops declares it (`declare_known`)."""
    with _LOCK:
        for name, key in known.keys.items():
            if name in split.renamed:
                symbol = _BY_LOOPS.setdefault(key, split.renamed[name])
                if symbol != split.renamed[name] and checks.enabled():
                    raise AssertionError(f"tapeml: {name}'s loops are those of {symbol}, "
                                         f"but its LLVM IR is {split.renamed[name]}'s")


def _bare(name: str) -> str:
    """A name as written after @, unquoted (the texts here escape nothing in tapeml's names)."""
    return name[1:-1] if name.startswith('"') else name


def _quoted(name: str) -> str:
    return f'@"{name}"'


@dataclass
class _Function:
    name: str
    text: str  # its definition, from `define` to `}`
    params: str  # its parameters as the define line writes them
    calls: list[str] = field(default_factory=list)  # the symbols it refers to, in order


@dataclass
class Module:
    """A shared function (`symbol`) and its module's text (the functions it calls renamed
    after it), by its digest."""

    symbol: str
    text: str
    declarations: list[str]
    definitions: list[str]


@dataclass
class Split:
    """A program's LLVM IR with its shared functions declared (`program`); the modules they
    are defined by, `modules` (by symbol); `new`, those this process has not loaded."""

    program: str
    modules: dict[str, Module]
    new: list[str]
    header: str = ""
    renamed: dict[str, str] = field(default_factory=dict)  # a function's name -> its symbol
    engines: dict[str, Any] = field(default_factory=dict)  # the loaded ones' engines, held

    def group(self, symbols: list[str]) -> str:
        """The module defining the shared functions `symbols` (their declarations merged)."""
        declarations = sorted({d for s in symbols for d in self.modules[s].declarations})
        definitions = [d for s in symbols for d in self.modules[s].definitions]
        return (self.header + "\n".join(declarations) + "\n\n" + "\n\n".join(definitions)
                + "\n")

    def parts(self, second: float) -> tuple[list[str], list[str]]:
        """`new` in two parts for two processes to compile, the second about a fraction
        `second` of the lines (the larger functions placed first)."""
        sizes = {s: sum(d.count("\n") for d in self.modules[s].definitions) for s in self.new}
        parts: tuple[list[str], list[str]] = ([], [])
        lines = [0.0, 0.0]
        for symbol in sorted(self.new, key=lambda s: -sizes[s]):
            k = 0 if lines[0] * second <= lines[1] * (1 - second) else 1
            parts[k].append(symbol)
            lines[k] += sizes[symbol]
        return parts


def _functions(text: str) -> dict[str, _Function]:
    """The functions `text` defines, by name (unquoted)."""
    found: dict[str, _Function] = {}
    for match in _DEFINE.finditer(text):
        end = text.index("\n}", match.end()) + 2
        body = text[match.start():end]
        name = _bare(match.group(1))
        calls = [_bare(m.group(1)) for m in _REFERENCE.finditer(body, len(match.group(0)))]
        found[name] = _Function(name, body, match.group(2), list(dict.fromkeys(calls)))
    return found


LEAST_LINES = 400
"""A program whose shareable functions this process lacks hold fewer lines of LLVM IR than
this (and that calls none it has) keeps them: a module of their own costs a few
milliseconds, more than compiling so little again at another batch size saves (W3's step, two
functions of 200 lines: its cold first call 0.347 s against 0.336 s before functions were
shared, medians of six alternating processes, one core)."""


def split(text: str, names: set[str]) -> Split:
    """`text` (a program's LLVM IR) with each of the functions `names` that can be shared
    (see the module doc) replaced by a declaration of its shared symbol, which its calls now
    name; `text` as it is where they are few (LEAST_LINES)."""
    header = text[:text.index("\n", text.index("target datalayout")) + 1]
    functions = _functions(text)
    declared = {_bare(m.group(1)): text[m.start():text.index("\n", m.start())]
                for m in _DECLARE.finditer(text)}
    variables = {_bare(m.group(1)) for m in _GLOBAL.finditer(text)}
    modules: dict[str, Module] = {}
    renamed: dict[str, str] = {}
    for name in sorted(names & functions.keys()):
        module = _module(name, functions, declared, variables, header)
        if module is not None:
            modules[module.symbol] = module
            renamed[name] = module.symbol
    if not renamed:
        return Split(text, {}, [])
    with _LOCK:
        fresh = all(_engine(symbol) is None for symbol in modules)
    if fresh and sum(f.text.count("\n") for n, f in functions.items() if n in renamed
                     ) < LEAST_LINES:
        return Split(text, {}, [])
    kept = _without(text, functions, renamed)
    program = _REFERENCE.sub(
        lambda m: _quoted(renamed[_bare(m.group(1))]) if _bare(m.group(1)) in renamed
        else m.group(0), kept)
    params = {symbol: functions[name].params for name, symbol in renamed.items()
              if symbol not in declared}  # (declare_known's, at the loops)
    declarations = "".join(f"declare void {_quoted(symbol)}({p})\n"  # (two functions of a
                           for symbol, p in params.items())  # program may be the same code)
    new, engines = [], {}
    with _LOCK:
        for symbol in dict.fromkeys(renamed.values()):
            if (engine := _engine(symbol)) is None:
                new.append(symbol)
            else:
                engines[symbol] = engine  # (held: the program links against it)
    return Split(program + "\n" + declarations, modules, new, header, renamed, engines)


def _module(name: str, functions: dict[str, _Function], declared: dict[str, str],
            variables: set[str], header: str) -> Module | None:
    """The module of `name` and the functions it calls, renamed after a digest of its text;
    None if it reads a global or calls what another process would not have at that name."""
    order = [name]
    externals: list[str] = []
    for current in order:  # (grows as it goes: the functions called, first call first)
        for callee in functions[current].calls:
            if callee in functions:
                if callee not in order:
                    order.append(callee)
            elif callee in variables or callee not in declared or callee.startswith(
                    "tapeml") and callee != POOL:
                return None
            elif callee not in externals:
                externals.append(callee)
    placeholder = {n: f"{PREFIX}@" + (f".{i}" if i else "") for i, n in enumerate(order)}

    def rename(body: str, names: dict[str, str]) -> str:
        return _REFERENCE.sub(lambda m: _quoted(names[_bare(m.group(1))])
                              if _bare(m.group(1)) in names else m.group(0), body)

    definitions = [rename(functions[n].text, placeholder) for n in order]
    declarations = sorted(declared[e] for e in externals)
    digest = hashlib.sha256("\n".join([header, *declarations, *definitions]).encode()
                            ).hexdigest()[:24]
    final = {p: p.replace("@", digest) for p in placeholder.values()}
    definitions = [rename(d, final) for d in definitions]
    symbol = final[placeholder[name]]
    text = header + "\n".join(declarations) + "\n\n" + "\n\n".join(definitions) + "\n"
    return Module(symbol, text, declarations, definitions)


def _without(text: str, functions: dict[str, _Function], renamed: dict[str, str]) -> str:
    """`text` without the definitions of the functions `renamed` and of those that only they
    call (now compiled with them)."""
    dropped = set(renamed)
    while True:
        called = {c for n, f in functions.items() if n not in dropped for c in f.calls}
        more = {n for n in functions if n not in dropped and n not in called
                and any(n in functions[d].calls for d in dropped)}
        if not more:
            break
        dropped |= more
    for name in dropped:
        text = text.replace(functions[name].text, "", 1)
    return text


def _engine(symbol: str) -> Any | None:
    """The engine holding `symbol`'s code, while a program that calls it lives (under _LOCK)."""
    entry = _LOADED.get(symbol)
    return None if entry is None else entry[0]()


def engine(symbol: str) -> Any | None:
    """The engine holding `symbol`'s code, if this process has it (a program linked against
    it holds it: `publish`)."""
    with _LOCK:
        return _engine(symbol)


def key_of(symbol: str) -> str:
    """The disk cache key of the module that defined `symbol` in this process."""
    with _LOCK:
        return _LOADED[symbol][1]


def publish(engine: Any, symbols: list[str], key: str) -> bool:
    """Make `symbols`, defined by `engine`'s code, callable from every program MCJIT links from
    now on, for as long as a program that calls them holds `engine` (the Natives do: when
    none is left the code is freed, and a later program compiles it again); False (nothing
    published) if one is not defined there."""
    addresses = [engine.get_function_address(s) for s in symbols]
    if not all(addresses):
        return False
    with _LOCK:
        for symbol, address in zip(symbols, addresses, strict=True):
            if _engine(symbol) is None:
                llvm_binding.add_symbol(symbol, address)
                _LOADED[symbol] = (weakref.ref(engine), key)
    return True
