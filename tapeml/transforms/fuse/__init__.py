"""`tape-fuse`: the fusion catalog. Idioms of the tape ops are raised to the fused ops that do the
same work at once; nothing else changes meaning.

Each idiom is a small `RewritePattern` that matches one exact spelling, checks every parameter,
and declines when the idiom is not exactly what it claims, for instance when an intermediate
value is used elsewhere, so that the fused op would not replace its work but repeat it. Layout
ops on the weight side and on cotangents are cheap views and may be shared.

    conv2d-forward     pad -> unfold -> permute/reshape -> matmul -> reshape/permute  => conv2d
    maxpool2d-forward  pad(-inf) -> unfold -> max over the window axes               => maxpool2d
    avgpool2d-forward  pad(0) -> unfold -> sum over the window axes / (kh * kw)       => avgpool2d
    conv2d-scale       (conv2d(x, W constant) [+ c]) * s, s and c per channel       => conv2d(x,
                       W*s) [+ c*s]: an inference batch norm folded into its convolution
    concat-of-pads     add of zero pads tiling one axis (slices' cotangents)         => concat

The backward idioms are matched in a first phase, the forward ones in a second: the weight
gradient of a convolution reads the forward's im2col rows, which become single-use only once it
is raised.

`tape-fuse{report=true}` prints what fired, per pattern, on stderr.

The package:

    matching.py     FusionPattern (a catalog entry), the producer-chain helpers, an unfold's
                    windows
    forward.py      the forward idioms above
    backward.py     their gradients: conv2d-backward-input, conv2d-backward-weight,
                    maxpool2d-backward, avgpool2d-backward
    slices.py       concat-of-pads (the gradient of slices taken side by side)
    elementwise.py  elementwise groups (tape.fused)
    __init__.py     the catalog in order, the pass (`fuse`, `FusePass`) and its report
"""

from __future__ import annotations

import inspect
import sys
import types
import typing
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern
from xdsl.transforms.dead_code_elimination import is_trivially_dead

from tapeml.dialects import tape
from tapeml.dialects.tape.canonicalize import LAYOUT_PATTERNS
from tapeml.transforms.fuse.backward import (
    AvgPoolBackward,
    ConvBackwardInput,
    ConvBackwardWeight,
    MaxPoolBackward,
)
from tapeml.transforms.fuse.elementwise import group_elementwise
from tapeml.transforms.fuse.forward import AvgPoolForward, ConvForward, ConvScale, MaxPoolForward
from tapeml.transforms.fuse.matching import FusionPattern
from tapeml.transforms.fuse.slices import ConcatOfPads

FORWARD: tuple[type[FusionPattern], ...] = (ConvForward, MaxPoolForward, AvgPoolForward,
                                            ConvScale)
BACKWARD: tuple[type[FusionPattern], ...] = (ConvBackwardInput, ConvBackwardWeight,
                                             MaxPoolBackward, AvgPoolBackward, ConcatOfPads)


@dataclass
class FusionReport:
    """What fired: idioms raised, per pattern in catalog order; elementwise groups formed."""

    fired: Counter[str] = field(default_factory=Counter)
    groups: int = 0
    grouped_ops: int = 0

    def __str__(self) -> str:
        """One line: the profile's detail for tape-fuse."""
        fired = ", ".join(f"{name} {n}" for name, n in self.fired.items() if n)
        return (f"{sum(self.fired.values())} idioms raised ({fired or 'none'}), "
                f"{self.groups} elementwise groups of {self.grouped_ops} ops")

    def table(self) -> str:
        """Every pattern with how often it fired (tape-fuse{report=true} prints it)."""
        total = sum(self.fired.values())
        lines = [f"tape-fuse: {total} idiom{'s' if total != 1 else ''} raised, {self.groups} "
                 f"elementwise group{'s' if self.groups != 1 else ''} of {self.grouped_ops} ops"]
        lines += [f"  {p.name:<28}{self.fired[p.name]:>4}" for p in (*BACKWARD, *FORWARD)]
        lines.append(f"  {'elementwise-groups':<28}{self.groups:>4}")
        return "\n".join(lines)


def roots(pattern: RewritePattern) -> tuple[type[Operation], ...]:
    """The op types `pattern` rewrites: those its `match_and_rewrite` is annotated with, where
    xDSL's `op_type_rewrite_pattern` tests them (its closure keeps the annotated function);
    every op type otherwise (the pattern then tests each op itself)."""
    method = type(pattern).match_and_rewrite
    cells = dict(zip(method.__code__.co_freevars, method.__closure__ or (), strict=True))
    if "func" not in cells:
        return (Operation,)
    parameters = list(inspect.signature(cells["func"].cell_contents,
                                        eval_str=True).parameters.values())
    hint = parameters[1].annotation
    kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if all(isinstance(k, type) and issubclass(k, Operation) for k in kinds):
        return kinds
    return (Operation,)


@dataclass(eq=False)
class ByRoot(RewritePattern):
    """xDSL's GreedyRewritePatternApplier (a dead op erased, else the first pattern that
    acts), trying on each op only the patterns whose `roots` it is one of (decided once per op
    type): every pattern on every op was a third of tape-fuse, mostly isinstance tests."""

    patterns: Sequence[RewritePattern]
    _for: dict[type[Operation], list[RewritePattern]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._roots = [(p, roots(p)) for p in self.patterns]

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if is_trivially_dead(op):
            rewriter.erase(op)
            return
        kind = type(op)
        if (patterns := self._for.get(kind)) is None:
            patterns = self._for[kind] = [p for p, r in self._roots if issubclass(kind, r)]
        for pattern in patterns:
            pattern.match_and_rewrite(op, rewriter)
            if rewriter.has_done_action:
                return


def _run(module: ModuleOp, patterns: list[RewritePattern]) -> None:
    PatternRewriteWalker(ByRoot(patterns)).rewrite_module(module)


def fuse(module: ModuleOp) -> FusionReport:
    """Apply the catalog to `module` in place; returns what fired."""
    report = FusionReport()
    make: Callable[[type[FusionPattern]], FusionPattern] = lambda p: p(report.fired)  # noqa: E731
    _run(module, [*LAYOUT_PATTERNS, *map(make, BACKWARD)])
    _run(module, [*LAYOUT_PATTERNS, *map(make, FORWARD)])
    group_elementwise(module)
    _count_groups(module, report)
    return report


def _count_groups(module: ModuleOp, report: FusionReport) -> None:
    """Report the groups there are."""
    groups = [op for op in module.walk() if isinstance(op, tape.FusedOp)]
    report.groups = len(groups)
    report.grouped_ops = sum(len(g.body.block.ops) - 1 for g in groups)


@dataclass(frozen=True)
class FusePass(ModulePass):
    """Raise idioms to fused ops (see the module doc)."""

    name = "tape-fuse"

    report: bool = False
    """Print what fired, per pattern, on stderr."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.run(op)

    def run(self, module: ModuleOp) -> FusionReport:
        fired = fuse(module)
        if self.report:
            print(fired.table(), file=sys.stderr)
        return fired
