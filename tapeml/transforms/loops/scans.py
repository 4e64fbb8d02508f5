"""The ops along one axis as loops: argmax/argmin and cumsum as one sequential pass along the
axis per position of the other axes (those in parallel), in index order, as numpy's; iota as a
fill of each element's index."""

from __future__ import annotations

import math

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, i1, i64
from xdsl.ir import Operation, SSAValue

from tapeml.dialects import tape
from tapeml.transforms.loops.elementwise import convert
from tapeml.transforms.loops.emitter import Emitter, shape_of, strides
from tapeml.transforms.loops.registry import Context, lowering


def _lines(e: Emitter, op: Operation, axis: int, body) -> None:
    """body(e, base, step): for each index of the axes but `axis` (in parallel), with `base` the
    flat offset of the line's first element and `step` the stride along `axis`."""
    shape = shape_of(op.operands[0]) if op.operands else shape_of(op.results[0])
    src = strides(shape)
    others = [i for i in range(len(shape)) if i != axis]

    def line(e: Emitter, ivs: list[SSAValue]) -> None:
        base = e.linear(ivs, [src[i] for i in others])
        body(e, ivs, base)

    e.loops([shape[i] for i in others], line, parallel=True)


def _takes(e: Emitter, op: Operation, v: SSAValue, best: SSAValue) -> SSAValue:
    """Whether v replaces best: strictly larger (smaller for argmin), or the first NaN."""
    t = v.type
    larger = isinstance(op, tape.ArgMaxOp)
    if t == i1:
        return e.insert(arith.CmpiOp(v, best, "ugt" if larger else "ult"))
    if isinstance(t, IntegerType):
        return e.insert(arith.CmpiOp(v, best, "sgt" if larger else "slt"))
    # unordered-or-greater: a NaN v takes the place, unless best is a NaN already
    beats = e.insert(arith.CmpfOp(v, best, "ugt" if larger else "ult"))
    return e.insert(arith.AndIOp(beats, e.insert(arith.CmpfOp(best, best, "ord"))))


@lowering(tape.ArgMaxOp, tape.ArgMinOp)
def lower_arg(e: Emitter, op: tape.ArgMaxOp | tape.ArgMinOp, ins: list[SSAValue],
              out: SSAValue, cx: Context) -> None:
    """out[line] = the first index along the axis whose element no later one beats."""
    axis = op.params["axis"]
    n = shape_of(op.input)[axis]
    step = strides(shape_of(op.input))[axis]
    x = ins[0]

    def body(e: Emitter, ivs: list[SSAValue], base: SSAValue) -> None:
        def fold(e: Emitter, k: list[SSAValue], best_at: SSAValue) -> SSAValue:
            best = e.load(x, e.insert(arith.AddiOp(base, e.insert(arith.MuliOp(
                best_at, e.index(step))))))
            v = e.load(x, e.insert(arith.AddiOp(base, e.insert(arith.MuliOp(
                k[0], e.index(step))))))
            return e.insert(arith.SelectOp(_takes(e, op, v, best), k[0], best_at))

        at = e.reduce([n], e.index(0), fold)
        e.store(e.insert(arith.IndexCastOp(at, i64)), out,
                e.linear(ivs, strides([d for i, d in enumerate(shape_of(op.input))
                                       if i != axis])))

    _lines(e, op, axis, body)


@lowering(tape.CumsumOp)
def lower_cumsum(e: Emitter, op: tape.CumsumOp, ins: list[SSAValue], out: SSAValue,
                 cx: Context) -> None:
    """acc += x[k] and out[k] = acc for k along the axis, from the end with `reverse`: the
    order numpy adds in, so floats agree bit for bit."""
    axis, reverse = op.params["axis"], op.params["reverse"]
    n = shape_of(op.input)[axis]
    step = strides(shape_of(op.input))[axis]
    t = op.result.type.get_element_type()
    add = arith.AddiOp if isinstance(t, IntegerType) else arith.AddfOp

    def body(e: Emitter, ivs: list[SSAValue], base: SSAValue) -> None:
        def fold(e: Emitter, k: list[SSAValue], acc: SSAValue) -> SSAValue:
            at = e.insert(arith.SubiOp(e.index(n - 1), k[0])) if reverse else k[0]
            index = e.insert(arith.AddiOp(base, e.insert(arith.MuliOp(at, e.index(step)))))
            total = e.insert(add(acc, e.load(ins[0], index)))
            e.store(total, out, index)
            return total

        # from the exact additive identity: -0.0 + x is x, so out[0] is x[0] (-0.0 too), as
        # numpy's accumulate copies it
        if n:
            e.reduce([n], e.scalar(0 if isinstance(t, IntegerType) else -0.0, t), fold)

    _lines(e, op, axis, body)


@lowering(tape.IotaOp)
def lower_iota(e: Emitter, op: tape.IotaOp, ins: list[SSAValue], out: SSAValue,
               cx: Context) -> None:
    shape = shape_of(op.result)
    axis = op.params["axis"]
    t = op.result.type.get_element_type()

    def body(e: Emitter, ivs: list[SSAValue]) -> None:
        value = convert(e, e.insert(arith.IndexCastOp(ivs[axis], i64)), i64, t)
        e.store(value, out, e.linear(ivs, strides(shape)))

    if math.prod(shape):
        e.loops(shape, body, parallel=True)
