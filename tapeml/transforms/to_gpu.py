"""`convert-loops-to-gpu`: the loop form `tape-to-loops` writes becomes a host function that
allocates device buffers and launches kernels, and the kernels, outlined into one `gpu.module`
(xDSL's gpu dialect) per function:

    scf.parallel over a shape    one kernel, one thread per iteration: a 1-d grid of blocks of
                                 `block` threads; thread g = block_id.x * block_dim.x +
                                 thread_id.x runs iteration g (row-major), those past the end
                                 nothing
    kernel.gemm                  the tiled GEMM kernel for its parameters (gemm_gpu.py), one per
                                 distinct kernel.gemm
    memref.alloc / dealloc       gpu.alloc / gpu.dealloc: intermediates live on the device
    func.call                    stays on the host: the function it calls (a nest that
                                 merge-loop-nests or tape-to-loops{share=true} outlined) is
                                 a host function of launches too
    any other run of ops         one kernel of one thread, the ops in order: the loops whose
                                 iterations add into shared elements (fold, the pools'
                                 backward, ...) and sums to a scalar

Constants a kernel uses are cloned into it; the buffers it reads or writes (arguments,
allocations, constant globals) are its arguments. The host function keeps its signature, so the
caller passes device buffers where it passed host buffers. Everything stays runnable on xDSL's
interpreter (tapeml/interpreters/gpu.py runs the launches).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.builder import Builder, InsertPoint
from xdsl.context import Context
from xdsl.dialects import arith, func, gpu, memref, scf
from xdsl.dialects.builtin import (
    IndexType,
    MemRefType,
    ModuleOp,
    StringAttr,
    SymbolRefAttr,
    UnitAttr,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tapeml.dialects import kernel
from tapeml.transforms.gemm_gpu import GEMM_TILE, blocks, gemm_kernel
from tapeml.transforms.outlining import (
    constant_index,
    constant_op,
    delinearize,
    external_values,
    index,
)
from tapeml.transforms.to_loops import LoweringError

INDEX = IndexType()
BLOCK = 256
"""Threads per block of an elementwise (parallel-loop) kernel."""
GRID_LIMITS = (2**31 - 1, 65535, 65535)
MAX_GEMM_TILE = 16
"""A GEMM tile's tile x tile threads each hold their sums and addresses in registers: at 32
(1024 threads) an f32 kernel needs more registers than a multiprocessor has."""


def check_options(block: int, gemm_tile: int) -> None:
    if not isinstance(block, int) or not 1 <= block <= 1024:
        raise LoweringError(f"convert-loops-to-gpu: block must be 1 to 1024 threads, got {block}")
    if not isinstance(gemm_tile, int) or not 1 <= gemm_tile <= MAX_GEMM_TILE:
        raise LoweringError(f"convert-loops-to-gpu: gemm_tile must be 1 to {MAX_GEMM_TILE}, got "
                            f"{gemm_tile}")


@dataclass
class Outliner:
    """Builds the kernels of one function into `kernels` (a gpu.module's block)."""

    function: str
    kernels: Block
    block: int = BLOCK
    gemm_tile: int = GEMM_TILE
    count: int = 0

    @property
    def module_name(self) -> str:
        return f"{self.function}_kernels"

    def _new_kernel(self, external: list[SSAValue], block: tuple[int, int, int]
                    ) -> tuple[gpu.FuncOp, dict[SSAValue, SSAValue], list[SSAValue], Builder]:
        """A kernel taking the buffers among `external` (constants are cloned into it)."""
        buffers = [v for v in external if isinstance(v.type, MemRefType)]
        others = [v for v in external if v not in buffers and constant_op(v) is None]
        if others:
            raise LoweringError(f"convert-loops-to-gpu: @{self.function}: a kernel would need "
                                f"{others[0].type} values computed outside it")
        name = f"{self.function}_k{self.count}"
        self.count += 1
        kernel_func = gpu.FuncOp(name, ([b.type for b in buffers], []), kernel=True,
                                 known_block_size=list(block))
        body = kernel_func.body.block
        for old, new in zip(buffers, body.args, strict=True):
            new.name_hint = old.name_hint
        builder = Builder(InsertPoint.at_end(body))
        mapping: dict[SSAValue, SSAValue] = dict(zip(buffers, body.args, strict=True))
        for value in external:
            if value not in mapping:
                clone = constant_op(value).clone()
                builder.insert(clone)
                mapping[value] = clone.result
        self.kernels.add_op(kernel_func)
        return kernel_func, mapping, buffers, builder

    def _launch(self, name: str, grid: Sequence[int], block: Sequence[int],
                operands: Sequence[SSAValue], at: Operation) -> None:
        if any(g > limit for g, limit in zip(grid, GRID_LIMITS, strict=True)):
            raise LoweringError(f"convert-loops-to-gpu: @{self.function}: {name} needs a grid "
                                f"of {tuple(grid)} blocks, past the GPU's {GRID_LIMITS}")
        sizes = [arith.ConstantOp.from_int_and_width(v, INDEX) for v in (*grid, *block)]
        launch = gpu.LaunchFuncOp(SymbolRefAttr(self.module_name, [name]), sizes[:3], sizes[3:],
                                  kernelOperands=list(operands))
        Rewriter.insert_op([*sizes, launch], InsertPoint.before(at))

    def parallel(self, op: scf.ParallelOp) -> None:
        """One thread per iteration of `op` (constant bounds)."""
        bounds = [tuple(constant_index(v) for v in vs)
                  for vs in zip(op.lowerBound, op.upperBound, op.step, strict=True)]
        if any(None in b for b in bounds) or op.initVals:
            raise LoweringError(f"convert-loops-to-gpu: @{self.function}: an scf.parallel needs "
                                "constant bounds and no reductions")
        counts = [max(0, -(-(hi - lo) // step)) for lo, hi, step in bounds]
        total = math.prod(counts)
        if total == 0:
            op.detach()
            op.erase()
            return
        body_ops = list(op.body.block.ops)[:-1]  # without scf.reduce
        external = [v for v in external_values(body_ops) if v not in op.body.block.args]
        threads = min(self.block, total)
        kernel_func, mapping, buffers, b = self._new_kernel(external, (threads, 1, 1))
        thread = _global_thread(b)
        inside = b.insert(arith.CmpiOp(thread, index(b, total), "slt")).result
        then = Block()
        t = Builder(InsertPoint.at_end(then))
        mapping.update(zip(op.body.block.args, delinearize(t, thread, bounds, counts),
                           strict=True))
        for inner in body_ops:
            t.insert(inner.clone(value_mapper=mapping))
        t.insert(scf.YieldOp())
        b.insert(scf.IfOp(inside, [], [then]))
        b.insert(gpu.ReturnOp([]))
        self._launch(kernel_func.sym_name.data, (-(-total // threads), 1, 1), (threads, 1, 1),
                     buffers, op)
        op.detach()
        op.erase()

    def serial(self, ops: list[Operation]) -> None:
        """One thread runs `ops` in order."""
        external = external_values(ops)
        here, block = set(ops), ops[0].parent_block()
        for op in ops:
            for result in op.results:
                if any(_top(use.operation, block) not in here for use in result.uses):
                    raise LoweringError(f"convert-loops-to-gpu: @{self.function}: "
                                        f"{result.type} values flow between kernels")
        kernel_func, mapping, buffers, b = self._new_kernel(external, (1, 1, 1))
        for op in ops:
            b.insert(op.clone(value_mapper=mapping))
        b.insert(gpu.ReturnOp([]))
        self._launch(kernel_func.sym_name.data, (1, 1, 1), (1, 1, 1), buffers, ops[0])
        for op in reversed(ops):
            op.detach()
            op.erase()

    def gemm(self, op: kernel.GemmOp, made: dict[str, str]) -> None:
        spec = op.spec
        if spec.bias or spec.relu:
            raise LoweringError(f"convert-loops-to-gpu: @{self.function}: the GPU's GEMM kernel "
                                "has no epilogue; lower with tape-to-loops without "
                                "gemm_epilogues (the CPU's option)")
        if not (spec.batch and spec.m and spec.n):  # nothing to write (as the interpreter)
            op.detach()
            op.erase()
            return
        name = made.get(spec.symbol)
        if name is None:
            name = made[spec.symbol] = f"{self.function}_gemm{len(made)}"
            self.kernels.add_op(gemm_kernel(name, spec, op.a.type, op.b.type, op.c.type,
                                            self.gemm_tile))
        grid, block = _gemm_grid(spec, self.gemm_tile)
        self._launch(name, grid, block, [op.a, op.b, op.c], op)
        op.detach()
        op.erase()


def _gemm_grid(spec, tile: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    return (math.prod(blocks(spec, tile)), 1, 1), (tile, tile, 1)


def _top(op: Operation, block: Block) -> Operation:
    while op.parent_block() is not block:
        op = op.parent_op()
    return op


def _global_thread(b: Builder) -> SSAValue:
    x = gpu.DimensionAttr(gpu.DimensionEnum.X)
    block = b.insert(gpu.BlockIdOp(x)).result
    size = b.insert(gpu.BlockDimOp(x)).result
    thread = b.insert(gpu.ThreadIdOp(x)).result
    return b.insert(arith.AddiOp(b.insert(arith.MuliOp(block, size)).result, thread)).result


def outline_function(f: func.FuncOp, module: ModuleOp, block: int = BLOCK,
                     gemm_tile: int = GEMM_TILE) -> gpu.ModuleOp:
    """Turn `f` (loop form) into a host function of launches; returns its kernels' module."""
    name = f.sym_name.data
    if any(not isinstance(t, MemRefType) for t in f.function_type.inputs) or (
            f.function_type.outputs.data):
        raise LoweringError(f"convert-loops-to-gpu: @{name} is not in the loop form (buffers "
                            "in, nothing returned): run tape-to-loops first, or tape-to-gpu")
    kernels = gpu.ModuleOp(StringAttr(f"{name}_kernels"), Region(Block()))
    outliner = Outliner(name, kernels.body.block, block, gemm_tile)
    body = f.body.block
    pending: list[Operation] = []
    gemms: dict[str, str] = {}

    def flush() -> None:
        if pending:
            outliner.serial(list(pending))
            pending.clear()

    for op in list(body.ops):
        if isinstance(op, arith.ConstantOp | memref.GetGlobalOp):
            continue  # cloned into (or passed to) the kernels that use it
        if isinstance(op, memref.AllocOp):
            flush()
            alloc = gpu.AllocOp(op.memref.type)
            Rewriter.replace_op(op, alloc, [alloc.result])
        elif isinstance(op, memref.DeallocOp):  # amid a serial run, it ends after its launch
            Rewriter.replace_op(op, gpu.DeallocOp(op.memref))
        elif isinstance(op, func.ReturnOp | func.CallOp):  # a call launches its own kernels
            flush()
        elif isinstance(op, scf.ParallelOp):
            flush()
            outliner.parallel(op)
        elif isinstance(op, kernel.GemmOp):
            flush()
            outliner.gemm(op, gemms)
        else:
            pending.append(op)
    for op in reversed(list(body.ops)):  # constants only the kernels read
        if isinstance(op, arith.ConstantOp) and not op.result.uses:
            op.detach()
            op.erase()
    module.body.block.insert_op_after(kernels, f)
    return kernels


def outline_module(module: ModuleOp, block: int = BLOCK, gemm_tile: int = GEMM_TILE) -> None:
    """`convert-loops-to-gpu` on every defined function of `module`, in place."""
    check_options(block, gemm_tile)
    check_no_thread_pool(module)
    functions = [op for op in module.ops if isinstance(op, func.FuncOp) and not op.is_declaration]
    for f in functions:
        outline_function(f, module, block, gemm_tile)
    module.attributes["gpu.container_module"] = UnitAttr()


def check_no_thread_pool(module: ModuleOp) -> None:
    """A LoweringError for a kernel.parallel_for: outline-parallel-loops made its loop a
    function of a range of iterations for the CPU's thread pool, which the GPU does not run
    (the function it calls is not in the loop form: it takes the range's bounds)."""
    for op in module.walk():
        if isinstance(op, kernel.ParallelForOp):
            caller = op.parent_op()
            where = f"@{caller.sym_name.data}: " if isinstance(caller, func.FuncOp) else ""
            raise LoweringError(f"convert-loops-to-gpu: {where}kernel.parallel_for "
                                f"@{op.callee.root_reference.data} runs a loop on the CPU's "
                                "thread pool (outline-parallel-loops), which the GPU does not "
                                "take: leave outline-parallel-loops out (each scf.parallel "
                                "becomes a kernel)")


@dataclass(frozen=True)
class ConvertLoopsToGPUPass(ModulePass):
    """Outline the loop form's parallel loops and GEMMs into GPU kernels (see the module doc)."""

    name = "convert-loops-to-gpu"

    block: int = BLOCK
    """Threads per block of a parallel-loop kernel."""
    gemm_tile: int = GEMM_TILE
    """The GEMM kernels' tile: tile x tile threads per block (at most 16), each computing one
    element."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        outline_module(op, self.block, self.gemm_tile)
