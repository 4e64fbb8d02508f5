"""The GPU kernel for `kernel.gemm`: shared-memory tiles, one thread per element of C.

A block of tile x tile threads computes one tile x tile block of C. The grid is one-dimensional
(x reaches 2^31 - 1 blocks, y and z only 65535): block b is column block b % nb, row block
(b / nb) % mb, batch b / (nb mb). For each step of `tile` along k, every thread loads one element of
A's and one of B's tile into shared memory (zero past the edges: the index is clamped first, so
nothing outside a buffer is read), the block meets at a barrier, each thread adds the products
along its row of A's tile and column of B's, and the block meets again before the tiles are
overwritten. Each element of A and B is thus read from global memory once per tile instead of
once per product. A kernel.gemm whose batches sum into one C (c_batch_stride = 0) runs one block
layer, each thread summing the batches in order.

Sums run in k order with one accumulator per element, in the element type.
"""

from __future__ import annotations

from xdsl.builder import Builder, InsertPoint
from xdsl.dialects import arith, gpu
from xdsl.dialects.builtin import MemRefType
from xdsl.ir import SSAValue

from tapeml.dialects import kernel
from tapeml.dialects.kernel import GemmSpec
from tapeml.transforms.to_loops import Emitter

GEMM_TILE = 16


def blocks(spec: GemmSpec, tile: int) -> tuple[int, int, int]:
    """Column blocks, row blocks and batches of the grid (summed batches: one layer)."""
    return (max(1, -(-spec.n // tile)), max(1, -(-spec.m // tile)),
            max(1, spec.batch if spec.c0 else 1))


def gemm_kernel(name: str, spec: GemmSpec, a_type: MemRefType, b_type: MemRefType,
                c_type: MemRefType, tile: int = GEMM_TILE) -> gpu.FuncOp:
    """The kernel `name`(a, b, c) computing `spec` (see tapeml/dialects/kernel.py)."""
    f = gpu.FuncOp(name, ([a_type, b_type, c_type], []), kernel=True,
                   known_block_size=[tile, tile, 1])
    a, b, c = f.body.block.args
    e = Emitter(Builder(InsertPoint.at_end(f.body.block)))
    t = c_type.get_element_type()

    def dim(op: type, axis: gpu.DimensionEnum) -> SSAValue:
        return e.insert(op(gpu.DimensionAttr(axis)))

    X, Y = gpu.DimensionEnum.X, gpu.DimensionEnum.Y
    tx, ty = dim(gpu.ThreadIdOp, X), dim(gpu.ThreadIdOp, Y)
    column_blocks, row_blocks = blocks(spec, tile)[:2]
    block = dim(gpu.BlockIdOp, X)
    rest = e.insert(arith.DivSIOp(block, e.index(column_blocks)))
    row = e.linear([e.insert(arith.RemSIOp(rest, e.index(row_blocks))), ty], [tile, 1])
    col = e.linear([e.insert(arith.RemSIOp(block, e.index(column_blocks))), tx], [tile, 1])
    a_tile = e.insert(kernel.SharedOp(MemRefType(t, [tile * tile])))
    b_tile = e.insert(kernel.SharedOp(MemRefType(t, [tile * tile])))
    mine = e.linear([ty, tx], [tile, 1])  # the element of each tile this thread loads
    zero = e.scalar(0.0, t)

    def one_batch(e: Emitter, batch: SSAValue | int, acc: SSAValue) -> SSAValue:
        def step(e: Emitter, ivs: list[SSAValue], acc: SSAValue) -> SSAValue:
            (kt,) = ivs
            p = e.linear([kt, tx], [tile, 1])
            q = e.linear([kt, ty], [tile, 1])
            a_ok = e.insert(arith.AndIOp(e.in_range(row, spec.m), e.in_range(p, spec.k)))
            b_ok = e.insert(arith.AndIOp(e.in_range(q, spec.k), e.in_range(col, spec.n)))
            a_at = _a_at(e, spec, batch, e.clamp(row, spec.m), e.clamp(p, spec.k))
            b_at = e.linear([batch, e.clamp(q, spec.k), e.clamp(col, spec.n)], list(spec.b))
            e.store(e.insert(arith.SelectOp(a_ok, e.load(a, a_at), zero)), a_tile, mine)
            e.store(e.insert(arith.SelectOp(b_ok, e.load(b, b_at), zero)), b_tile, mine)
            e.insert(gpu.BarrierOp())

            def product(e: Emitter, ivs: list[SSAValue], acc: SSAValue) -> SSAValue:
                (i,) = ivs
                x = e.load(a_tile, e.linear([ty, i], [tile, 1]))
                y = e.load(b_tile, e.linear([i, tx], [tile, 1]))
                return e.insert(arith.AddfOp(acc, e.insert(arith.MulfOp(x, y))))

            acc = e.reduce([tile], acc, product)
            e.insert(gpu.BarrierOp())
            return acc

        return e.reduce([-(-spec.k // tile)], acc, step)

    steps = [1, spec.m] if spec.c_transposed else [spec.n, 1]  # C's (i, j)
    if spec.c0:
        batch = e.insert(arith.DivSIOp(rest, e.index(row_blocks)))
        total = one_batch(e, batch, zero)
        at = e.linear([batch, row, col], [spec.c0, *steps])
    else:  # every batch adds into one C
        total = e.reduce([spec.batch], zero, lambda e, ivs, acc: one_batch(e, ivs[0], acc))
        at = e.linear([row, col], steps)
    inside = e.insert(arith.AndIOp(e.in_range(row, spec.m), e.in_range(col, spec.n)))

    def write(e: Emitter) -> None:
        value = e.insert(arith.AddfOp(e.load(c, at), total)) if spec.accumulate else total
        e.store(value, c, at)

    e.if_(inside, write)
    e.insert(gpu.ReturnOp([]))
    return f


def _a_at(e: Emitter, spec: GemmSpec, batch: SSAValue | int, row: SSAValue,
          p: SSAValue) -> SSAValue:
    """Where A[batch][row, p] is: by its strides, or, with taps (kernel.gemm's a_taps),
    p = c * T + t read at c * a2 + taps[t] (the tap chosen by a select per tap)."""
    if not spec.a_taps:
        return e.linear([batch, row, p], list(spec.a))
    count = len(spec.a_taps)
    c = e.insert(arith.DivSIOp(p, e.index(count)))
    t = e.insert(arith.RemSIOp(p, e.index(count)))
    tap = e.index(spec.a_taps[0])
    for i, offset in enumerate(spec.a_taps[1:], 1):
        here = e.insert(arith.CmpiOp(t, e.index(i), "eq"))
        tap = e.insert(arith.SelectOp(here, e.index(offset), tap))
    return e.addi(e.linear([batch, row, c], list(spec.a)), tap)
