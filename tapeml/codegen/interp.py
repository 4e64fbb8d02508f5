"""The reference backend: the program on xDSL's interpreter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tapeml.codegen.arguments import Argument, arguments, checked
from tapeml.frontend.program import Program
from tapeml.interpreters import interpret


@dataclass
class Interpreted:
    program: Program
    inputs: list[Argument]
    stages: dict[str, str] = field(default_factory=dict)

    def __call__(self, *leaves: Any) -> tuple[Any, ...]:
        """Every argument checked as the compiled backends check theirs, then interpreted."""
        name = self.program.name
        if len(leaves) != len(self.inputs):
            raise TypeError(f"@{name} takes {len(self.inputs)} arrays, got {len(leaves)}")
        arrays = [checked(leaf, arg, name) for leaf, arg in zip(leaves, self.inputs,
                                                                strict=True)]
        return interpret(self.program.module, name, *arrays)


class InterpBackend:
    name = "interp"

    def compile(self, program: Program, stages: bool = False) -> Interpreted:
        return Interpreted(program, arguments(program.module)[0],
                           {"tape": str(program)} if stages else {})
