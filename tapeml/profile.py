"""`tapeml.profile()`: what each stage of the pipeline did and how long it took.

    with tapeml.profile() as stages:
        step(params, x, y)             # a first call: traced, differentiated, fused, compiled
    for stage in stages:
        print(stage)                   # e.g. "tape-fuse   49 ops   12.3 ms   9 idioms raised ..."

Tracing, `tape-differentiate` and each step of a backend's compilation record a `Stage` while a
profile is open (in this thread or task); nothing is recorded, and nothing costs, otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from xdsl.ir import Operation

_STAGES: ContextVar[list[Stage] | None] = ContextVar("tapeml_profile", default=None)


@dataclass
class Stage:
    name: str
    ops: int | None
    """Ops in the program after this stage (a fused group counts once; loops count their
    bodies), or lines of text for the LLVM stages."""
    seconds: float
    detail: str = ""

    def __str__(self) -> str:
        count = "" if self.ops is None else f"{self.ops:>7,} ops"
        text = f"{self.name:<24}{count:>11} {self.seconds * 1e3:>9.1f} ms"
        return f"{text}   {self.detail}" if self.detail else text


@contextmanager
def profile() -> Iterator[list[Stage]]:
    """Collect the stages run inside the block, in order, into the list it yields (inside
    another profile's block, they are that one's stages too)."""
    stages: list[Stage] = []
    token = _STAGES.set(stages)
    try:
        yield stages
    finally:
        _STAGES.reset(token)
        if (outer := _STAGES.get()) is not None:
            outer.extend(stages)


def profiling() -> bool:
    return _STAGES.get() is not None


def record(name: str, ops: int | Callable[[], int] | None, started: float,
           detail: str = "") -> None:
    """Record a stage that began at `time.perf_counter()` value `started` (if profiling);
    `ops` may be a function that counts them, called only then (a count walks the program:
    W4's first call spent 45 ms counting ops for no one)."""
    stages = _STAGES.get()
    if stages is not None:
        seconds = time.perf_counter() - started
        stages.append(Stage(name, ops() if callable(ops) else ops, seconds, detail))


def count_ops(root: Operation, top_level: bool = False) -> int:
    """Ops under `root` (not counting it), or with `top_level` those in its functions' bodies
    without descending into regions (a `tape.fused` group is one op) nor counting returns."""
    if not top_level:
        return sum(1 for _ in root.walk()) - 1
    total = 0
    for op in root.walk():
        if op.name == "func.func":
            total += sum(len(block.ops) - 1 for region in op.regions for block in region.blocks)
    return total


@dataclass
class KernelTime:
    """One row of a run's profile: a tape op (or fused group) and the time its loops took."""

    label: str
    """The op's name (a fused group's ops), its operands' shapes and its result's."""
    seconds: float
    """Per call of the program, the kernels and thread-pool jobs its loops call included."""
    calls: int
    """How many times it ran over the profiled calls."""


@dataclass
class KernelProfile:
    """Where a compiled program's time goes, op by op (`Jitted.profile`): rows in program
    order; `str()` prints them slowest first, with their share of the marked time."""

    rows: list[KernelTime]
    seconds: float
    """Per call, as Python timed the whole call (argument checks and output arrays included)."""

    def __str__(self) -> str:
        marked = sum(r.seconds for r in self.rows)
        lines = [f"{self.seconds * 1e3:.3f} ms per call, {marked * 1e3:.3f} ms of it in the "
                 "program's ops (#: the op's place in the program):"]
        order = sorted(range(len(self.rows)), key=lambda i: -self.rows[i].seconds)
        for i in order:
            r = self.rows[i]
            lines.append(f"{r.seconds * 1e6:>10.1f} us {r.seconds / (marked or 1.0):>6.1%}  "
                         f"#{i:<4} {r.label}")
        return "\n".join(lines)
