"""Linux perf's map of JIT code: with TAPEML_PERF_MAP=1, every object the CPU backend loads
(a program, a GEMM kernel's two modules, the thread pool; compiled or from the disk cache)
adds a line per function, `START SIZE NAME` in hex, to /tmp/perf-<pid>.map, where
`perf report` and `perf annotate`'s symbol lookup find them: a profile of a compiled program
names its loop nests and the kernels' tiles, packing and edges (`perf record -e cpu-clock`
works in a VM without hardware counters). The functions are read from the object's ELF
symbol table; where each section was loaded is found from one of its global functions, whose
address the engine knows.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable, Iterator

ENABLED = "TAPEML_PERF_MAP"
_LOCK = threading.Lock()

Symbol = tuple[str, int, int, int, bool]
"""A function of an object: its name, section index, offset in the section, size, and
whether it is global."""


def enabled() -> bool:
    return os.environ.get(ENABLED, "") not in ("", "0")


def path() -> str:
    return f"/tmp/perf-{os.getpid()}.map"


def functions(code: bytes) -> Iterator[Symbol]:
    """The functions in the symbol table of `code`, a 64-bit little-endian ELF object (what
    MCJIT emits on Linux); nothing for anything else, or a table that does not parse."""
    if code[:6] != b"\x7fELF\x02\x01":
        return
    try:
        shoff, = struct.unpack_from("<Q", code, 0x28)
        entsize, count = struct.unpack_from("<HH", code, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", code, shoff + i * entsize)
                    for i in range(count)]
        for _, kind, _, _, offset, size, link, _, _, symsize in sections:
            if kind != 2 or not symsize:  # SHT_SYMTAB
                continue
            strings = sections[link][4]
            for at in range(offset, offset + size, symsize):
                name, info, _, shndx, value, length = struct.unpack_from("<IBBHQQ", code, at)
                if info & 0xF != 2 or not 0 < shndx < count:  # STT_FUNC, defined here
                    continue
                end = code.index(b"\0", strings + name)
                yield (code[strings + name:end].decode("utf-8", "replace"), shndx, value,
                       length, info >> 4 == 1)
    except (struct.error, ValueError, IndexError):
        return


def lines(code: bytes, address_of: Callable[[str], int]) -> list[str]:
    """The map's lines for the functions of `code`, loaded where `address_of` (a global
    function's name -> its address, 0 if unknown) says; a section with no global function
    known to it is left out."""
    symbols = list(functions(code))
    bases: dict[int, int] = {}
    for name, section, offset, _, is_global in symbols:
        if is_global and section not in bases and (address := address_of(name)):
            bases[section] = address - offset
    return [f"{bases[section] + offset:x} {size:x} {name}"
            for name, section, offset, size, _ in symbols if section in bases and size]


def record(code: bytes, address_of: Callable[[str], int]) -> None:
    """Append the functions of `code` to this process's map (`lines`)."""
    found = lines(code, address_of)
    if found:
        with _LOCK, open(path(), "a") as out:
            out.write("\n".join(found) + "\n")
