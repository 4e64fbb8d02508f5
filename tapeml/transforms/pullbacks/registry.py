"""The registry of the pullbacks: `PULLBACKS[Op]`, filled by each family's module with
`@pullback(Op)`, and NON_DIFFERENTIABLE, the ops that have no rule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tapeml.dialects import tape
from tapeml.dialects.base import TapeOp

Rule = Callable[..., tuple[Any, ...]]
PULLBACKS: dict[type[TapeOp], Rule] = {}
NON_DIFFERENTIABLE: frozenset[type[TapeOp]] = frozenset({tape.CmpOp, tape.ConstantOp})


def pullback(*op_types: type[TapeOp]) -> Callable[[Rule], Rule]:
    def register(rule: Rule) -> Rule:
        for op_type in op_types:
            PULLBACKS[op_type] = rule
        return rule

    return register
