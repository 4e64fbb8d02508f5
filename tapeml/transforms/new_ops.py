"""Ops made fast, for the lowerings that make thousands (convert-scf-to-cf,
convert-loops-to-llvm): xDSL's constructors check their arguments and build the same
properties and attributes for every op, which was half of those passes' time; `new_op` reads
them off one op per kind (and whatever else they depend on) and makes the rest with `create`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from xdsl.dialects import func, scf
from xdsl.dialects.builtin import IndexType, IntegerType, SymbolRefAttr, f32, i64
from xdsl.dialects.llvm import LLVMPointerType
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

PLACEHOLDER = Block(arg_types=[i64, f32, LLVMPointerType(), IntegerType(1), IndexType()])
"""Operands for the one op `build` makes: an i64, an f32, a pointer, an i1, an index."""
_MADE: dict[Hashable, tuple[dict[str, Attribute], dict[str, Attribute]]] = {}


def new_op(kind: type[Operation], operands: Sequence[SSAValue],
           result_types: Sequence[Attribute], key: Hashable,
           build: Callable[[Block], Operation], successors: Sequence[Block] = (),
           regions: Sequence[Region] = ()) -> Operation:
    """An op of `kind` with `operands`, `result_types`, `successors` and `regions`, and the
    properties and attributes that `build(PLACEHOLDER)` (xDSL's constructor over the
    placeholder's arguments and blocks) gives the op it makes: read once per process per kind
    and `key`, which names everything else they depend on (a predicate, a callee, an operand
    count where the op records its operand segments, or None)."""
    made = _MADE.get((kind, key))
    if made is None:
        op = build(PLACEHOLDER)
        op.drop_all_references()
        made = _MADE[kind, key] = (dict(op.properties), dict(op.attributes))
    return kind.create(operands=operands, result_types=result_types, properties=made[0],
                       attributes=made[1], successors=successors, regions=regions)


def call(callee: str, arguments: Sequence[SSAValue]) -> func.CallOp:
    """func.CallOp(callee, arguments, []), made with `create` (what the constructor gives: the
    callee as a property)."""
    return func.CallOp.create(operands=arguments, properties={"callee": SymbolRefAttr(callee)})


def for_op(lower: SSAValue, upper: SSAValue, step: SSAValue, inits: Sequence[SSAValue],
           body: Block) -> scf.ForOp:
    """scf.ForOp(lower, upper, step, inits, body), made fast (no properties, one variadic)."""
    return new_op(scf.ForOp, [lower, upper, step, *inits], [v.type for v in inits], None,
                  lambda p: scf.ForOp(p.args[4], p.args[4], p.args[4], [],
                                      Block(arg_types=[IndexType()])), regions=[Region(body)])


def yield_op(*values: SSAValue) -> scf.YieldOp:
    """scf.YieldOp(*values), made fast."""
    return new_op(scf.YieldOp, values, [], None, lambda p: scf.YieldOp())


def parallel_op(lower: Sequence[SSAValue], upper: Sequence[SSAValue],
                step: Sequence[SSAValue], body: Block) -> scf.ParallelOp:
    """scf.ParallelOp(lower, upper, step, Region(body)) without reductions, made fast (its
    operand segments read off one made per rank)."""
    rank = len(lower)
    return new_op(scf.ParallelOp, [*lower, *upper, *step], [], ("parallel", rank),
                  lambda p: scf.ParallelOp([p.args[4]] * rank, [p.args[4]] * rank,
                                           [p.args[4]] * rank,
                                           Region(Block(arg_types=[IndexType()] * rank))),
                  regions=[Region(body)])


def reduce_op() -> scf.ReduceOp:
    """scf.ReduceOp() (an scf.parallel's terminator, no reductions), made fast."""
    return new_op(scf.ReduceOp, [], [], None, lambda p: scf.ReduceOp())
