"""One mechanism for every table that gives a tape op a meaning (its numpy semantics, pullback,
loops, scalar computation, FLOPs): a dict from the op's class to its rule, filled by a decorator
written beside the rule, which refuses a second rule for one op.

    SEMANTICS = OpTable("numpy semantics")
    semantics = SEMANTICS.register

    @semantics(tape.SumOp)
    def sum_(x, *, axes, keepdims): ...

`tests/test_op_registries.py` checks that every op has a row in every table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

Rule = TypeVar("Rule", bound=Callable[..., Any])


class OpTable(dict[type, Rule], Generic[Rule]):
    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what
        """What a row holds ("pullback", "loops", ...), for the error of a second one."""

    def register(self, *ops: type) -> Callable[[Rule], Rule]:
        def add(rule: Rule) -> Rule:
            for op in ops:
                if op in self:
                    raise ValueError(f"{getattr(op, 'name', op)} has two rules for its "
                                     f"{self.what}")
                self[op] = rule
            return rule

        return add
