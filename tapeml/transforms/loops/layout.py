"""Layout ops as copies over the result's indices (broadcast, permute, slice, pad, concat), and
reshape as no op at all: the same flat buffer."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.dialects import arith
from xdsl.ir import Operation, SSAValue

from tapeml.dialects import tape
from tapeml.transforms.loops.elementwise import broadcast_steps
from tapeml.transforms.loops.emitter import Emitter, LoweringError, shape_of, strides
from tapeml.transforms.loops.registry import Context, lowering


def lower_copy(e: Emitter, out_shape: Sequence[int], source: SSAValue, out: SSAValue,
               read: Callable[[Emitter, list[SSAValue]], SSAValue]) -> None:
    """out[i] = read(i) for every index i of `out_shape`."""
    def body(e: Emitter, ivs: list[SSAValue]) -> None:
        e.store(read(e, ivs), out, e.linear(ivs, strides(out_shape)))

    e.loops(out_shape, body, parallel=True)


@lowering(tape.BroadcastOp, tape.PermuteOp, tape.SliceOp, tape.PadOp, tape.ConcatOp)
def lower_layout(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue,
                 cx: Context) -> None:
    shape = shape_of(op.results[0])
    p = op.params
    if isinstance(op, tape.BroadcastOp):
        steps = broadcast_steps(shape_of(op.input), shape)
        lower_copy(e, shape, ins[0], out, lambda e, ivs: e.load(ins[0], e.linear(ivs, steps)))
    elif isinstance(op, tape.PermuteOp):
        src = strides(shape_of(op.input))
        steps = [src[axis] for axis in p["perm"]]
        lower_copy(e, shape, ins[0], out, lambda e, ivs: e.load(ins[0], e.linear(ivs, steps)))
    elif isinstance(op, tape.SliceOp):
        src = strides(shape_of(op.input))
        offset = sum(a * s for a, s in zip(p["start"], src, strict=True))
        steps = [st * s for st, s in zip(p["step"], src, strict=True)]
        lower_copy(e, shape, ins[0], out,
                   lambda e, ivs: e.load(ins[0], e.linear(ivs, steps, offset)))
    elif isinstance(op, tape.PadOp):
        lower_copy(e, shape, ins[0], out, lambda e, ivs: _padded_read(e, op, ins[0], ivs))
    elif isinstance(op, tape.ConcatOp):
        _lower_concat(e, op, ins, out)
    else:
        raise LoweringError(f"tape-to-loops: {op.name} is not a layout op")


def _padded_read(e: Emitter, op: tape.PadOp, source: SSAValue, ivs: list[SSAValue]) -> SSAValue:
    """source[ivs - low] where that is inside the source, else the pad value (the index is
    clamped in bounds first, so nothing is read outside the buffer)."""
    shape = shape_of(op.input)
    t = op.result.type.get_element_type()
    inside: SSAValue | None = None
    clamped = []
    for iv, low, d in zip(ivs, op.params["low"], shape, strict=True):
        src = e.insert(arith.SubiOp(iv, e.index(low))) if low else iv
        ok = e.in_range(src, d)
        inside = ok if inside is None else e.insert(arith.AndIOp(inside, ok))
        clamped.append(e.clamp(src, d))
    value = e.load(source, e.linear(clamped, strides(shape)))
    if inside is None:
        return value
    return e.insert(arith.SelectOp(inside, value, e.scalar(op.params["value"], t)))


def _lower_concat(e: Emitter, op: tape.ConcatOp, ins: list[SSAValue], out: SSAValue) -> None:
    axis = op.params["axis"]
    out_steps = strides(shape_of(op.result))
    offset = 0
    for value, buf in zip(op.inputs, ins, strict=True):
        shape = shape_of(value)
        here = offset * out_steps[axis]

        def body(e: Emitter, ivs: list[SSAValue], buf=buf, shape=shape, here=here) -> None:
            e.store(e.load(buf, e.linear(ivs, strides(shape))), out,
                    e.linear(ivs, out_steps, here))

        e.loops(shape, body, parallel=True)
        offset += shape[axis]


@lowering(tape.ReshapeOp, tape.StopGradientOp)
def alias(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue,
          cx: Context) -> SSAValue:
    """A reshape is free: its operand's flat buffer, read with other strides (tape-to-loops
    gives an op lowered by `alias` no buffer of its own); so is a stop_gradient a group did not
    take in (the identity: its operand's buffer as it is; in a group, SCALARS')."""
    return ins[0]
