"""Elementwise ops that fold into the product before them as its kernel.gemm's epilogue
(`tape-to-loops{gemm_epilogues}`, the CPU's): a bias added to a convolution's or a matmul's
result, one number per output channel or per column, then a residual of the result's shape
(a ResNet block's shortcut), then relu, each step optional:

    %y = tape.conv2d %x, %w ...                       kernel.gemm %w, %cols, %z, %b
    %z = tape.fused %y, %b {add; relu}         ->         {..., bias = "rows", relu = true}

The product writes z, adding the bias to each element and taking its relu as its tile is
stored (tapeml/codegen/gemm/): y is never made, and z is written once instead of y written,
then read and z written. The sums are the product's, in its order, so the bits are the two
ops' bits. What folds (`gemm_epilogues`): an op (tape.fused, or a lone add, relu or maximum)
whose ops are, in this order, add(product, bias), add(·, residual), relu(·) or maximum(·, +0),
each optional (at least one; the residual may be the first add's), where the product
(conv2d with groups = 1, matmul) is used by it alone, the bias varies along one axis of the
result only (a convolution's channels: a row of each image's C; a matmul's last axis: a
column of C, or its second-last: a row), and the residual is a tensor of the result's type.
Two products' biased results summed (then relu or not: `_two_products`), as a ResNet block
that projects its shortcut adds them, fold into both: the first made with its bias, the
second's epilogue adding its own bias, then the first's result as its residual.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, IntegerType
from xdsl.ir import Block, Operation, SSAValue

from tapeml.dialects import kernel, tape
from tapeml.dialects.kernel import GemmSpec
from tapeml.transforms.loops.emitter import Emitter


@dataclass(frozen=True)
class Epilogue:
    """What a product's kernel.gemm adds to its result and whether it takes the relu: `bias`
    the added tensor (its buffer, once lowered; None: no bias), whose elements in order are
    one per row of C (`kind` "rows") or per column ("columns"); `residual` a tensor of the
    result's type added after it (None: none)."""

    bias: SSAValue | None
    kind: str
    relu: bool
    residual: SSAValue | None = None


def gemm(e: Emitter, a: SSAValue, b: SSAValue, c: SSAValue, spec: GemmSpec,
         epilogue: Epilogue | None = None) -> None:
    """kernel.gemm(a, b, c) for `spec`, with `epilogue` (its tensors buffers) where given."""
    if epilogue is None:
        e.insert(kernel.GemmOp(a, b, c, spec))
        return
    spec = dataclasses.replace(spec, bias=epilogue.kind if epilogue.bias else "",
                               relu=epilogue.relu, residual=epilogue.residual is not None)
    e.insert(kernel.GemmOp(a, b, c, spec, epilogue.bias, epilogue.residual))


def gemm_epilogues(block: Block, views: dict[SSAValue, list[int]], kept: set[SSAValue]
                   ) -> tuple[dict[Operation, tuple[Operation, Epilogue]],
                              dict[Operation, tuple[Operation, Epilogue]]]:
    """The ops of `block` that fold into their product (the module doc): op -> (the product,
    the epilogue, its tensors the tape's); and, of those, the ops that fold into two
    (`_two_products`): op -> (the first product, made just before the other with its own
    epilogue, the other's residual). `views`: transposes read in place (not a bias nor a
    residual); `kept`: values the caller's buffers hold (a product returned is not
    folded)."""
    folded, firsts = {}, {}
    for op in block.ops:
        found = _match(op)
        if found is None:
            two = _two_products(op, block, views, kept)
            if two is not None:
                firsts[op], folded[op] = two
            continue
        seen, added, relu = found  # the product's value (or a reshape of it), what is added
        product = _product(seen)
        result = op.results[0].type
        if product is None or product.parent_block() is not block or seen in kept \
                or seen in views or seen.type != result or any(x in views for x in added):
            continue
        bias = residual = None
        kind = ""
        if added and added[-1].type == result:  # the residual: C's own shape
            residual = added.pop()
        if added:
            bias = added.pop()
            kind = _bias_kind(product, seen, bias)
            if not kind or added:  # (two biases, or a residual first: not a kernel.gemm's)
                continue
        folded[op] = (product, Epilogue(bias, kind, relu, residual))
    return folded, firsts


