"""Elementwise ops that fold into the product before them as its kernel.gemm's epilogue
(`tape-to-loops{gemm_epilogues}`, the CPU's): a bias added to a convolution's or a matmul's
result, one number per output channel or per column, then perhaps relu:

    %y = tape.conv2d %x, %w ...                       kernel.gemm %w, %cols, %z, %b
    %z = tape.fused %y, %b {add; relu}         ->         {..., bias = "rows", relu = true}

The product writes z, adding the bias to each element and taking its relu as its tile is
stored (tapeml/codegen/gemm/): y is never made, and z is written once instead of y written,
then read and z written. The sums are the product's, in its order, so the bits are the two
ops' bits. What folds (`gemm_epilogues`): an op (tape.fused, or a lone add, relu or maximum)
whose ops are add(product, bias), relu or maximum(·, +0) of that, or both, in that order,
where the product (conv2d with groups = 1, matmul) is used by it alone, and the bias varies
along one axis of the result only: a convolution's channels (a row of each image's C), a
matmul's last axis (a column of C) or its second-last (a row).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr
from xdsl.ir import Block, Operation, SSAValue

from tapeml.dialects import kernel, tape
from tapeml.dialects.kernel import GemmSpec
from tapeml.transforms.loops.emitter import Emitter


@dataclass(frozen=True)
class Epilogue:
    """What a product's kernel.gemm adds to its result and whether it takes the relu: `bias`
    the added tensor (its buffer, once lowered; None: nothing added), whose elements in order
    are one per row of C (`kind` "rows") or per column ("columns")."""

    bias: SSAValue | None
    kind: str
    relu: bool


def gemm(e: Emitter, a: SSAValue, b: SSAValue, c: SSAValue, spec: GemmSpec,
         epilogue: Epilogue | None = None) -> None:
    """kernel.gemm(a, b, c) for `spec`, with `epilogue` (its bias a buffer) where given."""
    if epilogue is None:
        e.insert(kernel.GemmOp(a, b, c, spec))
        return
    spec = dataclasses.replace(spec, bias=epilogue.kind if epilogue.bias else "",
                               relu=epilogue.relu)
    e.insert(kernel.GemmOp(a, b, c, spec, epilogue.bias))


def gemm_epilogues(block: Block, views: dict[SSAValue, list[int]],
                   kept: set[SSAValue]) -> dict[Operation, tuple[Operation, Epilogue]]:
    """The ops of `block` that fold into their product (the module doc): op -> (the product,
    the epilogue, its bias the tensor). `views`: transposes read in place (not a bias);
    `kept`: values the caller's buffers hold (a product returned is not folded)."""
    folded = {}
    for op in block.ops:
        found = _match(op)
        if found is None:
            continue
        seen, bias, relu = found  # the product's value, or a reshape of it
        product = _product(seen)
        if product is None or product.parent_block() is not block or seen in kept \
                or seen in views or seen.type != op.results[0].type:
            continue
        kind = ""
        if bias is not None:
            kind = _bias_kind(product, seen, bias)
            if not kind or bias in views:
                continue
        folded[op] = (product, Epilogue(bias, kind, relu))
    return folded


def _product(value: SSAValue) -> Operation | None:
    """The product that makes `value` for the op that takes it alone: a conv2d with groups = 1,
    a matmul, or a reshape of a matmul that keeps its last axis (x @ W over a batch of
    sequences, flattened for the product); else None."""
    owner = value.owner
    if not value.has_one_use() or not isinstance(owner, Operation):
        return None
    if isinstance(owner, tape.ReshapeOp):
        inner = owner.operands[0]
        if not (isinstance(inner.owner, tape.MatmulOp) and inner.has_one_use()
                and inner.type.get_shape()[-1:] == value.type.get_shape()[-1:]):
            return None
        owner = inner.owner
    if isinstance(owner, tape.Conv2dOp) and owner.params["groups"] != 1:
        return None
    return owner if isinstance(owner, PRODUCTS) else None


