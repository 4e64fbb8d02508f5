"""Every tape op has a row in every table that gives it a meaning: its numpy semantics, its
pullback (or a mark that it has none), its loops (which the CPU and the GPU both compile), and
its FLOPs. A new op without one fails here, naming the table."""

from __future__ import annotations

import pytest

from tapeml.dialects import tape
from tapeml.frontend.flops import FLOPS
from tapeml.interpreters.tape import SEMANTICS
from tapeml.transforms.loops.registry import LOWERINGS
from tapeml.transforms.pullbacks import NON_DIFFERENTIABLE, PULLBACKS
from tapeml.transforms.to_loops import LOWERINGS as PASS_LOWERINGS

TABLES = {
    "interpreter semantics (tapeml/interpreters/tape.py)": set(SEMANTICS),
    "pullback or NON_DIFFERENTIABLE (tapeml/transforms/pullbacks.py)":
        set(PULLBACKS) | NON_DIFFERENTIABLE,
    "loops (tapeml/transforms/loops/)": set(LOWERINGS),
    "FLOPs (tapeml/frontend/flops.py)": set(FLOPS),
}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_op_has_a_row(table):
    missing = sorted(op.name for op in tape.OPS if op not in TABLES[table])
    assert not missing, f"no row in the {table} for {', '.join(missing)}"


def test_the_pass_reads_the_registry_every_family_fills():
    assert PASS_LOWERINGS is LOWERINGS
    assert not set(PULLBACKS) & NON_DIFFERENTIABLE


def test_importing_the_dialects_loads_no_backend():
    """Stock xdsl-opt loads tapeml's dialects: that must not load LLVM or the CUDA driver."""
    import subprocess
    import sys

    code = ("import sys, tapeml.dialects.tape, tapeml.dialects.kernel; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('llvmlite', 'cuda')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
