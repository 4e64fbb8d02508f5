"""Elementwise ops and tape.fused groups as one loop over the result, each element computed as
numpy computes it (tapeml/interpreters/tape/): `SCALARS[type(op)]`, most of them one row of
`OPS` (the arith/math op that computes an element); constants as a fill or a memref.global.
A group's body mixes element types freely (each scalar op reads its operands' types), and its
`tape.index` is the loop's induction variable along its axis, converted as tape.iota's is."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from xdsl.dialects import arith, llvm, memref
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    IntegerType,
    MemRefType,
    StringAttr,
    TensorType,
    i1,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from tapeml.dialects import tape
from tapeml.dialects.registry import OpTable
from tapeml.dialects.tape import dense_to_numpy, is_splat, numpy_to_dense
from tapeml.transforms.loops.emitter import (
    Emitter,
    LoweringError,
    buffer_type,
    coalesce,
    shape_of,
    strides,
)
from tapeml.transforms.loops.registry import Context, lowering
from tapeml.transforms.transcendentals import Math

_CMP = {"lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge", "eq": "oeq", "ne": "une"}
_CMP_SIGNED = {"lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge", "eq": "eq", "ne": "ne"}
_CMP_UNSIGNED = {"lt": "ult", "le": "ule", "gt": "ugt", "ge": "uge", "eq": "eq", "ne": "ne"}

Scalar = Callable[[Emitter, Operation, Sequence[SSAValue]], SSAValue]
"""scalar(e, op, args): one element of op's result from one element of each operand."""

OPS: dict[type[Operation], type[Operation]] = {
    tape.AddOp: arith.AddfOp, tape.SubOp: arith.SubfOp, tape.MulOp: arith.MulfOp,
    tape.DivOp: arith.DivfOp, tape.MaximumOp: arith.MaximumfOp, tape.MinimumOp: arith.MinimumfOp,
    tape.PowOp: xmath.PowFOp, tape.NegOp: arith.NegfOp, tape.ExpOp: xmath.ExpOp,
    tape.LogOp: xmath.LogOp, tape.TanhOp: xmath.TanhOp, tape.SqrtOp: xmath.SqrtOp,
    tape.SinOp: xmath.SinOp, tape.CosOp: xmath.CosOp, tape.AbsOp: xmath.AbsFOp,
    tape.FloorOp: xmath.FloorOp, tape.CeilOp: xmath.CeilOp, tape.RoundOp: xmath.RoundEvenOp,
}
"""The elementwise tape ops that are one arith/math op on their (float) elements (which
to_llvm.py and gpu_to_nvvm.py lower)."""

INTEGER_OPS: dict[type[Operation], type[Operation]] = {
    tape.AddOp: arith.AddiOp, tape.SubOp: arith.SubiOp, tape.MulOp: arith.MuliOp,
    tape.MaximumOp: arith.MaxSIOp, tape.MinimumOp: arith.MinSIOp,
}
"""The same on i32/i64 elements: signed, wrapping on overflow (numpy's)."""
_INTEGER_IDENTITY = (tape.FloorOp, tape.CeilOp, tape.RoundOp)
"""Integers are their own floor, ceiling and rounding."""

APPROXIMATED: dict[type[Operation], Callable[[Math, SSAValue], SSAValue]] = {
    tape.ExpOp: Math.exp, tape.LogOp: Math.log, tape.TanhOp: Math.tanh,
    tape.SigmoidOp: Math.sigmoid, tape.ErfOp: Math.erf,
}
"""Ops computed as vectorizable arithmetic (transcendentals.py) unless tape-to-loops{libm}."""

SCALARS: OpTable[Scalar] = OpTable("scalar computation")
"""Every elementwise op's scalar computation, as numpy computes it (interpreters/tape/)."""
scalar = SCALARS.register


