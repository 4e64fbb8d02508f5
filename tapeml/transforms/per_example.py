"""Does a tape function keep the examples of a batch apart? `split(module, pieces)` finds a
batch size N for which every op computes each example's part of its result (index i along
axis 0) from that example's parts of its operands alone, and writes the function again for a
batch of N / pieces: run on consecutive slices of the batched inputs, the pieces give the
slices of every result, the same values as the whole (an inference step: a CNN, an MLP). A
training step's loss mixes the examples (a mean over the batch), and is not split.

A value is *batched* when its axis 0 holds the examples in order, the same number of rows
each (its rows / N: one, or more where a reshape made one row per position, as a traced
convolution's `(N, H, W, C*kh*kw) -> (N*H*W, C*kh*kw)`); the function's inputs of N rows are,
every other value is derived: `PER_EXAMPLE[type(op)](op, batched, n)` says whether an op's
result is, given which operands are, or raises `Mixes` where its result at example i
reads another example's part (a sum over axis 0, a matmul contracting it, a reshape or a
permute that moves it, a slice of some examples) or where an operand that is not batched has N
rows of its own to pair with the batch (that would not be split with it). Every tape op has a
row (tests/test_op_registries.py). The rewritten function is checked by the verifier: every
op's result type inferred again from its operands' new types.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType
from xdsl.ir import SSAValue
from xdsl.rewriter import Rewriter
from xdsl.utils.exceptions import VerifyException

from tapeml.dialects import tape
from tapeml.dialects.base import IntList, TapeOp
from tapeml.dialects.registry import OpTable


class Mixes(Exception):
    """The op's result at one example reads another example's part: no split."""


Rule = Callable[[TapeOp, Sequence[bool], int], bool]
PER_EXAMPLE: OpTable[Rule] = OpTable("batch rule")
rule = PER_EXAMPLE.register


def _shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(value.type.get_shape())


def _broadcasting(op: TapeOp, batched: Sequence[bool], n: int) -> bool:
    """Operands broadcast (numpy's rules) to the result: a batched operand must be axis 0 of
    the result (its rank, its rows), one that is not must not reach it (a lower rank, or one
    row)."""
    result = _shape(op.results[0])
    rank = len(result)
    for value, is_batched in zip(op.operands, batched, strict=True):
        shape = _shape(value)
        if is_batched and (len(shape) != rank or shape[0] != result[0]):
            raise Mixes
        if not is_batched and any(batched) and len(shape) == rank and rank and shape[0] != 1:
            raise Mixes
    return any(batched)


rule(*tape.ELEMENTWISE_BINARY, *tape.ELEMENTWISE_UNARY, *tape.NUMERIC_UNARY,
     *tape.NUMERIC_BINARY, *tape.INTEGER_BINARY, *tape.INTEGER_UNARY, *tape.IDENTITY_UNARY,
     tape.CmpOp, tape.SelectOp, tape.CastOp)(_broadcasting)


@rule(tape.FusedOp)
def _fused(op: tape.FusedOp, batched: Sequence[bool], n: int) -> bool:
    """Elementwise in its body, unless the body reads the element's position (tape.index)."""
    if any(isinstance(inner, tape.IndexOp) for inner in op.body.walk()) and any(batched):
        raise Mixes
    return _broadcasting(op, batched, n)


@rule(tape.ConstantOp, tape.IotaOp, tape.IndexOp, tape.YieldOp)
def _no_operands(op: TapeOp, batched: Sequence[bool], n: int) -> bool:
    """Made from nothing: the same for every example (tape.index and tape.yield live only in
    a fused op's body, which `_fused` reads)."""
    return False


@rule(tape.BroadcastOp)
def _broadcast(op: tape.BroadcastOp, batched: Sequence[bool], n: int) -> bool:
    """A batched operand keeps axis 0 where it is; one that is not, broadcast to N rows, is the
    same row for every example: batched too (each piece takes its own N / pieces)."""
    source, result = _shape(op.input), _shape(op.result)
    if batched[0]:
        if len(source) != len(result) or source[0] != result[0]:
            raise Mixes
        return True
    return bool(result) and result[0] % n == 0 and (len(source) < len(result) or source[0] == 1)


@rule(tape.ReshapeOp)
def _reshape(op: tape.ReshapeOp, batched: Sequence[bool], n: int) -> bool:
    """Row-major: each example's elements are one contiguous run, so the result's rows are
    batched where there is a whole number of them per example."""
    if not batched[0]:
        return False
    result = _shape(op.result)
    if not result or result[0] % n:
        raise Mixes
    return True


@rule(tape.PermuteOp)
def _permute(op: tape.PermuteOp, batched: Sequence[bool], n: int) -> bool:
    if batched[0] and op.params["perm"][0] != 0:
        raise Mixes
    return batched[0]


@rule(tape.PadOp)
def _pad(op: tape.PadOp, batched: Sequence[bool], n: int) -> bool:
    if batched[0] and (op.params["low"][0], op.params["high"][0]) != (0, 0):
        raise Mixes
    return batched[0]


@rule(tape.SliceOp)
def _slice(op: tape.SliceOp, batched: Sequence[bool], n: int) -> bool:
    """Every row, in order (`rebatch` then stops it at the piece's)."""
    p = op.params
    if batched[0] and (p["start"][0], p["stop"][0], p["step"][0]) != (
            0, _shape(op.input)[0], 1):
        raise Mixes
    return batched[0]


@rule(tape.ConcatOp)
def _concat(op: tape.ConcatOp, batched: Sequence[bool], n: int) -> bool:
    if any(batched) and (op.params["axis"] == 0 or not all(batched)
                         or len({_shape(v)[0] for v in op.operands}) > 1):
        raise Mixes
    return any(batched)


@rule(tape.SumOp, tape.MaxOp)
def _reduce(op: TapeOp, batched: Sequence[bool], n: int) -> bool:
    if batched[0] and 0 in op.params["axes"]:
        raise Mixes
    return batched[0]


@rule(tape.LayerNormOp, tape.LayerNormBackwardOp, tape.SoftmaxOp, tape.SoftmaxBackwardOp)
def _last_axis(op: TapeOp, batched: Sequence[bool], n: int) -> bool:
    """Each row along the last axis on its own: apart, unless that axis is the batch's."""
    if any(batched) and len(_shape(op.results[0])) == 1:
        raise Mixes
    return _broadcasting(op, batched, n)


@rule(tape.ArgMaxOp, tape.ArgMinOp, tape.CumsumOp)
def _along_axis(op: TapeOp, batched: Sequence[bool], n: int) -> bool:
    if batched[0] and op.params["axis"] == 0:
        raise Mixes
    return batched[0]


@rule(tape.MatmulOp)
def _matmul(op: tape.MatmulOp, batched: Sequence[bool], n: int) -> bool:
    """Rows of the left operand (or a batch of products whose leading dim both share)."""
    lhs, rhs = _shape(op.lhs), _shape(op.rhs)
    result = _shape(op.result)
    if batched[0] and not batched[1] and len(lhs) >= 2 and len(lhs) == len(result) and (
            len(rhs) <= 2 or len(rhs) < len(result) or rhs[0] == 1):
        return True
    if all(batched) and len(lhs) == len(rhs) == len(result) >= 3 and lhs[0] == rhs[0]:
        return True
    if any(batched):
        raise Mixes
    return False


@rule(tape.Conv2dOp, tape.MaxPool2dOp, tape.AvgPool2dOp, tape.Conv2dBackwardInputOp,
      tape.MaxPool2dBackwardOp, tape.AvgPool2dBackwardOp, tape.UnfoldOp, tape.FoldOp)
def _images(op: TapeOp, batched: Sequence[bool], n: int) -> bool:
    """Image by image: the batched operands are the images (and their cotangents); a
    convolution's weight must not be."""
    images = [not _is_weight(op, i) for i in range(len(batched))]
    if any(b and not image for b, image in zip(batched, images, strict=True)):
        raise Mixes
    if any(batched) and not all(b for b, image in zip(batched, images, strict=True) if image):
        raise Mixes
    if any(batched) and isinstance(op, tape.UnfoldOp | tape.FoldOp):
        # the trailing dims are windowed: the kernel's (unfold), the windows' and kernel's (fold)
        windowed = len(op.params["kernel"]) * (2 if isinstance(op, tape.FoldOp) else 1)
        if len(_shape(op.operands[0])) <= windowed:
            raise Mixes
    return any(batched)


def _is_weight(op: TapeOp, index: int) -> bool:
    return isinstance(op, tape.Conv2dOp | tape.Conv2dBackwardInputOp) and \
        op.operands[index] is op.weight


@rule(tape.Conv2dBackwardWeightOp, tape.TakeOp, tape.ScatterOp)
def _mixing(op: TapeOp, batched: Sequence[bool], n: int) -> bool:
    """A weight gradient sums over the batch; gathers and scatters are not followed (an
    index may name any example)."""
    if any(batched):
        raise Mixes
    return False


@dataclass(frozen=True)
class Split:
    """`module` written for a batch of `n // pieces`: its inputs `batched` sliced along axis 0."""

    module: ModuleOp
    n: int
    pieces: int
    batched: tuple[bool, ...]


def _function(module: ModuleOp) -> func.FuncOp | None:
    return next((op for op in module.ops if isinstance(op, func.FuncOp)
                 and not op.is_declaration), None)


def batched_values(module: ModuleOp, n: int) -> set[SSAValue] | None:
    """The values of `module`'s function whose axis 0 holds a batch of `n` (every input of n
    rows, and what the ops make of them), if every result is one and no op mixes examples."""
    f = _function(module)
    if f is None:
        return None
    batched: set[SSAValue] = {a for a in f.body.block.args
                              if isinstance(a.type, TensorType) and _shape(a)[:1] == (n,)}
    if not batched:
        return None
    for op in f.body.block.ops:
        if isinstance(op, func.ReturnOp):
            if not all(v in batched for v in op.operands):
                return None
            return batched
        row = PER_EXAMPLE.get(type(op))
        if row is None:
            return None
        try:
            if row(op, [v in batched for v in op.operands], n):
                batched.update(op.results)
        except Mixes:
            return None
    return None


def rebatch(module: ModuleOp, n: int, size: int, batched: set[SSAValue]) -> ModuleOp:
    """A copy of `module` whose `batched` values have `size` rows instead of `n`; checked by
    the verifier (each op's result type inferred again)."""
    mapping: dict[SSAValue, SSAValue] = {}
    copy = module.clone(value_mapper=mapping)
    original, f = _function(module), _function(copy)
    assert original is not None and f is not None
    for value in batched:  # rows per example kept
        Rewriter.replace_value_with_new_type(
            mapping[value], _rows(value.type, _shape(value)[0] // n * size))
    for old, new in zip(original.body.block.ops, f.body.block.ops, strict=True):
        if isinstance(old, tape.SliceOp) and old.input in batched:  # every row: _slice
            stop = list(old.params["stop"])
            stop[0] = stop[0] // n * size
            new.properties["stop"] = IntList("stop").to_attr(stop)
    block = f.body.block
    f.function_type = FunctionType.from_lists([a.type for a in block.args],
                                              [v.type for v in block.last_op.operands])
    copy.verify()
    return copy


def _rows(t: TensorType, size: int) -> TensorType:
    shape = list(t.get_shape())
    shape[0] = size
    return TensorType(t.get_element_type(), shape)


def product_flops(module: ModuleOp) -> int:
    """The FLOPs of `module`'s matmuls and convolutions (a multiply-add counts two)."""
    total = 0
    for op in module.walk():
        if isinstance(op, tape.MatmulOp):
            total += 2 * math.prod(_shape(op.result)) * _shape(op.lhs)[-1]
        elif isinstance(op, tape.Conv2dOp):
            total += 2 * math.prod(_shape(op.result)) * math.prod(_shape(op.weight)[1:])
    return total


def constant_bytes(module: ModuleOp) -> int:
    """The bytes of `module`'s constants (a model's weights): each piece reads all of them."""
    return sum(math.prod(_shape(op.result)) * op.result.type.get_element_type().bitwidth // 8
               for op in module.walk() if isinstance(op, tape.ConstantOp))


def _value_sizes(module: ModuleOp) -> Iterator[int]:
    """The bytes of each tensor `module`'s ops compute (not its constants)."""
    return (math.prod(_shape(r)) * r.type.get_element_type().bitwidth // 8
            for op in module.walk() if not isinstance(op, tape.ConstantOp)
            for r in op.results if isinstance(r.type, TensorType))


def largest_value_bytes(module: ModuleOp) -> int:
    """The bytes of the largest tensor `module`'s ops compute (not its constants)."""
    return max(_value_sizes(module), default=0)


def value_bytes(module: ModuleOp) -> int:
    """The bytes of every tensor `module`'s ops compute (not its constants), all together."""
    return sum(_value_sizes(module))


def batch_divisors(module: ModuleOp) -> set[int]:
    """Every piece count above 1 that divides the leading size of one of the function's
    arguments (`split`'s candidates)."""
    f = _function(module)
    if f is None:
        return set()
    sizes = {_shape(a)[0] for a in f.body.block.args
             if isinstance(a.type, TensorType) and _shape(a)}
    return {d for n in sizes for d in range(2, n + 1) if n % d == 0}


def split(module: ModuleOp, pieces: int) -> Split | None:
    """The function of `module` as `pieces` equal pieces of its batch (one per thread: fewer
    would leave threads idle), for the largest batch size among its inputs' that `pieces`
    divides and no op mixes; None where there is none."""
    f = _function(module)
    if f is None or pieces < 2:
        return None
    sizes = sorted({_shape(a)[0] for a in f.body.block.args  # (no piece may be empty)
                    if isinstance(a.type, TensorType) and _shape(a)[:1] >= (pieces,)},
                   reverse=True)
    for n in sizes:
        if n % pieces:
            continue
        batched = batched_values(module, n)
        if batched is None:
            continue
        args = tuple(a in batched for a in f.body.block.args)
        try:
            return Split(rebatch(module, n, n // pieces, batched), n, pieces, args)
        except VerifyException:  # a rule let through what the verifier does not (ShapeError)
            continue
    return None
