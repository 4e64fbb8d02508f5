"""The CPU's matmul kernels: BLIS-style GEMM written out as LLVM IR, shape-generic.

`kernel.gemm` (tapeml/dialects/kernel.py) becomes a call to a function whose name spells its
`GemmSpec`, the *caller* (`caller(spec, target)`): its plan (plan.py: the call's sizes,
strides, and how its work is shared out over threads), its scratch, and a call of the
*kernel* its `Variant` names (`kernel(variant)`). A variant is what changes the code: the
element type, the register tile, and whether each operand's inner stride is 1 (the kernel
packs an operand along its rows or down its columns, whichever the call's strides favour, so
a product and its transposes share it); a program with forty matmul shapes calls a handful
of them, each compiled once per
process (and kept in the disk cache) by the CPU backend. A kernel computes, for b < batch,

    C[b] (+)= A[b] @ B[b],  A[b][i, p] = A[b*a0 + i*a1 + p*a2],  B[b][p, j] = B[b*b0 + p*b1 + j*b2]

with C[b] a contiguous m x n block at C + b*c0 (c0 = 0: every batch adds into one C).
A transposed operand is only other strides: packing reads it either way.

The loop nest (Goto/BLIS; measured in ../shared/reference/cpu-codegen-measurements.md):

    for pc in 0..k step KC:                         B[pc:pc+KC, :] packed as [n/NR][KC][NR]
        for ic in 0..m step MC:                     A[ic:ic+MC, pc:pc+KC] packed as [MC/MR][KC][MR]
            for jr in 0..n step NR:                 one KC x NR panel of B stays in L1
                for ir in 0..MC step MR:            the micro-kernel: an MR x NR tile of C in
                                                    MR * NR / lanes vector registers, one FMA
                                                    per register per k

The packed panels are zero-padded at the n edge and clamp rows at the m edge, so the
micro-kernel always runs a full tile; an edge tile is written through a small stack tile.
Every element of C sums its k products in the same order whatever the tiling (each tile owns
its elements; blocks of KC are added in order), so results do not depend on threads.

A caller packs into `@<symbol>.scratch`, a buffer of `@<symbol>.scratch_bytes` bytes (a
multiple of 64; 0: the call packs nothing) that whoever loads it allocates, 64-aligned, and
points it at before the first call (`tapeml.codegen.cpu.bind_scratch`: a numpy buffer, so
running out of memory is a MemoryError there, not an abort in the JIT's loader), and keeps as
long as the code: no allocation and no page faults per call. A call that finds it taken
packs into the heap; where the heap has no room, it waits for the scratch.

The package, in the order a call runs through it:

    target.py     Target (the host's vector unit and threads), host_threads(), tiles(): the
                  MR x NR register tile and KC, the depth of a packed block
    partition.py  how one call's work is shared out over threads: partition(), batch_groups(),
                  shares_b(), PARALLEL_FLOPS
    plan.py       Variant (what a kernel's code depends on), variant(), plan(): the table of
                  one call's sizes, strides and parts
    writer.py     Writer: LLVM IR text with fresh value names and counted loops
    routines.py   the leaf functions: the micro-kernel (`.tile`) and the packing of A and B
    driver.py     the entry point (taking the scratch, handing parts to the thread pool) and
                  the loop nest over one part (`.part`, `.range`, `.pack`, `.rows`)
"""

from __future__ import annotations

from tapeml.codegen.gemm.driver import driver
from tapeml.codegen.gemm.partition import PARALLEL_FLOPS, batch_groups, partition, shares_b
from tapeml.codegen.gemm.plan import INDEX, Variant, plan, variant
from tapeml.codegen.gemm.routines import micro_kernel, pack_a, pack_b
from tapeml.codegen.gemm.target import Target, host_threads, tiles
from tapeml.codegen.gemm.writer import scalar_loops
from tapeml.dialects.kernel import GemmSpec

__all__ = ["PARALLEL_FLOPS", "GemmSpec", "Target", "Variant", "batch_groups", "caller",
           "definition", "host_threads", "kernel", "partition", "shares_b", "tiles", "variant"]


def kernel(v: Variant) -> str:
    """The LLVM IR module defining the kernel `v.symbol` (and its internal helpers)."""
    t = v.element[0]
    vec = f"<{v.lanes} x {t}>"
    name = v.symbol
    out = [f"; {name}: C (+)= A @ B, BLIS-style, {v.mr}x{v.nr} register tile of {vec}",
           "declare i64 @llvm.smin.i64(i64, i64)",
           f"declare {vec} @llvm.fma.v{v.lanes}{v.dtype}({vec}, {vec}, {vec})",
           *(line for width in sorted({v.lanes, v.nr}) for line in _masked(width, t, v.dtype)),
           "declare ptr @aligned_alloc(i64, i64)", "declare void @free(ptr)",
           "declare i32 @sched_yield()",
           "declare void @tapeml_parallel_for(ptr, ptr, i64, i64)",
           ""]
    out += micro_kernel(name, t, vec, v.lanes, v.mr, v.nr, v.dtype)
    out += micro_kernel(name, t, vec, v.lanes, v.mr, v.nr, v.dtype, direct=True)
    out += pack_b(name, t, v)
    out += pack_a(name, t, v)
    out += driver(v)
    return scalar_loops("\n".join(out) + "\n")


def _masked(lanes: int, t: str, dtype: str) -> list[str]:
    vec, mask = f"<{lanes} x {t}>", f"<{lanes} x i1>"
    return [f"declare {vec} @llvm.masked.load.v{lanes}{dtype}.p0(ptr, i32, {mask}, {vec})",
            f"declare void @llvm.masked.store.v{lanes}{dtype}.p0({vec}, ptr, i32, {mask})"]


def caller(spec: GemmSpec, target: Target, declare: bool = True) -> str:
    """The LLVM IR module defining `spec.symbol(A, B, C)`: the kernel of its variant, called
    with the plan of `spec` and a scratch of its own (the package doc); `declare`: the kernel
    is declared (defined elsewhere: another module, another engine)."""
    name, v = spec.symbol, variant(spec, target)
    table = plan(spec, target)
    values = ", ".join(f"i64 {x}" for x in table)
    out = [f"; {name}: a call of {v.symbol}",
           f"@{name}.busy = internal global i8 0",
           f"@{name}.scratch = global ptr null, align 8  ; set by the loader",
           f"@{name}.scratch_bytes = constant i64 {table[INDEX['total']]}",
           f"@{name}.plan = internal constant [{len(table)} x i64] [{values}]"]
    if declare:
        out.append(f"declare void @{v.symbol}(ptr, ptr, ptr, ptr, ptr, ptr)")
    out += [f"define void @{name}(ptr noalias %A, ptr noalias %B, ptr noalias %C) {{",
            f"  call void @{v.symbol}(ptr %A, ptr %B, ptr %C, ptr @{name}.plan, "
            f"ptr @{name}.scratch, ptr @{name}.busy)",
            "  ret void", "}"]
    return "\n".join(out) + "\n"


def definition(spec: GemmSpec, target: Target) -> str:
    """One LLVM IR module defining `spec.symbol` and the kernel it calls."""
    return kernel(variant(spec, target)) + "\n" + caller(spec, target, declare=False)
