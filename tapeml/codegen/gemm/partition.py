"""How one GEMM call's work is shared out over threads: in parts that write disjoint parts of
C (`partition`), in groups of batches summed separately when every batch adds into one C
(`batch_groups`), or, for one large product, one packed B shared by every thread (`shares_b`).
Every choice keeps each element's sum in the same order at any thread count.
"""

from __future__ import annotations

from tapeml.codegen import pool
from tapeml.dialects.kernel import GemmSpec

Part = tuple[int, int, int, int, int, int]
"""A share of the work: batches [b0, b1), rows [m0, m1), columns [n0, n1)."""

PARALLEL_FLOPS = 1_000_000
"""Below this much work a kernel runs on the calling thread alone: the handoff to the pool's
threads costs microseconds. At 4M, W3's three products 10 wide or 10 deep (2.6 MFLOP, 50-65
us each) ran on one thread of two, 3.5% of the step; at 1M the step on two threads took
4.72/4.83 against 4.92/4.92 ms and W4's 5.74/5.76 against 5.99/5.93 (in one process, two
copies each, alternated; Zen 4), one thread the same."""


GROUPS = 8
"""Batches summed into one C are summed in up to this many groups of consecutive batches, each
into a C of its own, then the groups' sums added in order (see `batch_groups`)."""

GROUPS_BYTES = 1 << 21
"""...unless the groups' own Cs would take more than this."""


def batch_groups(spec: GemmSpec) -> int:
    """How many groups a batch-summed product (c0 = 0, a convolution's weight gradient) sums
    its batches in: the groups are parts the threads share, where a split of one small C
    would leave most threads idle. A function of the shape alone, not of the thread count, so
    every thread count adds the same numbers in the same order."""
    if spec.c0 != 0 or spec.batch < 2 or 2 * spec.batch * spec.m * spec.n * spec.k < PARALLEL_FLOPS:
        return 1
    groups = min(spec.batch, GROUPS)
    size = 4 if spec.dtype == "f32" else 8
    return groups if (groups - 1) * spec.m * spec.n * size <= GROUPS_BYTES else 1


def partition(spec: GemmSpec, mr: int, nr: int, threads: int) -> list[Part]:
    """Split the work into parts that write disjoint parts of C: batches when each batch has
    its own C (up to pool.CHUNKS parts per thread, which the threads claim as they finish, so a
    slower one takes fewer), else rows (whole MR tiles), else columns (whole NR panels), one
    part per thread. Each element's sum runs in the same order whichever part computes it."""
    whole = (0, spec.batch, 0, spec.m, 0, spec.n)
    groups = batch_groups(spec)
    if groups > 1:  # at any thread count: the order of the sums depends on it
        return [(spec.batch * g // groups, spec.batch * (g + 1) // groups, 0, spec.m, 0, spec.n)
                for g in range(groups)]
    if threads < 2 or 2 * spec.batch * spec.m * spec.n * spec.k < PARALLEL_FLOPS:
        return [whole]

    def cut(size: int, align: int, parts: int = threads) -> list[tuple[int, int]]:
        step = -(-size // parts)
        step = -(-step // align) * align
        return [(lo, min(lo + step, size)) for lo in range(0, size, step)]

    if spec.c0 and spec.batch >= threads:
        return [(b0, b1, 0, spec.m, 0, spec.n)
                for b0, b1 in cut(spec.batch, 1, min(spec.batch, pool.CHUNKS * threads))]
    if spec.m >= spec.n:
        return [(0, spec.batch, m0, m1, 0, spec.n) for m0, m1 in cut(spec.m, mr)]
    return [(0, spec.batch, 0, spec.m, n0, n1) for n0, n1 in cut(spec.n, nr)]


SHARE_B_THREADS = 3
"""From this many threads on, one product packs B once for all (`shares_b`). On two, a split
of C in which each thread packs what it needs costs less than the handoff between the packing
job and the rows job: interleaved in one process on an AVX-512 Xeon with 2 cores, matmul
n=1024 288 -> 308 GFLOP/s, n=512 -5% time, W3's step 3.93 -> 3.73 ms and the GPT step's (2
layers) 21.0 -> 20.3 ms; m < n products gain most (256x784x512 208 -> 244 GFLOP/s, the
columns split: each thread packs its half of B). The same bits either way."""


def shares_b(spec: GemmSpec, mr: int, threads: int) -> bool:
    """One product worth threads (not batches of them), on SHARE_B_THREADS or more: each block
    of B is packed once, the threads packing its panels together, and then each takes rows of
    C, packing its own A. (A split of C alone has every thread pack all of B, or all of A.)"""
    return (threads >= SHARE_B_THREADS and spec.batch == 1 and -(-spec.m // mr) >= threads
            and 2 * spec.m * spec.n * spec.k >= PARALLEL_FLOPS)
