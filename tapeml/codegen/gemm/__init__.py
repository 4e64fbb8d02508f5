"""The CPU's matmul kernel: BLIS-style GEMM written out as LLVM IR for one static shape.

`kernel.gemm` (tapeml/dialects/kernel.py) becomes a call to a function whose name spells its
`GemmSpec`; `definition(spec, target)` writes that function. It computes, for b < batch,

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

A kernel packs into `@<symbol>.scratch`, a buffer of `@<symbol>.scratch_bytes` bytes (a multiple
of 64; 0: the kernel packs nothing) that whoever loads the kernel allocates, 64-aligned, and
points it at before the first call (`tapeml.codegen.cpu.bind_scratch`: a numpy buffer, so
running out of memory is a MemoryError there, not an abort in the JIT's loader), and keeps as
long as the kernel: no allocation and no page faults per call. A caller that finds it taken
packs into the heap; where the heap has no room, it waits for the scratch.

The package, in the order a call runs through it:

    target.py     Target (the host's vector unit and threads), host_threads(), tiles(): the
                  MR x NR register tile and KC, the depth of a packed block
    partition.py  how one call's work is shared out over threads: partition(), batch_groups(),
                  shares_b(), PARALLEL_FLOPS
    writer.py     Writer: LLVM IR text with fresh value names and counted loops
    routines.py   the leaf functions: the micro-kernel (`.tile`) and the packing of A and B
    driver.py     the entry point (taking the scratch, handing parts to the thread pool) and
                  the loop nest over one part (`.part`, `.range`, `.pack`, `.rows`)

`definition` (here) puts one kernel's functions together into one LLVM IR module.
"""

from __future__ import annotations

from tapeml.codegen.gemm.driver import driver
from tapeml.codegen.gemm.partition import PARALLEL_FLOPS, batch_groups, partition, shares_b
from tapeml.codegen.gemm.routines import micro_kernel, pack_a, pack_b
from tapeml.codegen.gemm.target import KC, Target, host_threads, tiles
from tapeml.dialects.kernel import GemmSpec

__all__ = ["PARALLEL_FLOPS", "GemmSpec", "Target", "batch_groups", "definition", "host_threads",
           "partition", "shares_b", "tiles"]


def definition(spec: GemmSpec, target: Target) -> str:
    """The LLVM IR module defining `spec.symbol` (and its internal helpers)."""
    t = "float" if spec.dtype == "f32" else "double"
    size = 4 if spec.dtype == "f32" else 8
    lanes, mr, nr = tiles(spec, target)
    mc = mr * max(1, 140 // mr)
    kc = min(KC, max(spec.k, 1))
    vec = f"<{lanes} x {t}>"
    name = spec.symbol
    out = [f"; {name}: C (+)= A @ B, BLIS-style, {mr}x{nr} register tile of {vec}",
           "declare i64 @llvm.smin.i64(i64, i64)",
           f"declare {vec} @llvm.fma.v{lanes}{spec.dtype}({vec}, {vec}, {vec})",
           "declare ptr @aligned_alloc(i64, i64)", "declare void @free(ptr)",
           "declare i32 @sched_yield()",
           "declare void @tapeml_parallel_for(ptr, ptr, i64, i64)",
           ""]
    out += micro_kernel(name, t, vec, lanes, mr, nr, spec.dtype)
    out += pack_b(name, t, spec, nr)
    out += pack_a(name, t, spec, mr)
    out += driver(name, t, size, spec, mr, nr, mc, kc, target.threads)
    return "\n".join(out) + "\n"
