"""tape-fuse's elementwise groups: every elementwise op becomes a tape.fused of one op
(`WrapElementwise`); a fused op then swallows the fused ops whose only user it is, the
broadcasts feeding it (it broadcasts its inputs itself), its splat constants and the iotas
feeding it (as `tape.index`: the loop's position, no buffer) (`GrowGroup`); a group nothing
joined is that op again (`UnwrapSingle`). Reductions, layout ops and contractions end a group.

The element types in a group are whatever its ops' are: a compare feeding a select, a cast in
a float chain, integer index arithmetic all fuse as float chains do. Constants and iotas are
taken in even where they have other users (they cost no reads), and so is a group of positions
(reading iotas only: a causal mask read by the forward and the backward select); any other group
is taken in only by its one user (it is not recomputed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter

from tapeml.dialects import tape
from tapeml.transforms.fuse.matching import FusionPattern


def _element(t: Any) -> TensorType:
    return tape.tensor_type((), t.get_element_type())


def _splat(value: np.ndarray) -> bool:
    """Every element the same bits (-0.0 is not 0.0; NaN is NaN)."""
    flat = np.ascontiguousarray(value).reshape(-1)
    if flat.size == 0:
        return False
    bits = flat.view(np.uint8).reshape(flat.size, -1)
    return bool((bits == bits[0]).all())  # one pass: a sort (np.unique) took seconds on big ones


def _positions_kept(source_shape: Sequence[int], shape: Sequence[int],
                    axes: Sequence[int]) -> bool:
    """Positions along `axes` of `source_shape` are the same read in `shape` it broadcasts to
    (a dim of 1 broadcast wider would count where it stood still)."""
    lead = len(shape) - len(source_shape)
    return all(source_shape[a] == shape[lead + a] for a in axes)


def _positions_only(group: tape.FusedOp) -> bool:
    """The group reads no buffer but iotas (a mask of positions): each user may recompute it."""
    return all(isinstance(v.owner, tape.IotaOp) for v in group.inputs)


def _index_axes(group: tape.FusedOp) -> list[int]:
    return [op.params["axis"] for op in group.body.block.ops if isinstance(op, tape.IndexOp)]


def _fused_body(inputs: Sequence[SSAValue]) -> tuple[Block, list[SSAValue]]:
    block = Block(arg_types=[_element(v.type) for v in inputs])
    return block, list(block.args)


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


class WrapElementwise(FusionPattern):
    """An elementwise op outside a group becomes a group of one (unwrapped again at the end if
    nothing joined it)."""

    name = "elementwise-group"

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, tape.ELEMENTWISE) or isinstance(op, tape.ConstantOp) or \
                isinstance(op.parent_op(), tape.FusedOp):
            return
        inputs = list(dict.fromkeys(op.operands))  # a value repeated (x * x) read once
        body, args = _fused_body(inputs)
        by_value = dict(zip(inputs, args, strict=True))
        inner = type(op).build(*(by_value[v] for v in op.operands), **op.params)
        body.add_ops([inner, tape.YieldOp(inner.results[0])])
        fused = tape.FusedOp.build(*inputs, body=body)
        fused.location = op.location
        rewriter.replace(op, fused)


class GrowGroup(FusionPattern):
    """A group takes in what feeds it: groups used by it alone, broadcasts, splat constants,
    iotas (whose positions it computes itself); and reads a value repeated among its inputs
    once."""

    name = "elementwise-merge"

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, tape.FusedOp):
            return
        inputs = list(op.inputs)
        shape = op.result.type.get_shape()

        def keeps_shape(replace: SSAValue, by: Sequence[SSAValue]) -> bool:
            """The group still spans its result shape with `replace`'s place taken by `by`."""
            rest = [v.type.get_shape() for v in inputs if v is not replace]
            rest += [v.type.get_shape() for v in by]
            return bool(rest) and np.broadcast_shapes(*rest) == shape

        for value in dict.fromkeys(inputs):
            source = value.owner
            only_here = all(use.operation is op for use in value.uses)
            if isinstance(source, tape.FusedOp) and (only_here or _positions_only(source)) and \
                    keeps_shape(value, source.inputs) and \
                    _positions_kept(value.type.get_shape(), shape, _index_axes(source)):
                return self._merge(op, value, source, rewriter)
            if isinstance(source, tape.BroadcastOp) and keeps_shape(value, [source.input]):
                return self._rewire(op, {value: source.input}, rewriter)
            if isinstance(source, tape.ConstantOp) and keeps_shape(value, []) and \
                    _splat(source.params["value"]):
                return self._merge(op, value, None, rewriter)
            if isinstance(source, tape.IotaOp) and keeps_shape(value, []) and \
                    _positions_kept(value.type.get_shape(), shape, [source.params["axis"]]):
                return self._merge(op, value, None, rewriter)
        if len(set(inputs)) < len(inputs):
            return self._rewire(op, {}, rewriter)

    def _rewire(self, op: tape.FusedOp, replace: dict[SSAValue, SSAValue],
                rewriter: PatternRewriter) -> None:
        """The same group over new inputs (each repeated input once)."""
        new_inputs = list(dict.fromkeys(replace.get(v, v) for v in op.inputs))
        body, args = _fused_body(new_inputs)
        by_value = dict(zip(new_inputs, args, strict=True))
        out = _clone_body(op.body.block, [by_value[replace.get(v, v)] for v in op.inputs], body)
        body.add_op(tape.YieldOp(out))
        self.replace(rewriter, op, tape.FusedOp.build(*new_inputs, body=body))

    def _merge(self, op: tape.FusedOp, value: SSAValue, source: tape.FusedOp | None,
               rewriter: PatternRewriter) -> None:
        """`op` computing `value` itself, from `source`'s inputs (or as a constant, or as its
        position along the iota's axis)."""
        extra = list(source.inputs) if source else []
        new_inputs = list(dict.fromkeys([v for v in op.inputs if v is not value] + extra))
        body, args = _fused_body(new_inputs)
        by_value = dict(zip(new_inputs, args, strict=True))
        lead = len(op.result.type.get_shape()) - len(value.type.get_shape())
        if source is not None:
            inner = _clone_body(source.body.block, [by_value[v] for v in source.inputs], body,
                                lead)
        elif isinstance(value.owner, tape.IotaOp):
            p = value.owner.params
            index = tape.IndexOp.build(axis=p["axis"] + lead, dtype=p["dtype"])
            body.add_op(index)
            inner = index.result
        else:
            element = value.owner.params["value"].reshape(-1)[:1].reshape(())
            constant = tape.ConstantOp.build(value=element)
            body.add_op(constant)
            inner = constant.result
        by_value[value] = inner
        out = _clone_body(op.body.block, [by_value[v] for v in op.inputs], body)
        body.add_op(tape.YieldOp(out))
        self.replace(rewriter, op, tape.FusedOp.build(*new_inputs, body=body))


class UnwrapSingle(FusionPattern):
    """A group of one op over inputs of its own shape is just that op."""

    name = "elementwise-single"

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, tape.FusedOp):
            return
        body_ops = list(op.body.block.ops)
        if len(body_ops) != 2 or isinstance(body_ops[0], (tape.ConstantOp, tape.IndexOp)):
            return
        inner = body_ops[0]
        shape = op.result.type.get_shape()
        if any(v.type.get_shape() != shape for v in op.inputs):
            return
        by_arg = dict(zip(op.body.block.args, op.inputs, strict=True))
        plain = type(inner).build(*(by_arg[v] for v in inner.operands), **inner.params)
        plain.location = op.location
        rewriter.replace(op, plain)
