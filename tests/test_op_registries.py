"""Every tape op has a row in every table that gives it a meaning: its numpy semantics, its
pullback (or a mark that it has none), its loops (which the CPU and the GPU both compile), its
FLOPs, its StableHLO and whether it keeps the examples of a batch apart. A new op without
one fails here, naming the table."""

from __future__ import annotations

import pytest

from tapeml.codegen.ptx import LOWERS_ON_NVPTX
from tapeml.dialects import tape
from tapeml.dialects.registry import OpTable
from tapeml.frontend.flops import FLOPS
from tapeml.interpreters.tape import SEMANTICS
from tapeml.stablehlo import EMITTERS
from tapeml.transforms.gpu_to_nvvm import LIBDEVICE
from tapeml.transforms.loops.elementwise import OPS as ELEMENTWISE_OPS
from tapeml.transforms.loops.elementwise import SCALARS
from tapeml.transforms.loops.registry import LOWERINGS
from tapeml.transforms.per_example import PER_EXAMPLE
from tapeml.transforms.pullbacks import NON_DIFFERENTIABLE, PULLBACKS
from tapeml.transforms.to_llvm import BINARY_INTRINSICS, UNARY_INTRINSICS
from tapeml.transforms.to_loops import LOWERINGS as PASS_LOWERINGS

TABLES = {
    "interpreter semantics (tapeml/interpreters/tape/)": set(SEMANTICS),
    "pullback or NON_DIFFERENTIABLE (tapeml/transforms/pullbacks/)":
        set(PULLBACKS) | NON_DIFFERENTIABLE,
    "loops (tapeml/transforms/loops/)": set(LOWERINGS),
    "FLOPs (tapeml/frontend/flops.py)": set(FLOPS),
    "StableHLO (tapeml/stablehlo/)": set(EMITTERS),
    "batch rule (tapeml/transforms/per_example.py)": set(PER_EXAMPLE),
}


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_op_has_a_row(table):
    missing = sorted(op.name for op in tape.OPS if op not in TABLES[table])
    assert not missing, f"no row in the {table} for {', '.join(missing)}"


def test_every_elementwise_op_has_a_scalar_computation():
    """tape.fused groups and the elementwise loops compute each element with SCALARS."""
    missing = sorted(op.name for op in tape.ELEMENTWISE if op not in SCALARS)
    assert not missing, f"no scalar computation in tapeml/transforms/loops/elementwise.py for " \
                        f"{', '.join(missing)}"


@pytest.mark.parametrize("tape_op", sorted(ELEMENTWISE_OPS, key=lambda op: op.name),
                         ids=lambda op: op.name)
def test_the_math_op_of_every_elementwise_op_lowers_on_the_cpu_and_the_gpu(tape_op):
    """An elementwise op that is one math op (loops/elementwise.py's OPS) needs that op's row
    in the CPU's table (an LLVM intrinsic, to_llvm.py) and, on the GPU, libdevice's
    (gpu_to_nvvm.py) or an LLVM intrinsic that NVPTX lowers (codegen/ptx.py)."""
    math_op = ELEMENTWISE_OPS[tape_op]
    if math_op.name.startswith("math."):
        cpu = UNARY_INTRINSICS.get(math_op) or BINARY_INTRINSICS.get(math_op)
        assert cpu, f"{math_op.name} ({tape_op.name}) has no LLVM intrinsic in to_llvm.py"
        assert math_op in LIBDEVICE or LOWERS_ON_NVPTX.fullmatch(f"llvm.{cpu}.f32"), \
            f"{math_op.name} ({tape_op.name}) has no libdevice row in gpu_to_nvvm.py"


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


def test_a_table_refuses_a_second_rule_for_one_op():
    table = OpTable("loops")
    table.register(tape.AddOp)(lambda: 1)
    with pytest.raises(ValueError, match="tape.add has two rules for its loops"):
        table.register(tape.SubOp, tape.AddOp)(lambda: 2)
    assert all(isinstance(t, OpTable) for t in (SEMANTICS, PULLBACKS, LOWERINGS, SCALARS, FLOPS,
                                                EMITTERS))
