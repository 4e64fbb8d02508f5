"""The reference backend: the program on xDSL's interpreter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from tapeml.codegen.arguments import Argument, checked, signature
from tapeml.interpreters import interpret


@dataclass
class Interpreted:
    module: ModuleOp
    name: str
    inputs: list[Argument]
    stages: dict[str, str] = field(default_factory=dict)

    def __call__(self, *leaves: Any) -> tuple[Any, ...]:
        """Every argument checked as the compiled backends check theirs, then interpreted."""
        if len(leaves) != len(self.inputs):
            raise TypeError(f"@{self.name} takes {len(self.inputs)} arrays, got {len(leaves)}")
        arrays = [checked(leaf, arg, self.name) for leaf, arg in zip(leaves, self.inputs,
                                                                     strict=True)]
        return interpret(self.module, self.name, *arrays)


class InterpBackend:
    name = "interp"

    def compile(self, module: ModuleOp, stages: bool = False, owned: bool = False
                ) -> Interpreted:  # (it changes nothing: `owned` or not, the module is run)
        name, inputs, _ = signature(module)
        return Interpreted(module, name, inputs, {"tape": str(module)} if stages else {})
