"""tape-fuse's elementwise groups (`group_elementwise`): each elementwise op that no group took
in starts one, and a group takes in what feeds it: the elementwise ops whose only users are in
it, the broadcasts feeding it (it broadcasts its inputs itself), its splat constants and the
iotas feeding it (as `tape.index`: the loop's position, no buffer). A group of one op that
takes nothing in is left as that op. Reductions, layout ops and contractions end a group.

The ops are visited from the last to the first, so a group starts at the op that consumes a
chain and reaches back along it; each group is decided on the ops as traced and built once
(a `tape.fused` built and rebuilt per merge cost most of tape-fuse on a deep model).

The element types in a group are whatever its ops' are: a compare feeding a select, a cast in
a float chain, integer index arithmetic all fuse as float chains do. Constants and iotas are
taken in even where they have other users (they cost no reads), and so is an op of positions
(reading iotas and constants only: a causal mask read by the forward and the backward select),
which each group reading it computes itself; and so is a cheap op (`CHEAP`: an instruction
or two per element) whose users are all elementwise, at most MAX_COPIES of them, and which
reads at most one buffer as large as its result: each group computes it again, reading that
buffer instead of the op's own (a bias add read by an activation and by its pullback is never
written). Any other op is taken in only when every user of its result is in the group. An
op that is not cheap and makes fewer elements than the group (read broadcast) stays out: in
the group it would run once per element, not once per its own (a log of each row's sum, the
square root of each row's variance). A group's inputs must still span its result shape (a
`tape.fused` is as wide as its inputs broadcast together).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.transforms.dead_code_elimination import is_trivially_dead

from tapeml.dialects import tape
from tapeml.dialects.base import one_of


def _element(t: Any) -> TensorType:
    return tape.tensor_type((), t.get_element_type())


def _positions_kept(source_shape: Sequence[int], shape: Sequence[int],
                    axes: Sequence[int]) -> bool:
    """Positions along `axes` of `source_shape` are the same read in `shape` it broadcasts to
    (a dim of 1 broadcast wider would count where it stood still)."""
    lead = len(shape) - len(source_shape)
    return all(source_shape[a] == shape[lead + a] for a in axes)


def _index_axes(group: tape.FusedOp) -> list[int]:
    return [op.params["axis"] for op in group.body.block.ops if isinstance(op, tape.IndexOp)]


def _clone_body(source: Block, args: Sequence[SSAValue], into: Block, lead: int = 0) -> SSAValue:
    """Copy `source`'s ops into `into`, its arguments read as `args`, in a group of `lead`
    more dims in front (its positions' axes move by as many); the value it yields."""
    mapping: dict[SSAValue, SSAValue] = dict(zip(source.args, args, strict=True))
    for op in source.ops:
        if isinstance(op, tape.YieldOp):
            return mapping[op.value]
        if isinstance(op, tape.IndexOp) and lead:
            clone = tape.IndexOp.build(axis=op.params["axis"] + lead, dtype=op.params["dtype"])
        else:
            clone = op.clone(value_mapper=mapping)
        into.add_op(clone)
        mapping.update(zip(op.results, clone.results, strict=True))
    raise AssertionError("a tape.fused body ends in tape.yield")


_groupable = one_of(tape.FusedOp,
                    *(op for op in tape.ELEMENTWISE if op is not tape.ConstantOp))
"""An op a group computes element by element: an elementwise op, or a group already."""


CHEAP = (tape.AddOp, tape.SubOp, tape.MulOp, tape.MaximumOp, tape.MinimumOp, tape.NegOp,
         tape.ReluOp, tape.AbsOp, tape.SignOp, tape.CmpOp, tape.SelectOp, tape.CastOp,
         tape.AndOp, tape.OrOp, tape.XorOp, tape.NotOp, tape.StopGradientOp)
"""Ops of an instruction or two per element: cheaper to compute again in each group that
reads them than to write once and read back."""

MAX_COPIES = 4
"""The most groups a cheap op is computed in, copied."""

_cheap = one_of(*CHEAP)


def _read_size(value: SSAValue) -> int:
    """Elements a group reading `value` reads: a broadcast's input's, none of a constant's or
    an iota's (a group computes those)."""
    while isinstance(value.owner, tape.BroadcastOp):
        value = value.owner.input
    if isinstance(value.owner, tape.ConstantOp | tape.IotaOp):
        return 0
    return math.prod(value.type.get_shape())


def _copied(op: Operation) -> bool:
    """`op` may be computed again in each group that reads it, as every user of its result may:
    it is cheap, it has few users, each of them elementwise, and it reads at most one buffer
    as large as its result (so a user reading that instead reads no more)."""
    users = [use.operation for use in op.results[0].uses]
    return _cheap(op) and len(users) <= MAX_COPIES and all(map(_groupable, users)) \
        and sum(_read_size(v) == math.prod(op.results[0].type.get_shape())
                for v in op.operands) <= 1


def _reads(op: Operation) -> list[SSAValue]:
    return list(op.inputs) if isinstance(op, tape.FusedOp) else list(op.operands)


class _Positions:
    """Which ops compute positions only: all they read, transitively, is iotas and splat
    constants (any group reading one may compute it itself)."""

    def __init__(self) -> None:
        self.known: dict[Operation, bool] = {}

    def __call__(self, op: Operation) -> bool:
        if op not in self.known:
            self.known[op] = _groupable(op) and all(
                isinstance(v.owner, tape.IotaOp) or _is_splat(v) or
                (isinstance(v.owner, Operation) and self(v.owner)) for v in _reads(op))
        return self.known[op]


def _is_splat(value: SSAValue) -> bool:
    return isinstance(value.owner, tape.ConstantOp) and tape.is_splat(value.owner.value)


@dataclass
class _Group:
    """A group being decided: its root (the op whose result it gives), the ops it computes,
    the values it reads, the broadcasts it reads through and the constants and iotas it
    computes itself."""

    root: Operation
    reads: list[SSAValue]
    members: set[Operation] = field(default_factory=set)
    copies: set[Operation] = field(default_factory=set)  # (members other ops read too)
    through: set[tape.BroadcastOp] = field(default_factory=set)
    leaves: set[Operation] = field(default_factory=set)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.root.results[0].type.get_shape()

    def spans(self, replace: SSAValue, by: Sequence[SSAValue]) -> bool:
        """The group still spans its shape with `replace` read as `by`."""
        rest = [v.type.get_shape() for v in self.reads if v is not replace]
        rest += [v.type.get_shape() for v in by]
        shape = self.shape  # (every read broadcasts to it: one of its shape spans it)
        return bool(rest) and (shape in rest or np.broadcast_shapes(*rest) == shape)

    def read_only_here(self, value: SSAValue) -> bool:
        """Every use of `value` is by an op of the group, or by a broadcast it reads
        through that only it reads."""
        return all((use.operation in self.members and use.operation not in self.copies) or (
            use.operation in self.through and self.read_only_here(use.operation.results[0]))
            for use in value.uses)

    def widens(self, value: SSAValue, source: Operation) -> bool:
        """Taking `source` in would compute it once per element of the group where it makes
        fewer (`value` broadcast), and it is not cheap: a log of a row's sum, a square root of
        a row's variance stay out, computed once per row."""
        if math.prod(value.type.get_shape()) == math.prod(self.shape):
            return False
        ops = list(source.body.block.ops)[:-1] if isinstance(source, tape.FusedOp) else [source]
        return not all(isinstance(op, (*CHEAP, tape.ConstantOp, tape.IndexOp)) for op in ops)

    def replace(self, value: SSAValue, by: Sequence[SSAValue]) -> None:
        at = self.reads.index(value)
        reads = self.reads[:at] + list(by) + self.reads[at + 1:]
        self.reads = [v for v in dict.fromkeys(reads) if v is not value]

    def take_in(self, value: SSAValue, positions: _Positions, never: set[SSAValue]) -> bool:
        """Take in what computes `value`, if it may be; whether it was. A value that may never
        be, whatever the group takes in later (not an op's, not groupable, not a broadcast,
        a splat or an iota), is added to `never`."""
        source = value.owner
        if not isinstance(source, Operation):
            never.add(value)
            return False
        groupable = _groupable(source)
        only_here = groupable and self.read_only_here(value)
        if groupable and (only_here or positions(source) or _copied(source)) and \
                not self.widens(value, source) and self.spans(value, _reads(source)) and (
                    not isinstance(source, tape.FusedOp) or
                    _positions_kept(value.type.get_shape(), self.shape, _index_axes(source))):
            self.members.add(source)
            if not only_here:
                self.copies.add(source)
            self.reads.remove(value)
            self.reads = list(dict.fromkeys(self.reads + _reads(source)))
            return True
        if isinstance(source, tape.BroadcastOp) and self.spans(value, [source.input]):
            self.through.add(source)
            self.replace(value, [source.input])
            return True
        if (_is_splat(value) or isinstance(source, tape.IotaOp) and _positions_kept(
                value.type.get_shape(), self.shape, [source.params["axis"]])) and \
                self.spans(value, []):
            self.leaves.add(source)
            self.reads.remove(value)
            return True
        if not (groupable or isinstance(source, tape.BroadcastOp | tape.IotaOp
                                        | tape.ConstantOp)):
            never.add(value)
        return False

    def grow(self, positions: _Positions) -> None:
        """Take in what may be taken in, until nothing more may (in the order of the reads,
        from the first again after each: those that never may are not tried again)."""
        never: set[SSAValue] = set()
        while any(v not in never and self.take_in(v, positions, never) for v in self.reads):
            pass

    def alone(self) -> bool:
        """Nothing taken in: a group as it was, or an op over operands as wide as its
        result."""
        if self.leaves or self.through or len(self.members) > 1:
            return False
        if isinstance(self.root, tape.FusedOp):
            return self.reads == list(self.root.inputs)
        return all(v.type.get_shape() == self.shape for v in self.reads)

    def build(self, order: dict[Operation, int], splats: dict[Operation, Operation]
              ) -> tape.FusedOp:
        """The group as one tape.fused over its reads (`splats`: each splat constant's
        rank-0 constant, made once for every group that computes it)."""
        body = Block(arg_types=[_element(v.type) for v in self.reads])
        env: dict[SSAValue, SSAValue] = dict(zip(self.reads, body.args, strict=True))
        rank = len(self.shape)
        for leaf in sorted(self.leaves, key=order.__getitem__):
            if isinstance(leaf, tape.IotaOp):
                lead = rank - len(leaf.result.type.get_shape())
                inner = tape.IndexOp.build(axis=leaf.params["axis"] + lead,
                                           dtype=leaf.params["dtype"])
            else:
                if leaf not in splats:
                    splats[leaf] = tape.ConstantOp.build(value=tape.first_element(leaf.value))
                inner = splats[leaf].clone()
            body.add_op(inner)
            env[leaf.results[0]] = inner.results[0]

        def read(value: SSAValue) -> SSAValue:
            while value not in env:  # a broadcast read through: its input, broadcast here
                value = value.owner.input
            return env[value]

        for op in sorted(self.members, key=order.__getitem__):
            if isinstance(op, tape.FusedOp):
                lead = rank - len(op.result.type.get_shape())
                out = _clone_body(op.body.block, [read(v) for v in op.inputs], body, lead)
            else:  # the op on one element: its parameters, its element type (its shape rule
                # on rank-0 operands; built so, not inferred again: a fifth of tape-fuse)
                inner = type(op).create(operands=[read(v) for v in op.operands],
                                        result_types=[_element(op.results[0].type)],
                                        properties=dict(op.properties))
                body.add_op(inner)
                out = inner.results[0]
            env[op.results[0]] = out
        body.add_op(tape.YieldOp.create(operands=[env[self.root.results[0]]]))
        # (its type the root's, which it stands for: not inferred again, TAPEML_CHECKS
        # verifies it)
        fused = tape.FusedOp.create(operands=self.reads, result_types=[self.root.results[0].type],
                                    regions=[Region([body])])
        fused.location = self.root.location
        return fused


def _blocks(module: ModuleOp) -> Iterator[Block]:
    """The blocks whose ops may group (not a group's own body)."""
    for op in module.walk():
        if not isinstance(op, tape.FusedOp):
            for region in op.regions:
                yield from region.blocks


def group_elementwise(module: ModuleOp) -> None:
    """Group `module`'s elementwise ops into tape.fused ops, in place (see the module doc)."""
    for block in list(_blocks(module)):
        ops = list(block.ops)
        order = {op: i for i, op in enumerate(ops)}
        positions = _Positions()
        splats: dict[Operation, Operation] = {}
        for root in reversed(ops):
            if not _groupable(root) or root.parent is None:  # (or taken in: erased)
                continue
            group = _Group(root, list(dict.fromkeys(_reads(root))), {root})
            group.grow(positions)
            if group.alone():
                continue
            fused = group.build(order, splats)
            block.insert_op_before(fused, root)
            root.results[0].replace_all_uses_with(fused.result)
            for op in sorted([*group.members, *group.through, *group.leaves],
                             key=order.__getitem__, reverse=True):
                if is_trivially_dead(op):
                    op.detach()
                    op.erase()
