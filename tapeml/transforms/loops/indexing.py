"""take as a copy over the result's indices, each read at its index's clamped position; scatter
as a copy of x, then, in parallel over the dims other than the axis, a sequential loop over the
index positions in row-major order applying each update in range.

Every update one iteration of the parallel loop applies lands in its own column
out[b..., :, a...] (b, a: the dims before and after the axis), which no other iteration reads
or writes: the loop's iterations (a GPU kernel's threads) never touch one element, and within
a column the updates apply one after another, so a later set wins and adds accumulate in the
order the interpreter adds them, bit for bit. An index is normalized (i + n for a negative one)
and clamped into [0, n-1] before it addresses a buffer; a scatter's out-of-range update writes
the element's old value back, so nothing is read or written outside a buffer."""

from __future__ import annotations

import math

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, i64
from xdsl.ir import Attribute, SSAValue

from tapeml.dialects import tape
from tapeml.transforms.loops.emitter import INDEX, Emitter, shape_of, strides
from tapeml.transforms.loops.layout import lower_copy
from tapeml.transforms.loops.registry import Context, lowering


def _as_index(e: Emitter, value: SSAValue) -> SSAValue:
    """An i32 or i64 index as an `index` (sign-extended: the LLVM lowering takes index_cast
    from i64 only)."""
    if value.type != i64:
        value = e.insert(arith.ExtSIOp(value, i64))
    return e.insert(arith.IndexCastOp(value, INDEX))


def _normalized(e: Emitter, i: SSAValue, n: int) -> SSAValue:
    """i + n where i < 0, else i (no overflow: n is added to negative values only)."""
    negative = e.insert(arith.CmpiOp(i, e.index(0), "slt"))
    return e.insert(arith.SelectOp(negative, e.insert(arith.AddiOp(i, e.index(n))), i))


@lowering(tape.TakeOp)
def lower_take(e: Emitter, op: tape.TakeOp, ins: list[SSAValue], out: SSAValue,
               cx: Context) -> None:
    axis = op.params["axis"]
    x_shape, at_shape = shape_of(op.x), shape_of(op.indices)
    n, rank = x_shape[axis], len(at_shape)
    source, at_steps = strides(x_shape), strides(at_shape)

    def read(e: Emitter, ivs: list[SSAValue]) -> SSAValue:
        before, at, after = ivs[:axis], ivs[axis:axis + rank], ivs[axis + rank:]
        i = _as_index(e, e.load(ins[1], e.linear(at, at_steps)))
        position = e.clamp(_normalized(e, i, n), n)
        return e.load(ins[0], e.linear([*before, position, *after], source))

    lower_copy(e, shape_of(op.result), ins[0], out, read)


def _combine(e: Emitter, kind: str, t: Attribute, old: SSAValue, new: SSAValue) -> SSAValue:
    if kind == "set":
        return new
    integer = isinstance(t, IntegerType)
    ops = {"add": (arith.AddiOp, arith.AddfOp), "max": (arith.MaxSIOp, arith.MaximumfOp),
           "min": (arith.MinSIOp, arith.MinimumfOp)}[kind]
    return e.insert(ops[0 if integer else 1](old, new))


@lowering(tape.ScatterOp)
def lower_scatter(e: Emitter, op: tape.ScatterOp, ins: list[SSAValue], out: SSAValue,
                  cx: Context) -> None:
    x, indices, updates = ins
    axis, kind = op.params["axis"], op.params["kind"]
    shape = shape_of(op.x)
    n, count = shape[axis], math.prod(shape_of(op.indices))
    before, after = list(shape[:axis]), list(shape[axis + 1:])
    t = op.result.type.get_element_type()
    e.loops([math.prod(shape)], lambda e, ivs: e.store(e.load(x, ivs[0]), out, ivs[0]),
            parallel=True)
    if n == 0 or count == 0 or math.prod(before + after) == 0:
        return  # no update applies (an empty axis drops them all)
    out_steps = strides(shape)
    update_steps = strides([*before, count, *after])

    def column(e: Emitter, ivs: list[SSAValue]) -> None:
        b, a = ivs[:axis], ivs[axis:]

        def apply(e: Emitter, p: list[SSAValue]) -> None:
            i = _as_index(e, e.load(indices, p[0]))
            inside = e.insert(arith.AndIOp(
                e.insert(arith.CmpiOp(i, e.index(-n), "sge")),
                e.insert(arith.CmpiOp(i, e.index(n), "slt"))))
            at = e.linear([*b, e.clamp(_normalized(e, i, n), n), *a], out_steps)
            old = e.load(out, at)
            new = _combine(e, kind, t, old, e.load(updates, e.linear([*b, p[0], *a],
                                                                    update_steps)))
            e.store(e.insert(arith.SelectOp(inside, new, old)), out, at)

        e.loops([count], apply)  # in order: a later set wins, adds accumulate in order

    e.loops([*before, *after], column, parallel=True)
