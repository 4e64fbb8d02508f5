"""Running test code in a fresh Python process: a crash there (a segfault, an abort in LLVM) is
a test failure, not the end of pytest; and under an address-space limit, so an allocation that
must fail fails at once rather than taking the machine's memory."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

LIMIT = 8 << 30
"""The child's address space: room for Python, numpy and LLVM, none for a stray huge buffer."""


def run_isolated(code: str, timeout: float = 300) -> str:
    """Run `code` (dedented) in a fresh interpreter that can import tapeml and the tests'
    helpers; its stdout. Raises AssertionError naming the exit status (a negative one is the
    signal that killed it) and the child's output if it did not exit 0."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))

    tests = str(Path(__file__).resolve().parent)  # its working directory: it imports tapeml
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(  # as this process does, not ./tapeml
        p for p in (tests, os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, preexec_fn=limit, env=env, cwd=tests)
    if done.returncode != 0:
        raise AssertionError(f"the child exited with status {done.returncode}\n--- stdout\n"
                             f"{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}")
    return done.stdout
