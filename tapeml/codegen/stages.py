"""The stages every compiling backend shares: the program's tape, tape-fuse and tape-to-loops,
each kept as text on request and recorded for tapeml.profile()."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from tapeml.codegen.arguments import Argument, arguments
from tapeml.frontend.program import Program
from tapeml.profile import count_ops, record
from tapeml.transforms.fuse import fuse as fuse_module
from tapeml.transforms.to_loops import PlanReport, lower_module


class Stages:
    """Each stage's text, when asked for (printing is a fifth of a large program's compile)."""

    def __init__(self, wanted: bool) -> None:
        self.wanted = wanted
        self.texts: dict[str, str] = {}

    def keep(self, stage: str, text: Callable[[], str]) -> None:
        if self.wanted:
            self.texts[stage] = text()


def to_loops(program: Program, stages: Stages, fuse: bool, libm: bool,
             row_reductions: bool = False
             ) -> tuple[ModuleOp, list[Argument], list[Argument], PlanReport]:
    """A copy of `program` fused (if asked) and lowered to loops (`row_reductions`: the CPU's
    reductions, see tape-to-loops); its arguments and plan."""
    stages.keep("tape", lambda: str(program))
    module: Any = program.module.clone()  # the program stays as it was
    inputs, outputs = arguments(module)
    started = time.perf_counter()
    if fuse:
        report = fuse_module(module)
        stages.keep("fused tape", lambda: str(module))
        fired = ", ".join(f"{name} {n}" for name, n in report.fired.items() if n)
        record("tape-fuse", count_ops(module, top_level=True), started,
               f"{sum(report.fired.values())} idioms raised ({fired or 'none'}), "
               f"{report.groups} elementwise groups of {report.grouped_ops} ops")
    started = time.perf_counter()
    plan = lower_module(module, libm, row_reductions)
    stages.keep("loops", lambda: f"// {plan}\n{module!s}")
    record("tape-to-loops", count_ops(module), started, str(plan))
    return module, inputs, outputs, plan
