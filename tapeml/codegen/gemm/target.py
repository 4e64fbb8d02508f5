"""What a GEMM kernel is tuned for: the host's vector unit and thread count (`Target`,
`host_threads`), and the tile shape that follows from them (`tiles`: lanes, MR, NR; `KC`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tapeml.codegen import pool
from tapeml.dialects.kernel import GemmSpec

KC = 256
"""Depth of one packed block of k (`Target.kc`'s default): an NR-wide panel of B (KC * NR
elements) fits in L1."""

ZEN4_KC = 512
"""`Target.kc` on AMD Zen 4: there a panel of B need not stay in L1 (its L2 feeds the tile as
fast), and a deeper block passes over C fewer times. Against 256, calls alternated in blocks
of five in one process, one core: W2 n=1024 94-98 -> 101-105 GFLOP/s, n=512 96-100 -> 99-101,
ResNet-50 at batch 1 83.7-83.8 -> 82.6-82.8 ms, W4 0.6% faster, W3 and the GPT step the
same. (Calls alternated one by one, each from caches the other filled, showed the same
direction.) On an AVX-512 Xeon 384 ran as 256 and 192 3-9% slower; 512 not measured there."""


@dataclass(frozen=True)
class Target:
    """The host's vector unit, as far as the kernel cares."""

    vector_bits: int
    registers: int
    threads: int = 1
    """Threads one kernel call may use (it splits its work when there is enough of it)."""
    kc: int = KC
    """The depth of a packed block of k (KC; ZEN4_KC on Zen 4)."""
    panel_vectors: int = 2
    """Vectors across a tile's NR columns when n allows. AMD Zen 4 runs a 512-bit FMA as two
    256-bit halves: there a 16x16 tile ran 3-10% faster than 14x32 on most of W2's and W3's
    GEMM shapes alone (n=512 the same), and the W4 step 3.5% faster (W3's the same; one-process
    A/Bs). Intel's AVX-512 cores measured best at 14x32
    (../shared/reference/cpu-codegen-measurements.md)."""
    weight_runs: bool = True
    """A wide convolution weight gradient as products over runs of whole images (tape-to-loops'
    option, which the CPU backend sets from this): on an AVX-512 Xeon W4's 16 -> 32 weight
    gradient 3.3 -> 2.1 ms that way; on Zen 4 a product per image ran it in 2.6 ms against
    3.6-4.2 over runs (W4's step 13.5 -> 12.7 ms, one core, alternating processes)."""

    @staticmethod
    def host() -> Target:
        import llvmlite.binding as llvm

        features = {k for k, v in llvm.get_host_cpu_features().items() if v}
        threads = host_threads()
        if "avx512f" in features:
            zen4 = llvm.get_host_cpu_name() == "znver4"
            return Target(512, 32, threads, ZEN4_KC if zen4 else KC, 1 if zen4 else 2,
                          weight_runs=not zen4)
        if "avx" in features:
            return Target(256, 16, threads)
        return Target(128, 16, threads)


_compiling = threading.local()


@contextmanager
def compiled_for_threads(threads: int) -> Iterator[None]:
    """`host_threads()` is `threads` in this thread meanwhile: a program compiled to run on
    one thread of several, beside its other pieces (tapeml/codegen/split.py)."""
    before = getattr(_compiling, "threads", None)
    _compiling.threads = threads
    try:
        yield
    finally:
        _compiling.threads = before


def host_threads() -> int:
    """TAPEML_NUM_THREADS if set (1: single-threaded, for measuring), else the cores this
    process may run on; 1 on a platform the thread pool does not run on (it warns, once).
    Inside `compiled_for_threads(k)`: k."""
    if (forced := getattr(_compiling, "threads", None)) is not None:
        return forced
    value = os.environ.get("TAPEML_NUM_THREADS")
    if value is not None and (not value.isdigit() or int(value) < 1):
        raise ValueError(f"TAPEML_NUM_THREADS must be a positive integer, got {value!r}")
    if not pool.host().threaded:
        return 1
    if value is not None:
        return int(value)
    return cores()


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1



def tiles(spec: GemmSpec, target: Target) -> tuple[int, int, int]:
    """(lanes, MR, NR). NR is `target.panel_vectors` vectors wide, however narrow C is (its
    edge columns are masked): a narrow product (a classifier's 10 outputs, a 3x3 filter's 9
    taps) then shares its kernel with the wide ones, one compile fewer, and W3's and W4's
    steps ran the same as with a one-vector tile for them (A/B in alternating processes on an
    AVX-512 Xeon: 5.8-5.9 and 11.2-11.5 ms either way). MR rows use most
    of the registers (MR * NR/lanes accumulators, the B vectors and a broadcast) unless the
    tiles would then pad C's rows by more than a twentieth: then C's rows take the height,
    of the two around half of that and that one (HEIGHTS), that pads them least (a
    convolution's 64 or 128 out channels: 8, where 14 padded them by 9%; 49 pixels: 7), so
    a program calls at most three heights (and those of products of at most MR rows, each
    its own), each a module of tiles beside the one kernel (Variant). A tile of 8 rows runs
    at 172 GFLOP/s where one of 14 runs at 177 (the micro-kernel alone, A from L2, AVX-512
    Xeon). Against a tenth and every height from half to MR, one core, alternating
    processes: squeezenet 7.25-7.31 -> 6.97-7.01 ms (and a height fewer: its 48 channels
    took one of 12), the GPT step (2 layers) 35.6-35.9 -> 34.6-35.1 ms, W4 and ResNet-50 the
    same (W4's heights the same two; ResNet-50's 64 and 128 channels a height of 8 more). A
    twentieth and every height from half to MR compiled W4 a kernel of 12 for its 144 rows:
    its first call 0.22 s longer (before a height was a module of tiles of its own)."""
    lanes = target.vector_bits // (32 if spec.dtype == "f32" else 64)
    vectors = target.panel_vectors
    wide = target.registers >= 32
    most = (14 if wide else 6) if vectors == 2 else (16 if wide else 8)
    m = max(spec.m, 1)
    if m <= most:
        return lanes, m, vectors * lanes
    padded = -(-m // most) * most
    if padded - m <= m // 20:
        return lanes, most, vectors * lanes
    mr = min(heights(most), key=lambda r: (-(-m // r) * r, -r))
    return lanes, mr, vectors * lanes


def heights(most: int) -> tuple[int, ...]:
    """The tile heights a product of more than `most` rows may take (`tiles`)."""
    return (most, most // 2 + 1, max(1, most // 2))

