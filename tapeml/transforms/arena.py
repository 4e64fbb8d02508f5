"""`plan-arena`: the intermediates of a loop-form function become views of one arena, a byte
buffer its caller passes as a last argument, placed first-fit by their live ranges.

    %t = memref.alloc() : memref<4096xf32>          %c = arith.constant 16384 : index
    ...                                      ->     %t = memref.view %arena[%c][]
    memref.dealloc %t : memref<4096xf32>                   : memref<40960xi8> to memref<4096xf32>

A buffer is live from its `memref.alloc` to its `memref.dealloc` (tape-to-loops frees each
after its last use), so two buffers share bytes only when one is dead before the other is
made. The CPU backend allocates the arena once per compiled program and reuses it every call:
no allocation, no page faults and no returning memory to the system in the middle of a step
(glibc hands large freed blocks back, and the next call faults them in again, page by page).
Functions that `kernel.parallel_for` calls are left alone: they allocate nothing.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from xdsl.context import Context
from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    IndexType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    i8,
)
from xdsl.passes import ModulePass

from tapeml.dialects import kernel

INDEX = IndexType()

ALIGN = 64
"""Every buffer starts on a cache line (and on a 512-bit vector)."""


@dataclass
class FirstFit:
    """Offsets for buffers that come and go: each new one at the lowest offset (a multiple of
    `align`) where it fits between the live ones. `size` is the bytes the arena needs."""

    align: int
    live: dict[Any, tuple[int, int]] = field(default_factory=dict)
    size: int = 0
    _by_start: list[tuple[int, int]] = field(default_factory=list)
    """The live buffers' (start, length), in order (equal pairs are interchangeable)."""

    def place(self, key: Any, nbytes: int) -> int:
        nbytes = -(-nbytes // self.align) * self.align
        offset = 0
        for start, length in self._by_start:
            if offset + nbytes <= start:
                break
            offset = max(offset, start + length)
        self.live[key] = (offset, nbytes)
        bisect.insort(self._by_start, (offset, nbytes))
        self.size = max(self.size, offset + nbytes)
        return offset

    def free(self, key: Any) -> None:
        entry = self.live.pop(key)
        del self._by_start[bisect.bisect_left(self._by_start, entry)]


def element_bytes(t: Any) -> int:
    """Bytes one element takes in memory (an i1 takes a byte, as LLVM stores it)."""
    return (t.bitwidth + 7) // 8


def plan_arena(f: func.FuncOp) -> int:
    """Rewrite `f`'s top-level allocations as views of a new last argument, `%arena`; its
    bytes. Allocations inside loops (none today) would stay allocations."""
    block = f.body.block
    arena = FirstFit(ALIGN)
    offsets: dict[memref.AllocOp, int] = {}
    deallocs: list[memref.DeallocOp] = []
    for op in block.ops:
        if isinstance(op, memref.AllocOp) and not op.dynamic_sizes:
            kind = op.memref.type
            offsets[op] = arena.place(op, kind.get_shape()[0] * element_bytes(kind.element_type))
        elif isinstance(op, memref.DeallocOp) and op.memref.owner in offsets:
            arena.free(op.memref.owner)
            deallocs.append(op)
    arg = block.insert_arg(MemRefType(i8, [arena.size]), len(block.args))
    arg.name_hint = "arena"
    for op, offset in offsets.items():  # (built with `create`: a fifth of the time)
        shift = arith.ConstantOp.create(result_types=[INDEX],
                                        properties={"value": IntegerAttr(offset, INDEX)})
        view = memref.ViewOp.create(operands=[arg, shift.result],
                                    result_types=[op.memref.type])
        block.insert_ops_before([shift, view], op)
        view.result.name_hint = op.memref.name_hint
        op.memref.replace_all_uses_with(view.result)
        block.erase_op(op)
    for op in deallocs:
        block.erase_op(op)
    f.function_type = FunctionType.from_lists([a.type for a in block.args],
                                              list(f.function_type.outputs))
    if f.arg_attrs is not None:
        name = DictionaryAttr({"tapeml.name": StringAttr("arena")})
        f.arg_attrs = ArrayAttr([*f.arg_attrs, name])
    return arena.size


def plan_module(module: ModuleOp) -> dict[str, int]:
    """`plan_arena` on every function the host calls (not the thread pool's parts, nor the
    functions the host function calls: they take its buffers); each one's arena bytes, by
    name."""
    callees = {op.callee.root_reference.data for op in module.walk()
               if isinstance(op, kernel.ParallelForOp | func.CallOp)}
    return {f.sym_name.data: plan_arena(f) for f in list(module.ops)
            if isinstance(f, func.FuncOp) and not f.is_declaration
            and f.sym_name.data not in callees}


@dataclass(frozen=True)
class PlanArenaPass(ModulePass):
    """Intermediates as views of one arena argument, placed by live range (see the module
    doc)."""

    name = "plan-arena"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.run(op)

    def run(self, module: ModuleOp) -> ArenaPlan:
        return ArenaPlan(plan_module(module))


@dataclass(frozen=True)
class ArenaPlan:
    """Each host function's arena bytes, by name."""

    sizes: dict[str, int]

    def __str__(self) -> str:
        return "; ".join(f"one arena of {n:,} bytes for the intermediates"
                         + (f" of @{name}" if len(self.sizes) > 1 else "")
                         for name, n in self.sizes.items())
