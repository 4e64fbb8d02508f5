"""matmul as one kernel.gemm (floats), or as loops (integers), its transposed operands read in
place."""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, f32
from xdsl.ir import Block, SSAValue

from tapeml.dialects import tape
from tapeml.dialects.kernel import GemmSpec
from tapeml.transforms.loops.emitter import Emitter, shape_of, strides, zero
from tapeml.transforms.loops.epilogues import gemm
from tapeml.transforms.loops.registry import Context, lowering


@lowering(tape.MatmulOp)
def lower_matmul(e: Emitter, op: tape.MatmulOp, ins: list[SSAValue], out: SSAValue,
                 cx: Context) -> None:
    """One `kernel.gemm` (the generated BLIS-style kernel on the CPU), with the epilogue of the
    op folded into it, if any (cx.epilogue). An operand that is a transpose of its last two
    axes (in `views`: the strides of its unpermuted buffer) is read in place through its
    strides. An integer product (which no kernel computes) is loops: `_integer_product`."""
    out_shape = shape_of(op.result)
    batch = math.prod(out_shape[:-2])
    a_shape, b_shape = shape_of(op.lhs), shape_of(op.rhs)
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]

    def steps(value: SSAValue, shape: Sequence[int]) -> tuple[int, int, int]:
        s = cx.views.get(value) or strides(shape)
        return (s[0] if len(shape) == 3 else 0, s[-2], s[-1])

    element = op.result.type.get_element_type()
    if isinstance(element, IntegerType):
        _integer_product(e, (batch, m, k, n), steps(op.lhs, a_shape), steps(op.rhs, b_shape),
                         ins, out)
        return
    spec = GemmSpec(dtype="f32" if element == f32 else "f64",
                    batch=batch, m=m, n=n, k=k, a=steps(op.lhs, a_shape),
                    b=steps(op.rhs, b_shape), c0=m * n, accumulate=False)
    gemm(e, ins[0], ins[1], out, spec, cx.epilogue)


def _integer_product(e: Emitter, sizes: tuple[int, int, int, int], a: tuple[int, int, int],
                     b: tuple[int, int, int], ins: list[SSAValue], out: SSAValue) -> None:
    """C[b] = A[b] @ B[b] of integers, row by row of C in parallel: C's row zeroed, then for
    each p, A[i, p] times B's row p added along it (contiguous in C, and in B where its rows
    are: loops LLVM vectorizes). Integer products and sums wrap around, so any order gives
    numpy's bits."""
    batch, m, k, n = sizes
    t = out.type.element_type
    zero(e, out, batch * m * n, t)

    def row(e: Emitter, ivs: list) -> None:
        bi, i = ivs

        def term(e: Emitter, kvs: list) -> None:
            p, j = kvs
            x = e.load(ins[0], e.linear([bi, i, p], a))
            y = e.load(ins[1], e.linear([bi, p, j], b))
            at = e.linear([bi, i, j], (m * n, n, 1))
            product = e.insert(arith.MuliOp(x, y))
            e.store(e.insert(arith.AddiOp(e.load(out, at), product)), out, at)

        e.loops([k, n], term)

    e.loops([batch, m], row, parallel=True)


def transposes_read_in_place(block: Block) -> dict[SSAValue, list[int]]:
    """Permutes that swap the last two axes and are only read by matmuls: those read their
    input in place, with swapped strides (result -> its strides in the input buffer)."""
    views = {}
    for op in block.ops:
        if not isinstance(op, tape.PermuteOp):
            continue
        perm = list(op.params["perm"])
        rank = len(perm)
        if rank not in (2, 3) or perm != [*range(rank - 2), rank - 1, rank - 2]:
            continue
        if op.result.uses and all(isinstance(u.operation, tape.MatmulOp)
                                  for u in op.result.uses):
            source = strides(shape_of(op.input))
            views[op.result] = [source[p] for p in perm]
    return views
