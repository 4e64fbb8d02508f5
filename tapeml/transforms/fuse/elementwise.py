"""tape-fuse's elementwise groups: every elementwise op becomes a tape.fused of one op
(`WrapElementwise`); a fused op then swallows the fused ops whose only user it is, the
broadcasts feeding it (it broadcasts its inputs itself) and its splat constants (`GrowGroup`);
a group nothing joined is that op again (`UnwrapSingle`). Reductions, layout ops and
contractions end a group.
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
    return TensorType(t.get_element_type(), [])


def _fused_body(inputs: Sequence[SSAValue]) -> tuple[Block, list[SSAValue]]:
    block = Block(arg_types=[_element(v.type) for v in inputs])
    return block, list(block.args)


def _clone_body(source: Block, args: Sequence[SSAValue], into: Block) -> SSAValue:
    """Copy `source`'s ops into `into`, its arguments read as `args`; the value it yields."""
    mapping: dict[SSAValue, SSAValue] = dict(zip(source.args, args, strict=True))
    for op in source.ops:
        if isinstance(op, tape.YieldOp):
            return mapping[op.value]
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
        body, args = _fused_body(op.operands)
        inner = type(op).build(*args, **op.params)
        body.add_ops([inner, tape.YieldOp(inner.results[0])])
        fused = tape.FusedOp.build(*op.operands, body=body)
        fused.location = op.location
        rewriter.replace(op, fused)


class GrowGroup(FusionPattern):
    """A group takes in what feeds it: groups used by it alone, broadcasts, splat constants;
    and reads a value repeated among its inputs once."""

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
            if isinstance(source, tape.FusedOp) and only_here and \
                    keeps_shape(value, source.inputs):
                return self._merge(op, value, source, rewriter)
            if isinstance(source, tape.BroadcastOp) and keeps_shape(value, [source.input]):
                return self._rewire(op, {value: source.input}, rewriter)
            if isinstance(source, tape.ConstantOp) and keeps_shape(value, []) and \
                    np.unique(source.params["value"]).size == 1:
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
        """`op` computing `value` itself, from `source`'s inputs (or as a constant)."""
        extra = list(source.inputs) if source else []
        new_inputs = list(dict.fromkeys([v for v in op.inputs if v is not value] + extra))
        body, args = _fused_body(new_inputs)
        by_value = dict(zip(new_inputs, args, strict=True))
        if source is not None:
            inner = _clone_body(source.body.block, [by_value[v] for v in source.inputs], body)
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
        if len(body_ops) != 2 or isinstance(body_ops[0], tape.ConstantOp):
            return
        inner = body_ops[0]
        shape = op.result.type.get_shape()
        if any(v.type.get_shape() != shape for v in op.inputs):
            return
        by_arg = dict(zip(op.body.block.args, op.inputs, strict=True))
        plain = type(inner).build(*(by_arg[v] for v in inner.operands), **inner.params)
        plain.location = op.location
        rewriter.replace(op, plain)
