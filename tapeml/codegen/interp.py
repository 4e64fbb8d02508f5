"""The reference backend: the program on xDSL's interpreter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tapeml.frontend.program import Program
from tapeml.interpreters import interpret


@dataclass
class Interpreted:
    program: Program
    stages: dict[str, str] = field(default_factory=dict)

    def __call__(self, *leaves: Any) -> tuple[Any, ...]:
        return interpret(self.program.module, self.program.name, *leaves)


class InterpBackend:
    name = "interp"

    def compile(self, program: Program, stages: bool = False) -> Interpreted:
        return Interpreted(program, {"tape": str(program)} if stages else {})
