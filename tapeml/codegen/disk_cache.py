"""The persistent compilation cache: compiled programs' object code on disk, as JAX's and torch
inductor's are, so that a new process running a program compiled before skips the compile.

    where     $TAPEML_CACHE_DIR; else $XDG_CACHE_HOME/tapeml; else ~/.cache/tapeml (a
              leading ~ expanded in each)
    off       TAPEML_CACHE=0 (or off, false, no)
    bound     TAPEML_CACHE_MAX_BYTES (default 2 GiB; a whole number of bytes: 2147483648, 2e9,
              500M, 2GiB): after each write the least recently used entries are deleted until
              the rest fit
    key       a sha256 of everything that determines the code (`key()`); the backend names
              the parts: its input program (`program_text()`) and options, the target CPU and
              its features, tapeml's own sources (`sources_digest()`, so an edited checkout
              never loads code an older compiler wrote), xDSL's and LLVM's versions
    entry     <key>.tapeml: MAGIC, the payload's length and sha256, the payload. Written to a
              temporary file in the same folder, then renamed over the entry (atomic on POSIX):
              two processes compiling the same program each write a whole entry and the last
              rename wins. An entry whose magic, length or digest is wrong when read (truncated,
              corrupted, another format) is deleted and read as a miss: it is never loaded.
    recency   a hit sets the entry's modification time to now, and eviction goes oldest first

A cache that cannot be written (a read-only or full disk), a bound that cannot be read, or a
source of tapeml's that cannot be read (its key would not say which compiler wrote an entry)
warns once and compiles as if it were off (for the bound, with the default bound): a cache
problem never fails a compile.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import struct
import tempfile
import warnings
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any

MAGIC = b"tapeml-cache-1\n"
_HEADER = struct.Struct("<Q32s")  # the payload's length and sha256
SUFFIX = ".tapeml"
DEFAULT_MAX_BYTES = 2 << 30
_WARNED: set[Path] = set()  # the folders that could not be written, warned about
_WARNED_BOUNDS: set[str] = set()  # the TAPEML_CACHE_MAX_BYTES values warned about
_BOUND = re.compile(r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d{1,3})?)\s*([kmgt]?)(i?)b?\s*",
                    re.IGNORECASE)
"""A size: a number (a sign, digits, a fraction, an exponent of up to 3 digits) and a unit,
K, M, G or T (a power of 1000; KiB, MiB, GiB, TiB: of 1024), with a B after it or none."""


class DiskCache:
    """Entries under `directory`, at most `max_bytes` of them in all (see the module doc)."""

    def __init__(self, directory: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes

    def path(self, key: str) -> Path:
        return self.directory / (key + SUFFIX)

    def get(self, key: str) -> bytes | None:
        """The payload stored under `key`, or None (no entry, or a damaged one, now deleted)."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        payload = _payload(data)
        if payload is None:
            self.discard(key)
            return None
        with contextlib.suppress(OSError):  # another process may have evicted it meanwhile
            os.utime(path)  # recently used
        return payload

    def put(self, key: str, payload: bytes) -> None:
        """Store `payload` under `key` (atomically), then evict down to the bound."""
        data = MAGIC + _HEADER.pack(len(payload), hashlib.sha256(payload).digest()) + payload
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=self.directory, prefix=".writing-")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                os.replace(temporary, self.path(key))
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
            self.evict()
        except OSError as error:
            if self.directory not in _WARNED:  # once per folder
                _WARNED.add(self.directory)
                warnings.warn(f"tapeml: the compilation cache at {self.directory} cannot be "
                              f"written ({error}); compiling without it", RuntimeWarning,
                              stacklevel=2)

    def discard(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def entries(self) -> list[tuple[float, int, Path]]:
        """(last used, size, path) of every entry, least recently used first."""
        found = []
        try:
            paths = list(self.directory.glob("*" + SUFFIX))
        except OSError:
            return []
        for path in paths:
            try:
                stat = path.stat()
            except OSError:  # deleted by another process meanwhile
                continue
            found.append((stat.st_mtime, stat.st_size, path))
        return sorted(found)

    def evict(self) -> None:
        """Delete the least recently used entries until the rest fit in `max_bytes`."""
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        for _, size, path in entries:
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size


def _payload(data: bytes) -> bytes | None:
    head = len(MAGIC) + _HEADER.size
    if not data.startswith(MAGIC) or len(data) < head:
        return None
    length, digest = _HEADER.unpack_from(data, len(MAGIC))
    payload = data[head:]
    if len(payload) != length or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


def default() -> DiskCache | None:
    """The cache the environment asks for (read on each call), or None where it is off (or
    tapeml's sources cannot be read: `sources_digest`)."""
    if os.environ.get("TAPEML_CACHE", "1").strip().lower() in ("0", "off", "false", "no"):
        return None
    if _package_digest()[1] is not None:
        return None
    directory = os.environ.get("TAPEML_CACHE_DIR")
    if not directory:
        base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
        directory = os.path.join(base, "tapeml")
    # (a leading ~ expanded here: os.environ, a Dockerfile's ENV or a .env file has no shell)
    return DiskCache(Path(os.path.expanduser(directory)),
                     max_bytes(os.environ.get("TAPEML_CACHE_MAX_BYTES")))


def max_bytes(text: str | None) -> int:
    """TAPEML_CACHE_MAX_BYTES as a number of bytes (`_size`); unset, the default. A value that
    is no size, or a negative one, warns (once per value) and gives the default: a mistyped
    bound must neither fail the program's compiles nor, read as below zero, empty the cache."""
    if text is None or not text.strip():
        return DEFAULT_MAX_BYTES
    size = _size(text)
    if size is not None and size >= 0:
        return size
    if text not in _WARNED_BOUNDS:
        _WARNED_BOUNDS.add(text)
        problem = "is negative" if size is not None else "is not a number of bytes"
        warnings.warn(f"tapeml: TAPEML_CACHE_MAX_BYTES={text!r} {problem} (a whole number of "
                      "bytes: 2147483648, 2e9, 500M, 2GiB); the compilation cache keeps to the "
                      "default bound, 2 GiB", RuntimeWarning, stacklevel=2)
    return DEFAULT_MAX_BYTES


def _size(text: str) -> int | None:
    """`text` as `_BOUND` reads it, where that is a whole number of bytes (1.5G is, 1.5 is
    not: exact, as a Fraction); else None."""
    found = _BOUND.fullmatch(text)
    if found is None:
        return None
    number, unit, binary = found.groups()
    if binary and not unit:  # (5iB)
        return None
    size = Fraction(number) * (1024 if binary else 1000) ** " kmgt".index(unit.lower() or " ")
    return int(size) if size.denominator == 1 else None


def key(*parts: str | bytes) -> str:
    """A hex sha256 of `parts`, each length-prefixed (no two lists of parts collide)."""
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(struct.pack("<Q", len(data)))
        digest.update(data)
    return digest.hexdigest()


@lru_cache(maxsize=1)
def xdsl_version() -> str:
    """xDSL's version (a key's part): from the name of its metadata's folder beside the package
    where there is one (importlib.metadata, which xdsl.__version__ asks, cost a first compile
    20 ms to import and search), else xdsl.__version__."""
    import xdsl

    found = list(Path(xdsl.__file__).resolve().parent.parent.glob("xdsl-*.dist-info"))
    if len(found) == 1:
        return found[0].name.removeprefix("xdsl-").removesuffix(".dist-info")
    return str(xdsl.__version__)


def sources_digest() -> str:
    """A sha256 of every Python source of the tapeml package (`source_digest`): a key's part,
    so that an edited checkout never loads code an older compiler wrote. Once per process."""
    return _package_digest()[0]


@lru_cache(maxsize=1)
def _package_digest() -> tuple[str, str | None]:
    """The tapeml package's `source_digest`, warned about (once: cached) where a source cannot
    be read; `default()` is then None: a key that cannot tell this compiler from another must
    not load or store an entry."""
    root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    digest, problem = source_digest(root)
    if problem is not None:
        warnings.warn(f"tapeml: {problem}; compiling without the compilation cache",
                      RuntimeWarning, stacklevel=2)
    return digest, problem


def source_digest(root: str) -> tuple[str, str | None]:
    """A sha256 of the modules under the package folder `root`, by relative path (in the
    order of their parts), and what could not be read (None where all was). A module is a
    file, or a link to one, named as Python imports it (`jit.py`): an editor's lock file
    (emacs's `.#jit.py`, a link to nowhere) or a copy (`jit copy.py`) is none, nor is what
    a folder that is no package's name holds. os.walk and plain strings, not pathlib's
    rglob and relative_to (5.8 -> 3.0 ms of a warm start's 43)."""
    sources = []
    for folder, folders, names in os.walk(root):
        folders[:] = [name for name in folders if name.isidentifier()]
        parts = folder[len(root) + 1:].split(os.sep) if folder != root else []
        sources += [[*parts, name] for name in names if name.endswith(".py")
                    and name[:-3].isidentifier() and os.path.isfile(os.path.join(folder, name))]
    digest = hashlib.sha256()
    for parts in sorted(sources):
        digest.update("/".join(parts).encode() + b"\0")
        path = os.path.join(root, *parts)
        try:
            with open(path, "rb") as source:
                digest.update(source.read())
        except OSError as error:
            return digest.hexdigest(), f"tapeml's source {path} cannot be read ({error})"
    return digest.hexdigest(), None


def _attr_text(attr: Any) -> str:
    """An attribute as text; a dense literal as its type and a digest of its bytes (printing a
    model's weights element by element took seconds)."""
    from xdsl.dialects.builtin import DenseIntOrFPElementsAttr

    if isinstance(attr, DenseIntOrFPElementsAttr):
        return f"dense {attr.type} {hashlib.sha256(attr.data.data).hexdigest()}"
    return str(attr)


def program_text(module: Any) -> str:
    """Everything that determines what `module` (an xDSL operation) computes, as one string
    for `key()`: each op in order with its name, its operands (numbered as their definitions
    come), its result types and SSA names, its properties and attributes by name, and its
    regions' blocks (argument types, successors), recursively. What printing the module gives,
    in a fifth of the time: each attribute is written once however many ops share it (a
    program's types are), and the text is no one's to read."""
    numbers: dict[Any, int] = {}
    texts: dict[int, str] = {}
    out: list[str] = []

    def text(attr: Any) -> str:
        found = texts.get(id(attr))
        if found is None:
            found = texts[id(attr)] = _attr_text(attr)
        return found

    def define(value: Any) -> None:
        numbers[value] = len(numbers)
        out.append(f"%{value.name_hint or ''}:{text(value.type)}")

    def walk(op: Any) -> None:
        out.append(op.name)
        out.append(",".join(str(numbers[o]) for o in op.operands))
        for name in sorted(op.properties):
            out.append(f"<{name}={text(op.properties[name])}")
        for name in sorted(op.attributes):
            out.append(f"{{{name}={text(op.attributes[name])}")
        for result in op.results:
            define(result)
        if op.successors:
            out.append("^" + ",".join(str(blocks[b]) for b in op.successors))
        for region in op.regions:
            out.append(f"({len(region.blocks)}")
            for block in region.blocks:
                blocks.setdefault(block, len(blocks))
            for block in region.blocks:
                out.append(f"^{blocks[block]}")
                for arg in block.args:
                    define(arg)
                for inner in block.ops:
                    walk(inner)
            out.append(")")

    blocks: dict[Any, int] = {}
    walk(module)
    return "\0".join(out)
