"""The clock of a profiled run: `tapeml_profile_mark(index)`, what each `kernel.mark` calls.

A program lowered with `tape-to-loops{profile=true}` calls it before each tape op's loops (with
that op's entry in a table), and with -1 when it is done. The time from one mark to the next
(CLOCK_MONOTONIC, in nanoseconds) is added to the entry the first one named, and that entry's
count goes up by one, so each op's row holds its loops' time, the kernels and thread-pool jobs
they call included (the marks are called on the calling thread only). While no table is set,
a mark returns at once.

    with marks.counting(entries) as table:    # int64 [ns, calls] per entry
        program(*args)

One table at a time, per process (`counting` holds a lock).
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from llvmlite import binding as llvm_binding

from tapeml.transforms.to_llvm import MARK

_CLOCK_MONOTONIC = 6 if sys.platform == "darwin" else 1

IR = f"""
@tapeml_profile_table = global ptr null
@tapeml_profile_since = global i64 0
@tapeml_profile_entry = global i64 -1

declare i32 @clock_gettime(i32, ptr)

define void @{MARK}(i64 %index) {{
entry:
  %table = load ptr, ptr @tapeml_profile_table
  %off = icmp eq ptr %table, null
  br i1 %off, label %done, label %on
on:
  %ts = alloca [2 x i64], align 8
  %rc = call i32 @clock_gettime(i32 {_CLOCK_MONOTONIC}, ptr %ts)
  %sec = load i64, ptr %ts
  %nsec_at = getelementptr i64, ptr %ts, i64 1
  %nsec = load i64, ptr %nsec_at
  %sec_ns = mul i64 %sec, 1000000000
  %now = add i64 %sec_ns, %nsec
  %current = load i64, ptr @tapeml_profile_entry
  %counting = icmp sge i64 %current, 0
  br i1 %counting, label %count, label %next
count:
  %since = load i64, ptr @tapeml_profile_since
  %spent = sub i64 %now, %since
  %slot = mul i64 %current, 2
  %ns_at = getelementptr i64, ptr %table, i64 %slot
  %ns = load i64, ptr %ns_at
  %ns_new = add i64 %ns, %spent
  store i64 %ns_new, ptr %ns_at
  %calls_slot = add i64 %slot, 1
  %calls_at = getelementptr i64, ptr %table, i64 %calls_slot
  %calls = load i64, ptr %calls_at
  %calls_new = add i64 %calls, 1
  store i64 %calls_new, ptr %calls_at
  br label %next
next:
  store i64 %index, ptr @tapeml_profile_entry
  store i64 %now, ptr @tapeml_profile_since
  br label %done
done:
  ret void
}}
"""

_LOCK = threading.Lock()
_ENGINE: Any = None


def load(machine: llvm_binding.TargetMachine) -> None:
    """Compile the clock once per process and publish `tapeml_profile_mark` to the programs
    MCJIT links later (a machine of its own: an engine owns the machine it is given)."""
    global _ENGINE
    if _ENGINE is not None:
        return
    parsed = llvm_binding.parse_assembly(IR)
    parsed.triple, parsed.data_layout = machine.triple, str(machine.target_data)
    parsed.verify()
    engine = llvm_binding.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    llvm_binding.add_symbol(MARK, engine.get_function_address(MARK))
    _ENGINE = engine


@contextmanager
def counting(entries: int) -> Iterator[np.ndarray]:
    """While the block runs, marks count into a zeroed table of `entries` rows of
    [nanoseconds, calls], yielded; after it, marks count nothing again."""
    if _ENGINE is None:
        raise RuntimeError("tapeml: the profiling clock is not loaded (marks.load)")
    table = np.zeros((entries, 2), np.int64)
    pointer = ctypes.c_void_p.from_address(
        _ENGINE.get_global_value_address("tapeml_profile_table"))
    entry = ctypes.c_int64.from_address(_ENGINE.get_global_value_address("tapeml_profile_entry"))
    with _LOCK:
        entry.value = -1
        pointer.value = table.ctypes.data
        try:
            yield table
        finally:
            pointer.value = None
            entry.value = -1