def _two_products(op: Operation, block: Block, views: dict[SSAValue, list[int]],
                  kept: set[SSAValue]) -> tuple[tuple[Operation, Epilogue],
                                                tuple[Operation, Epilogue]] | None:
    """Two products' biased results summed, then relu(·) or maximum(·, +0) or nothing: a
    tape.fused whose ops are add(p, b), add(q, c), add(·, ·) of those two (each either way
    round), then the activation, p and q products (conv2d with groups = 1, matmul) it alone
    uses (a ResNet block that projects its shortcut). ((p's product, its epilogue: + b),
    (q's product, its epilogue: + c, + p's result as the residual, the activation)): p is
    made with its bias (p + b in p's buffer), then q, whose kernel adds c, then p + b (IEEE
    addition is commutative: the fused op's bits), then the activation. None where it is
    not so."""
    if not isinstance(op, tape.FusedOp) or len(op.operands) != 4:
        return None
    body = op.body.block
    outer = dict(zip(body.args, op.operands, strict=True))
    steps = [o for o in body.ops if not isinstance(o, tape.ConstantOp | tape.YieldOp)]
    if len(steps) not in (3, 4) or body.last_op is None or \
            body.last_op.operands[0] is not steps[-1].results[0]:
        return None
    first, second, total = steps[:3]
    if not all(isinstance(s, tape.AddOp) for s in (first, second, total)) or \
            set(total.operands) != {first.results[0], second.results[0]} or \
            not first.results[0].has_one_use() or not second.results[0].has_one_use():
        return None
    relu = len(steps) == 4
    if relu and _relu_operand(steps[3]) is not total.results[0]:
        return None
    result = op.results[0].type
    halves = []
    for step in (first, second):
        x, y = (outer.get(v) for v in step.operands)
        if x is None or y is None:
            return None
        value, bias = (x, y) if _product(x) is not None else (y, x)
        product = _product(value)
        if product is None or _product(bias) is not None or value.owner is not product \
                or product.parent_block() is not block or value in kept or value in views \
                or bias in views or value.type != result:
            return None
        kind = _bias_kind(product, value, bias)
        if not kind:
            return None
        halves.append((product, value, bias, kind))
    (p, p_value, b, b_kind), (q, _, c, c_kind) = halves
    return (p, Epilogue(b, b_kind, False)), (q, Epilogue(c, c_kind, relu, p_value))


def _product(value: SSAValue) -> Operation | None:
    """The product that makes `value` for the op that takes it alone: a conv2d with groups = 1,
    a matmul of floats, or a reshape of a matmul that keeps its last axis (x @ W over a batch of
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
    if isinstance(owner.results[0].type.get_element_type(), IntegerType):
        return None  # (an integer product is loops, no kernel.gemm: contractions.py)
    return owner if isinstance(owner, PRODUCTS) else None


PRODUCTS = (tape.MatmulOp, tape.Conv2dOp)


def _match(op: Operation) -> tuple[SSAValue, list[SSAValue], bool] | None:
    """(the product's value `op` takes, what it adds to it in order (a bias, a residual: at
    most two), relu) where `op` computes add(product, x), add(·, y), relu(·) or maximum(·, +0)
    in that order, each optional, else None."""
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

    product, added, carried = None, [], None  # carried: the value the chain has reached
    for step in steps[:2]:
        if not isinstance(step, tape.AddOp):
            break
        p, q = step.operands
        if carried is None:  # add(product, x), either way round (add is commutative)
            p, q = outside(p), outside(q)
            if p is None or q is None or p is q:
                return None
            product, other = (p, q) if _product(p) is not None else (q, p)
        else:  # add(·, y)
            other = outside(q if p is carried else p)
            if carried not in (p, q) or other is None or other is product:
                return None
        added.append(other)
        carried = step.results[0]
    rest = steps[len(added):]
    relu = bool(rest)
    if rest:
        operand = _relu_operand(rest[0]) if len(rest) == 1 else None
        if operand is None:
            return None
        if carried is None:
            product = outside(operand)
        elif operand is not carried:
            return None
    if product is None or _product(product) is None:
        return None
    if outer is not None and len(op.operands) != 1 + len(added):
        return None
    return product, added, relu


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