PRODUCTS = (tape.MatmulOp, tape.Conv2dOp)


def _match(op: Operation) -> tuple[SSAValue, SSAValue | None, bool] | None:
    """(the product's value `op` takes, the bias it adds or None, relu) where `op` computes
    add(product, bias), relu of that (relu(·) or maximum(·, +0)), or relu(product), else
    None."""
    if isinstance(op, tape.FusedOp):
        body = op.body.block
        outer: dict[SSAValue, SSAValue] | None = dict(zip(body.args, op.operands, strict=True))
        steps = [o for o in body.ops if not isinstance(o, tape.ConstantOp | tape.YieldOp)]
        if not steps or body.last_op is None or \
                body.last_op.operands[0] is not steps[-1].results[0]:
            return None
    elif isinstance(op, tape.AddOp | tape.ReluOp | tape.MaximumOp):
        outer, steps = None, [op]
    else:
        return None

    def outside(value: SSAValue) -> SSAValue | None:  # an operand, as the block sees it
        return value if outer is None else outer.get(value)

    product = bias = None
    rest = steps
    if isinstance(steps[0], tape.AddOp):
        p, q = (outside(v) for v in steps[0].operands)
        if p is None or q is None or p is q:
            return None
        # add is commutative (the same bits either way): either operand may be the product
        product, bias = (p, q) if _product(p) is not None else (q, p)
        rest = steps[1:]
    relu = bool(rest)
    if rest:
        operand = _relu_operand(rest[0]) if len(rest) == 1 else None
        if operand is None:
            return None
        if bias is None:
            product = outside(operand)
        elif operand is not steps[0].results[0]:
            return None
    if product is None or _product(product) is None:
        return None
    if outer is not None and len(op.operands) != 1 + (bias is not None):
        return None
    return product, bias, relu


def _relu_operand(op: Operation) -> SSAValue | None:
    """x where `op` is relu(x) or maximum(x, +0) / maximum(+0, x) (the same bits), else None."""
    if isinstance(op, tape.ReluOp):
        return op.operands[0] if op.result.type.get_element_type().bitwidth in (32, 64) else None
    if not isinstance(op, tape.MaximumOp):
        return None
    for x, other in (op.operands, reversed(op.operands)):
        if _is_positive_zero(other):
            return x
    return None


def _is_positive_zero(value: SSAValue) -> bool:
    """A rank-0 tape.constant +0.0 (not -0.0: maximum(-0, -0.0) is -0, relu's +0)."""
    owner = value.owner
    if not isinstance(owner, tape.ConstantOp):
        return False
    attribute = owner.value
    if not isinstance(attribute, DenseIntOrFPElementsAttr) or value.type.get_shape():
        return False
    data = attribute.get_values()
    return len(data) == 1 and isinstance(data[0], float) and data[0] == 0.0 and \
        not np.signbit(data[0])


def _bias_kind(product: Operation, seen: SSAValue, bias: SSAValue) -> str:
    """"rows" or "columns": the row or the column of the product's C each element of `bias`
    is added along (its only axis of more than one element, right-aligned against the
    result's), else "" (a bias of another shape: not folded). `seen`: the product's value as
    the op takes it (a reshape of a matmul: only its last axis is known to be C's columns)."""
    result = seen.type.get_shape()
    shape = bias.type.get_shape()
    if len(shape) > len(result) or bias.type.get_element_type() != \
            product.results[0].type.get_element_type():
        return ""
    axes = [len(result) - len(shape) + i for i, size in enumerate(shape) if size != 1]
    if len(axes) != 1:
        return ""
    (axis,) = axes
    if isinstance(product, tape.Conv2dOp):  # C of each image: channels x positions
        return "rows" if axis == 1 else ""
    if seen is not product.results[0]:
        return "columns" if axis == len(result) - 1 else ""
    return {len(result) - 1: "columns", len(result) - 2: "rows"}.get(axis, "")
