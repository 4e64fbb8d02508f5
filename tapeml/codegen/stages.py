"""How a backend runs its pipeline (tapeml/transforms/pipelines.py): pass by pass on a copy of
the module, each step recorded for tapeml.profile() and its text kept on request."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.exceptions import VerifyException

from tapeml import checks
from tapeml.profile import count_ops, record
from tapeml.transforms.fuse import FusePass
from tapeml.transforms.pipelines import Step


class Stages:
    """Each stage's text, when asked for (printing is a fifth of a large program's compile)."""

    def __init__(self, wanted: bool) -> None:
        self.wanted = wanted
        self.texts: dict[str, str] = {}

    def keep(self, stage: str, text: Callable[[], str]) -> None:
        if self.wanted:
            self.texts[stage] = text()


def run_pipeline(module: ModuleOp, steps: list[Step], stages: Stages,
                 after: Callable[[str, ModuleOp], None] | None = None, in_place: bool = False
                 ) -> tuple[ModuleOp, dict[str, Any]]:
    """A copy of `module` (which stays as it was; `in_place`: the module itself) through
    `steps`; and what each pass that reports returned (`run`), by pass name. The module's
    text is kept as stage "tape" first, then under each step's stage name, headed by its
    report. `after(pass name, module)` is called after each pass (a backend starting work the
    rest of the pipeline need not wait for). With TAPEML_CHECKS, the module is verified after
    each pass."""
    stages.keep("tape", lambda: str(module))
    if not in_place:
        module = module.clone()
    ctx = Context()
    reports: dict[str, Any] = {}
    verify_each = checks.enabled()
    for step in steps:
        started = time.perf_counter()
        run = getattr(step.pass_, "run", None)
        report = run(module) if run is not None else step.pass_.apply(ctx, module)
        name = step.pass_.name
        if verify_each:
            _verify_after(name, module)
        detail = "" if report is None else str(report)
        if step.stage is not None:
            head = f"// {name}: {detail}\n" if detail else ""
            stages.keep(step.stage, lambda head=head: head + str(module))
        fused = isinstance(step.pass_, FusePass)
        record(name, lambda fused=fused: count_ops(module, top_level=fused), started, detail)
        reports[name] = report
        if after is not None:
            after(name, module)
    return module, reports


def _verify_after(name: str, module: ModuleOp) -> None:
    """TAPEML_CHECKS' -verify-each: a pass that leaves the module invalid is named (a bug of
    tapeml's, never of the user's program: that was checked before the pipeline ran)."""
    try:
        module.verify()
    except VerifyException as error:
        raise VerifyException(f"TAPEML_CHECKS: the module does not verify after {name}: "
                              f"{error}") from error