def scalar_op(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """The scalar computation of one elementwise tape op on one element of each operand."""
    kind = type(op)
    if not e.libm and kind in APPROXIMATED:
        return APPROXIMATED[kind](Math(e, op.results[0].type.get_element_type()), args[0])
    if kind not in SCALARS:
        raise LoweringError(f"tape-to-loops: {op.name} is not elementwise")
    return SCALARS[kind](e, op, args)


def _integer(t: Attribute) -> bool:
    return isinstance(t, IntegerType)


@scalar(*OPS)
def _one_op(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    if _integer(op.results[0].type.get_element_type()):
        if type(op) is tape.NegOp:  # 0 - x, wrapping: -INT_MIN is INT_MIN
            return e.insert(arith.SubiOp(e.scalar(0, args[0].type), args[0]))
        if type(op) is tape.AbsOp:  # x < 0 ? 0 - x : x, wrapping: abs(INT_MIN) is INT_MIN
            x = args[0]
            negative = e.insert(arith.CmpiOp(x, e.scalar(0, x.type), "slt"))
            return e.insert(arith.SelectOp(negative, e.insert(arith.SubiOp(
                e.scalar(0, x.type), x)), x))
        if type(op) in _INTEGER_IDENTITY:
            return args[0]
        return e.insert(INTEGER_OPS[type(op)](*args))
    return e.insert(OPS[type(op)](*args))


@scalar(tape.AndOp, tape.OrOp, tape.XorOp)
def _bitwise(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    kind = {tape.AndOp: arith.AndIOp, tape.OrOp: arith.OrIOp, tape.XorOp: arith.XOrIOp}
    return e.insert(kind[type(op)](*args))


@scalar(tape.StopGradientOp)
def _identity(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    return args[0]


@scalar(tape.NotOp)
def _not(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    return e.insert(arith.XOrIOp(args[0], e.scalar(-1, args[0].type)))  # all ones (i1: true)


@scalar(tape.FloorDivOp, tape.RemOp)
def _floordiv_rem(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """numpy's floor_divide and remainder: C's truncating division on a divisor that cannot
    trap (0 and -1 become 1), moved one toward -inf where the remainder's sign differs from
    the divisor's; x // 0 = x % 0 = 0, x // -1 = -x (wrapping), x % -1 = 0."""
    a, b = args
    t = a.type
    zero, one = e.scalar(0, t), e.scalar(1, t)
    by_zero = e.insert(arith.CmpiOp(b, zero, "eq"))
    by_minus_one = e.insert(arith.CmpiOp(b, e.scalar(-1, t), "eq"))
    special = e.insert(arith.OrIOp(by_zero, by_minus_one))
    safe = e.insert(arith.SelectOp(special, one, b))
    r = e.insert(arith.RemSIOp(a, safe))
    signs_differ = e.insert(arith.XOrIOp(e.insert(arith.CmpiOp(r, zero, "slt")),
                                         e.insert(arith.CmpiOp(safe, zero, "slt"))))
    adjust = e.insert(arith.AndIOp(e.insert(arith.CmpiOp(r, zero, "ne")), signs_differ))
    if isinstance(op, tape.RemOp):
        r = e.insert(arith.SelectOp(adjust, e.insert(arith.AddiOp(r, safe)), r))
        return e.insert(arith.SelectOp(special, zero, r))
    q = e.insert(arith.DivSIOp(a, safe))
    q = e.insert(arith.SelectOp(adjust, e.insert(arith.SubiOp(q, one)), q))
    q = e.insert(arith.SelectOp(by_minus_one, e.insert(arith.SubiOp(zero, a)), q))
    return e.insert(arith.SelectOp(by_zero, zero, q))


@scalar(tape.ShlOp, tape.ShrOp)
def _shift(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """numpy's shifts: an amount of the width or more, or negative (unsigned, that is, at
    least the width), gives 0 for <<, the sign for >> (a >> width-1).

    << shifts by the amount's low bits (s & width-1, equal to s where it fits), not by
    select(fits, s, 0): LLVM's NVPTX backend folds select(s <u 64, x << s, 0) into a bare
    shl.b64, whose amount PTX reads as 32 bits, so an i64 amount of 2^32 + 1 shifted by 1 on a
    real GPU (found by scripts/gpu-check; the emulated GPU and the CPU gave 0)."""
    a, s = args
    width = e.scalar(a.type.bitwidth, a.type)
    fits = e.insert(arith.CmpiOp(s, width, "ult"))
    if isinstance(op, tape.ShlOp):
        low_bits = e.insert(arith.AndIOp(s, e.scalar(a.type.bitwidth - 1, a.type)))
        shifted = e.insert(arith.ShLIOp(a, low_bits))
        return e.insert(arith.SelectOp(fits, shifted, e.scalar(0, a.type)))
    amount = e.insert(arith.SelectOp(fits, s, e.scalar(a.type.bitwidth - 1, a.type)))
    return e.insert(arith.ShRSIOp(a, amount))


@scalar(tape.SignOp)
def _sign(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """numpy's sign: x > 0 ? 1 : x < 0 ? -1 : x == 0 ? 0 : x (+0.0 for both zeros, a NaN
    itself)."""
    x = args[0]
    t = x.type
    if _integer(t):
        rest = e.insert(arith.SelectOp(e.insert(arith.CmpiOp(x, e.scalar(0, t), "slt")),
                                       e.scalar(-1, t), e.scalar(0, t)))
        return e.insert(arith.SelectOp(e.insert(arith.CmpiOp(x, e.scalar(0, t), "sgt")),
                                       e.scalar(1, t), rest))
    zero = e.scalar(0.0, t)
    rest = e.insert(arith.SelectOp(e.insert(arith.CmpfOp(x, zero, "oeq")), zero, x))
    rest = e.insert(arith.SelectOp(e.insert(arith.CmpfOp(x, zero, "olt")), e.scalar(-1.0, t),
                                   rest))
    return e.insert(arith.SelectOp(e.insert(arith.CmpfOp(x, zero, "ogt")), e.scalar(1.0, t),
                                   rest))


@scalar(tape.ErfOp)
def _erf(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """math.erf: libm's erf/erff on the CPU, libdevice's on the GPU (LLVM has no intrinsic);
    tape-to-loops computes f32 erf as arithmetic instead unless asked for libm
    (APPROXIMATED)."""
    return e.insert(xmath.ErfOp(args[0]))


@scalar(tape.FmodOp)
def _fmod(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """C's fmod as LLVM's frem (xDSL 0.75 has no arith.remf nor math's equivalent; LangRef: frem
    is fmod): to_llvm.py keeps it, and x86's backend makes it a call of libm's fmod/fmodf
    (which the JIT resolves in the process); gpu_to_nvvm.py calls libdevice's __nv_fmod[f]."""
    return e.insert(llvm.FRemOp(*args))


@scalar(tape.SigmoidOp)
def _sigmoid(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """1 / (1 + exp(-x))"""
    t = op.results[0].type.get_element_type()
    one = e.scalar(1.0, t)
    denominator = e.insert(arith.AddfOp(one, e.insert(xmath.ExpOp(e.insert(
        arith.NegfOp(args[0]))))))
    return e.insert(arith.DivfOp(one, denominator))


@scalar(tape.ReluOp)
def _relu(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """maximum(x, 0), NaN propagating"""
    t = op.results[0].type.get_element_type()
    pick = arith.MaxSIOp if _integer(t) else arith.MaximumfOp
    return e.insert(pick(args[0], e.scalar(0, t)))


@scalar(tape.CmpOp)
def _cmp(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    t = op.operands[0].type.get_element_type()
    predicate = op.params["predicate"]
    if t == i1:  # false < true: unsigned
        return e.insert(arith.CmpiOp(args[0], args[1], _CMP_UNSIGNED[predicate]))
    if _integer(t):
        return e.insert(arith.CmpiOp(args[0], args[1], _CMP_SIGNED[predicate]))
    return e.insert(arith.CmpfOp(args[0], args[1], _CMP[predicate]))


@scalar(tape.SelectOp)
def _select(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    return e.insert(arith.SelectOp(*args))


@scalar(tape.CastOp)
def _cast(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """numpy's astype (interpreters/tape/elementwise.py: `cast`), floats to integers
    saturating with NaN to 0."""
    return convert(e, args[0], op.operands[0].type.get_element_type(),
                   op.results[0].type.get_element_type())


def convert(e: Emitter, x: SSAValue, source: Attribute, t: Attribute) -> SSAValue:
    if source == t:
        return x
    if t == i1:  # x != 0 (NaN is true)
        if _integer(source):
            return e.insert(arith.CmpiOp(x, e.scalar(0, source), "ne"))
        return e.insert(arith.CmpfOp(x, e.scalar(0.0, source), "une"))
    if source == i1:  # 0 or 1
        if _integer(t):
            return e.insert(arith.ExtUIOp(x, t))
        return e.insert(arith.SelectOp(x, e.scalar(1.0, t), e.scalar(0.0, t)))
    if _integer(source) and _integer(t):
        wider = source.bitwidth < t.bitwidth
        return e.insert((arith.ExtSIOp if wider else arith.TruncIOp)(x, t))
    if _integer(source):
        return e.insert(arith.SIToFPOp(x, t))
    if _integer(t):
        return _saturating_to_int(e, x, source, t)
    wider = source.bitwidth < t.bitwidth
    return e.insert((arith.ExtFOp if wider else arith.TruncFOp)(x, t))


def _saturating_to_int(e: Emitter, x: SSAValue, source: Attribute, t: Attribute) -> SSAValue:
    """Truncation toward zero, clamped to t's range, NaN to 0. Only values strictly inside the
    range reach fptosi (undefined outside it); at or past an end (the largest integer rounds up
    to a power of two in f32) the end."""
    info = np.iinfo(np.int32 if t.bitwidth == 32 else np.int64)
    low, high = e.scalar(float(info.min), source), e.scalar(float(info.max), source)
    inside = e.insert(arith.AndIOp(e.insert(arith.CmpfOp(x, low, "ogt")),
                                   e.insert(arith.CmpfOp(x, high, "olt"))))  # NaN: false
    value = e.insert(arith.FPToSIOp(e.insert(arith.SelectOp(inside, x, e.scalar(0.0, source))),
                                    t))
    value = e.insert(arith.SelectOp(e.insert(arith.CmpfOp(x, high, "oge")),
                                    e.scalar(int(info.max), t), value))
    return e.insert(arith.SelectOp(e.insert(arith.CmpfOp(x, low, "ole")),
                                   e.scalar(int(info.min), t), value))


@scalar(tape.ConstantOp)
def _constant(e: Emitter, op: Operation, args: Sequence[SSAValue]) -> SSAValue:
    """A splat inside a tape.fused group."""
    return e.scalar(op.params["value"].reshape(-1)[0].item(), op.results[0].type
                    .get_element_type())


def broadcast_steps(source: Sequence[int], target: Sequence[int], ones: bool = False
                    ) -> list[int]:
    """Strides reading a row-major `source` broadcast (numpy rules) to `target`; `ones`: a
    dim of one element that the target's is too is read with its own stride, not 0 (either
    reads its one element; under any_batch a batch of 1 then reads as a larger batch does)."""
    lead = len(target) - len(source)
    src = strides(source)
    return [0 if i < lead or (source[i - lead] == 1 and (target[i] != 1 or not ones))
            else src[i - lead] for i in range(len(target))]


LOOPED = tuple(op for op in tape.ELEMENTWISE if op not in (tape.ConstantOp, tape.StopGradientOp))
"""The elementwise ops lowered as loops over their elements: not a constant (a global, or a
splat in a group), nor a stop_gradient (its operand's buffer: layout.alias)."""


@lowering(*LOOPED, tape.FusedOp)
def lower_elementwise(e: Emitter, op: Operation, ins: list[SSAValue], out: SSAValue,
                      cx: Context) -> None:
    """One parallel loop nest over the result, its dims merged where every operand reads on
    contiguously (`coalesce`: an elementwise chain over same-shaped tensors is one loop)."""
    full = shape_of(op.results[0])
    positions = sorted({inner.params["axis"] for inner in op.body.block.ops
                        if isinstance(inner, tape.IndexOp)}) if isinstance(op, tape.FusedOp) \
        else []
    shape, (*steps, out_steps), axes = coalesce(
        full, [*(broadcast_steps(shape_of(v), full, cx.any_batch) for v in op.operands),
               strides(full)], positions, ones=cx.any_batch)

    def body(e: Emitter, ivs: list[SSAValue]) -> None:
        elements = [e.load(buf, e.linear(ivs, s)) for buf, s in zip(ins, steps, strict=True)]
        if isinstance(op, tape.FusedOp):
            value = _fused_body(e, op.body.block, elements, {a: ivs[n] for a, n in axes.items()})
        else:
            value = scalar_op(e, op, elements)
        e.store(value, out, e.linear(ivs, out_steps))

    e.loops(shape, body, parallel=True)


def _fused_body(e: Emitter, block: Block, elements: list[SSAValue],
                ivs: dict[int, SSAValue]) -> SSAValue:
    """The group's body on one element; `ivs`: the loop's position along each dim its
    tape.index ops read."""
    env: dict[SSAValue, SSAValue] = dict(zip(block.args, elements, strict=True))
    for inner in block.ops:
        if isinstance(inner, tape.YieldOp):
            return env[inner.value]
        if isinstance(inner, tape.IndexOp):
            env[inner.result] = position(e, ivs[inner.params["axis"]],
                                         inner.result.type.get_element_type())
            continue
        env[inner.results[0]] = scalar_op(e, inner, [env[o] for o in inner.operands])
    raise AssertionError("a tape.fused body ends in tape.yield")


def position(e: Emitter, iv: SSAValue, t: Attribute) -> SSAValue:
    """An induction variable as an element of type `t` (tape.iota's and tape.index's value)."""
    return convert(e, e.insert(arith.IndexCastOp(iv, i64)), i64, t)


@lowering(tape.ConstantOp)
def lower_constant(e: Emitter, op: tape.ConstantOp, ins: list[SSAValue], out: SSAValue,
                   cx: Context) -> SSAValue | None:
    """A splat fills `out`; any other constant becomes a memref.global read in place."""
    t = op.result.type.get_element_type()
    size = math.prod(op.result.type.get_shape())
    if size == 0:
        return None  # nothing to hold
    if is_splat(op.value):
        element = e.scalar(dense_to_numpy(op.value).reshape(-1)[0].item(), t)
        e.loops([size], lambda e, ivs: e.store(element, out, ivs[0]), parallel=True)
        return None
    value = op.params["value"]
    name = cx.constant_name()
    kind = buffer_type(op.result.type)
    cx.module.body.block.add_op(memref.GlobalOp.get(StringAttr(name), kind,
                                                 numpy_to_dense_flat(value, kind)))
    return e.insert(memref.GetGlobalOp(name, kind))


def numpy_to_dense_flat(value: np.ndarray, kind: MemRefType) -> DenseIntOrFPElementsAttr:
    attr = numpy_to_dense(np.ascontiguousarray(value).reshape(-1))
    return DenseIntOrFPElementsAttr(TensorType(kind.element_type, kind.get_shape()), attr.data)
