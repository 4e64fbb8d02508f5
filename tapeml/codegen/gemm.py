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
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tapeml.codegen import pool
from tapeml.dialects.kernel import GemmSpec

_WIDE = '"prefer-vector-width"="512"'  # the host tunings prefer 256 bits; packing loops want 512

KC = 256
"""Depth of one packed block: an NR-wide panel of B (KC * NR elements) fits in L1."""


@dataclass(frozen=True)
class Target:
    """The host's vector unit, as far as the kernel cares."""

    vector_bits: int
    registers: int
    threads: int = 1
    """Threads one kernel call may use (it splits its work when there is enough of it)."""
    panel_vectors: int = 2
    """Vectors across a tile's NR columns when n allows. AMD Zen 4 runs a 512-bit FMA as two
    256-bit halves: there a 16x16 tile ran 3-10% faster than 14x32 on most of W2's and W3's
    GEMM shapes alone (n=512 the same), and the W4 step 3.5% faster (W3's the same; one-process
    A/Bs). Intel's AVX-512 cores measured best at 14x32
    (../shared/reference/cpu-codegen-measurements.md)."""

    @staticmethod
    def host() -> Target:
        import llvmlite.binding as llvm

        features = {k for k, v in llvm.get_host_cpu_features().items() if v}
        threads = host_threads()
        if "avx512f" in features:
            return Target(512, 32, threads, 1 if llvm.get_host_cpu_name() == "znver4" else 2)
        if "avx" in features:
            return Target(256, 16, threads)
        return Target(128, 16, threads)


def host_threads() -> int:
    """TAPEML_NUM_THREADS if set (1: single-threaded, for measuring), else the cores this
    process may run on; 1 on a platform the thread pool does not run on (it warns, once)."""
    value = os.environ.get("TAPEML_NUM_THREADS")
    if value is not None and (not value.isdigit() or int(value) < 1):
        raise ValueError(f"TAPEML_NUM_THREADS must be a positive integer, got {value!r}")
    if not pool.host().threaded:
        return 1
    if value is not None:
        return int(value)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


class _Writer:
    """LLVM IR text with fresh value names and the current block's label (for phis)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0
        self.block = "entry"

    def fresh(self, hint: str = "t") -> str:
        self.count += 1
        return f"%{hint}{self.count}"

    def __call__(self, text: str, hint: str = "t") -> str:
        name = self.fresh(hint)
        self.lines.append(f"  {name} = {text}")
        return name

    def do(self, text: str) -> None:
        self.lines.append(f"  {text}")

    def label(self, name: str) -> None:
        self.lines.append(f"{name[1:]}:")
        self.block = name

    def loop(self, start: str, end: str, step: int, body, hint: str = "i") -> None:
        """for iv in range(start, end, step): body(iv) -- i64 values, end exclusive."""
        head, inner, latch, done = (self.fresh(f"{hint}.{s}") for s in
                                    ("head", "body", "latch", "done"))
        before = self.block
        self.do(f"br label {head}")
        self.label(head)
        iv = self.fresh(hint)
        nxt = self.fresh(f"{hint}.next")
        self.do(f"{iv} = phi i64 [ {start}, {before} ], [ {nxt}, {latch} ]")
        more = self(f"icmp slt i64 {iv}, {end}")
        self.do(f"br i1 {more}, label {inner}, label {done}")
        self.label(inner)
        body(iv)
        self.do(f"br label {latch}")
        self.label(latch)
        self.do(f"{nxt} = add i64 {iv}, {step}")
        self.do(f"br label {head}")
        self.label(done)

    def min(self, a: str, b: str) -> str:
        return self(f"call i64 @llvm.smin.i64(i64 {a}, i64 {b})")

    def add(self, a: str, b: str) -> str:
        return self(f"add i64 {a}, {b}")

    def packed(self, index: str, p: str, width: int) -> str:
        """Where element (index, p) of a panel-packed block lies: [index / width][p][index %
        width], panels of %kc * width elements."""
        panel = self(f"sdiv i64 {index}, {width}")
        lane = self(f"srem i64 {index}, {width}")
        start = self(f"mul i64 {panel}, {self(f'mul i64 %kc, {width}')}")
        return self.add(start, self.add(self(f"mul i64 {p}, {width}"), lane))

    def gep(self, t: str, base: str, offset: str) -> str:
        return self(f"getelementptr inbounds {t}, ptr {base}, i64 {offset}", "p")


def tiles(spec: GemmSpec, target: Target) -> tuple[int, int, int]:
    """(lanes, MR, NR). NR is `target.panel_vectors` vectors wide, or one when C is that
    narrow. MR rows use most
    of the registers (MR * NR/lanes accumulators, the B vectors and a broadcast) unless the
    tiles would then pad C's rows by more than a tenth: a small m (the out channels of a
    convolution) gets the tile height that wastes the fewest rows."""
    lanes = target.vector_bits // (32 if spec.dtype == "f32" else 64)
    vectors = 1 if spec.n <= lanes else target.panel_vectors
    wide = target.registers >= 32
    most = (14 if wide else 6) if vectors == 2 else (16 if wide else 8)
    m = max(spec.m, 1)
    if m <= most:
        return lanes, m, vectors * lanes
    padded = -(-m // most) * most
    if padded - m <= m // 10:
        return lanes, most, vectors * lanes
    mr = min(range(max(1, most // 2), most + 1), key=lambda r: (-(-m // r) * r, -r))
    return lanes, mr, vectors * lanes


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
    out += _micro_kernel(name, t, vec, lanes, mr, nr, spec.dtype)
    out += _pack_b(name, t, spec, nr)
    out += _pack_a(name, t, spec, mr)
    out += _driver(name, t, size, spec, mr, nr, mc, kc, target.threads)
    return "\n".join(out) + "\n"


def _micro_kernel(name: str, t: str, vec: str, lanes: int, mr: int, nr: int,
                  dtype: str) -> list[str]:
    """C[mr x nr tile] (+)= Ap[kc][MR]^T Bp[kc][NR], accumulated in registers."""
    w = _Writer()
    vectors = nr // lanes
    acc = [[f"%c{i}.{v}" for v in range(vectors)] for i in range(mr)]
    new = [[f"%c{i}.{v}.n" for v in range(vectors)] for i in range(mr)]
    w.lines.append(f"define internal void @{name}.tile(i64 %kc, ptr noalias align 64 %a, "
                   f"ptr noalias align 64 %b, ptr noalias %c, i64 %ldc, i64 %mr, i64 %nr, "
                   f"i1 %load) {_WIDE} {{")
    w.label("%entry")
    w.do(f"%tile = alloca [{mr * nr} x {t}], align 64")
    w.do("br label %head")
    w.label("%head")
    w.do("%k = phi i64 [ 0, %entry ], [ %k.next, %body ]")
    for i in range(mr):
        for v in range(vectors):
            w.do(f"{acc[i][v]} = phi {vec} [ zeroinitializer, %entry ], [ {new[i][v]}, %body ]")
    w.do("%more = icmp slt i64 %k, %kc")
    w.do("br i1 %more, label %body, label %store")
    w.label("%body")
    bp = w.gep(t, "%b", w(f"mul i64 %k, {nr}"))
    bs = []
    for v in range(vectors):
        p = bp if v == 0 else w.gep(t, bp, str(v * lanes))
        bs.append(w(f"load {vec}, ptr {p}, align 64", "b"))
    ap = w.gep(t, "%a", w(f"mul i64 %k, {mr}"))
    for i in range(mr):
        p = ap if i == 0 else w.gep(t, ap, str(i))
        x = w(f"load {t}, ptr {p}, align {4 if t == 'float' else 8}", "a")
        one = w(f"insertelement {vec} poison, {t} {x}, i64 0")
        splat = w(f"shufflevector {vec} {one}, {vec} poison, <{lanes} x i32> zeroinitializer")
        for v in range(vectors):
            w.do(f"{new[i][v]} = call {vec} @llvm.fma.v{lanes}{dtype}({vec} {splat}, "
                 f"{vec} {bs[v]}, {vec} {acc[i][v]})")
    w.do("%k.next = add i64 %k, 1")
    w.do("br label %head")
    w.label("%store")
    full_m = w(f"icmp eq i64 %mr, {mr}")
    full_n = w(f"icmp eq i64 %nr, {nr}")
    full = w(f"and i1 {full_m}, {full_n}")
    w.do(f"br i1 {full}, label %full, label %edge")
    w.label("%full")  # straight into C (rows of C need not be aligned)
    for i in range(mr):
        row = w.gep(t, "%c", w(f"mul i64 %ldc, {i}"))
        for v in range(vectors):
            p = row if v == 0 else w.gep(t, row, str(v * lanes))
            old = w(f"load {vec}, ptr {p}, align {4 if t == 'float' else 8}")
            total = w(f"fadd {vec} {old}, {acc[i][v]}")
            value = w(f"select i1 %load, {vec} {total}, {vec} {acc[i][v]}")
            w.do(f"store {vec} {value}, ptr {p}, align {4 if t == 'float' else 8}")
    w.do("ret void")
    w.label("%edge")  # through the stack tile, then the mr x nr corner of it into C
    for i in range(mr):
        for v in range(vectors):
            p = w.gep(t, "%tile", str(i * nr + v * lanes))
            w.do(f"store {vec} {acc[i][v]}, ptr {p}, align 64")

    def row(i: str) -> None:
        src = w.gep(t, "%tile", w(f"mul i64 {i}, {nr}"))
        dst = w.gep(t, "%c", w(f"mul i64 {i}, %ldc"))

        def column(j: str) -> None:
            x = w(f"load {t}, ptr {w.gep(t, src, j)}")
            q = w.gep(t, dst, j)
            old = w(f"load {t}, ptr {q}")
            total = w(f"fadd {t} {old}, {x}")
            w.do(f"store {t} {w(f'select i1 %load, {t} {total}, {t} {x}')}, ptr {q}")

        w.loop("0", "%nr", 1, column, "j")

    w.loop("0", "%mr", 1, row, "i")
    w.do("ret void")
    w.lines.append("}")
    return [*w.lines, ""]


def _pack_b(name: str, t: str, spec: GemmSpec, nr: int) -> list[str]:
    """Bp[jj / NR][p][jj % NR] = B[pc + p, j0 + jj] for p < kc and j0 + jj < j1, zero past j1
    up to a whole panel."""
    w = _Writer()
    _, b1, b2 = spec.b
    w.lines.append(f"define internal void @{name}.pack_b(ptr noalias %src, ptr noalias align 64 "
                   f"%dst, i64 %pc, i64 %kc, i64 %j0, i64 %j1) {_WIDE} {{")
    w.label("%entry")

    def element(p: str, j: str) -> None:
        at = w.packed(w(f"sub i64 {j}, %j0"), p, nr)
        row = w(f"add i64 %pc, {p}")
        src = w.add(w(f"mul i64 {row}, {b1}"), w(f"mul i64 {j}, {b2}"))
        x = w(f"load {t}, ptr {w.gep(t, '%src', src)}")
        w.do(f"store {t} {x}, ptr {w.gep(t, '%dst', at)}")

    if b2 <= b1:  # rows of B are contiguous (or nearly): stream them
        w.loop("0", "%kc", 1, lambda p: w.loop("%j0", "%j1", 1, lambda j: element(p, j), "j"),
               "p")
    else:  # a transposed B: read down its columns
        w.loop("%j0", "%j1", 1, lambda j: w.loop("0", "%kc", 1, lambda p: element(p, j), "p"),
               "j")
    width = w("sub i64 %j1, %j0")
    rounded = w(f"add i64 {width}, {nr - 1}")
    padded = w(f"mul i64 {w(f'sdiv i64 {rounded}, {nr}')}, {nr}")

    def zero(p: str, jj: str) -> None:
        w.do(f"store {t} 0.0, ptr {w.gep(t, '%dst', w.packed(jj, p, nr))}")

    w.loop("0", "%kc", 1, lambda p: w.loop(width, padded, 1, lambda jj: zero(p, jj), "z"), "q")
    w.do("ret void")
    w.lines.append("}")
    return [*w.lines, ""]


def _pack_a(name: str, t: str, spec: GemmSpec, mr: int) -> list[str]:
    """Ap[i / MR][p][i % MR] = A[min(ic + i, m - 1), pc + p] for i < mc rounded up to MR."""
    w = _Writer()
    _, a1, a2 = spec.a
    w.lines.append(f"define internal void @{name}.pack_a(ptr noalias %src, ptr noalias align 64 "
                   f"%dst, i64 %ic, i64 %mc, i64 %pc, i64 %kc) {_WIDE} {{")
    w.label("%entry")
    rounded = w(f"add i64 %mc, {mr - 1}")
    rows = w(f"mul i64 {w(f'sdiv i64 {rounded}, {mr}')}, {mr}")

    def element(i: str, p: str) -> None:
        at = w.packed(i, p, mr)
        row = w.min(w(f"add i64 %ic, {i}"), str(spec.m - 1))
        column = w(f"add i64 %pc, {p}")
        src = w.add(w(f"mul i64 {row}, {a1}"), w(f"mul i64 {column}, {a2}"))
        x = w(f"load {t}, ptr {w.gep(t, '%src', src)}")
        w.do(f"store {t} {x}, ptr {w.gep(t, '%dst', at)}")

    if a2 <= a1:  # rows of A are contiguous: read along them
        w.loop("0", rows, 1, lambda i: w.loop("0", "%kc", 1, lambda p: element(i, p), "p"), "i")
    else:
        w.loop("0", "%kc", 1, lambda p: w.loop("0", rows, 1, lambda i: element(i, p), "i"), "p")
    w.do("ret void")
    w.lines.append("}")
    return [*w.lines, ""]


Part = tuple[int, int, int, int, int, int]
"""A share of the work: batches [b0, b1), rows [m0, m1), columns [n0, n1)."""

PARALLEL_FLOPS = 4_000_000
"""Below this much work a kernel runs on the calling thread alone: the handoff to the pool's
threads costs microseconds."""


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


_PART_ARGS = "ptr %A, ptr %B, ptr %C, i64 %b0, i64 %b1, i64 %m0, i64 %m1, i64 %n0, i64 %n1"


def _scratch_bytes(size: int, spec: GemmSpec, mr: int, nr: int, mc: int, kc: int
                   ) -> tuple[int, int]:
    """Bytes of one part's packing buffers: B's block ([n/NR][KC][NR]), then A's; each a
    multiple of 64."""
    b_bytes = -(-spec.n // nr) * nr * kc * size
    a_bytes = mc * kc * size
    return -(-b_bytes // 64) * 64, -(-a_bytes // 64) * 64


def _driver(name: str, t: str, size: int, spec: GemmSpec, mr: int, nr: int, mc: int,
            kc: int, threads: int) -> list[str]:
    """The entry: the parts on the pool, each packing into its own slice of the kernel's
    scratch (the module doc); a second caller while the scratch is taken (another Python
    thread) packs into a slice of the heap instead, or, if the heap has no room, waits for the
    scratch."""
    w = _Writer()
    m, n, k = spec.m, spec.n, spec.k
    w.lines.append(f"define void @{name}(ptr noalias %A, ptr noalias %B, ptr noalias %C) "
                   f"{_WIDE} {{")
    w.label("%entry")
    if m == 0 or n == 0 or spec.batch == 0 or k == 0:
        if k == 0 and not spec.accumulate and m and n and spec.batch:  # an empty sum: C = 0
            total = m * n if spec.c0 == 0 else spec.batch * m * n
            w.loop("0", str(total), 1,
                   lambda i: w.do(f"store {t} 0.0, ptr {w.gep(t, '%C', i)}"), "z")
        w.do("ret void")
        w.lines.append("}")
        return [f"@{name}.scratch_bytes = constant i64 0", *w.lines]
    shared = shares_b(spec, mr, threads)
    parts = [] if shared else partition(spec, mr, nr, threads)
    groups = batch_groups(spec)
    part_bytes = sum(_scratch_bytes(size, spec, mr, nr, mc, kc))
    sums = part_bytes * len(parts)  # where groups 1.. put their sums, after the packing slices
    total = (_scratch_bytes(size, spec, mr, nr, mc, kc)[0] if shared
             else sums + (groups - 1) * m * n * size)
    total = -(-total // 64) * 64  # aligned_alloc's size: a multiple of the alignment (C11)
    w.do(f"%was = atomicrmw xchg ptr @{name}.busy, i8 1 acquire")
    w.do("%free = icmp eq i8 %was, 0")
    w.do("br i1 %free, label %kept, label %heap")
    w.label("%heap")
    w.do(f"%own = call ptr @aligned_alloc(i64 64, i64 {total})")
    w.do("%none = icmp eq ptr %own, null")
    w.do("br i1 %none, label %wait, label %run")
    w.label("%wait")  # no room on the heap: the kept scratch, once its caller is done with it
    w.do("call i32 @sched_yield()")
    w.do(f"%was.again = atomicrmw xchg ptr @{name}.busy, i8 1 acquire")
    w.do("%free.now = icmp eq i8 %was.again, 0")
    w.do("br i1 %free.now, label %kept, label %wait")
    w.label("%kept")
    w.do(f"%bound = load ptr, ptr @{name}.scratch, align 8")
    w.do("br label %run")
    w.label("%run")
    w.do("%scratch = phi ptr [ %bound, %kept ], [ %own, %heap ]")
    w.do("%mine = phi i1 [ true, %kept ], [ false, %heap ]")
    if shared:  # per block of k: B packed by every thread, then rows of C shared out
        context = w("alloca [6 x i64]", "ctx")
        slots = [w(f"getelementptr i64, ptr {context}, i64 {i}") for i in range(6)]
        for i, value in enumerate(["%A", "%B", "%C", "%scratch"]):
            w.do(f"store ptr {value}, ptr {slots[i]}")

        def block(pc: str) -> None:
            w.do(f"store i64 {pc}, ptr {slots[4]}")
            w.do(f"store i64 {w.min(str(kc), w(f'sub i64 {k}, {pc}'))}, ptr {slots[5]}")
            for job, count in (("pack", -(-n // nr)), ("rows", -(-m // mr))):
                w.do(f"call void @tapeml_parallel_for(ptr @{name}.{job}, ptr {context}, "
                     f"i64 {count}, i64 {threads})")

        w.loop("0", str(k), kc, block, "pc")
    elif len(parts) == 1:
        w.do(f"call void @{name}.part(ptr %A, ptr %B, ptr %C, {_i64s(parts[0])}, "
             f"ptr %scratch, i1 {str(spec.accumulate).lower()})")
    else:  # the parts on the thread pool (tapeml/codegen/pool.py), the caller taking one
        context = w("alloca [4 x ptr]", "ctx")
        for field, value in enumerate(["%A", "%B", "%C", "%scratch"]):
            w.do(f"store ptr {value}, ptr {w(f'getelementptr ptr, ptr {context}, i64 {field}')}")
        if threads > 1:
            w.do(f"call void @tapeml_parallel_for(ptr @{name}.range, ptr {context}, "
                 f"i64 {len(parts)}, i64 {threads})")
        else:  # the groups of batches, one after another
            w.do(f"call void @{name}.range(ptr {context}, i64 0, i64 {len(parts)})")
        if groups > 1:  # C += the other groups' sums, in order
            first = w.gep("i8", "%scratch", str(sums))

            def add(i: str) -> None:
                c = w.gep(t, "%C", i)
                value = w(f"load {t}, ptr {c}")
                for g in range(1, groups):
                    other = w.gep(t, first, w.add(i, str((g - 1) * m * n)))
                    value = w(f"fadd {t} {value}, {w(f'load {t}, ptr {other}')}")
                w.do(f"store {t} {value}, ptr {c}")

            w.loop("0", str(m * n), 1, add, "s")
    w.do("br i1 %mine, label %release, label %heap.free")
    w.label("%release")
    w.do(f"store atomic i8 0, ptr @{name}.busy release, align 1")
    w.do("ret void")
    w.label("%heap.free")
    w.do("call void @free(ptr %scratch)")
    w.do("ret void")
    w.lines.append("}")
    out = [f"@{name}.busy = internal global i8 0",
           f"@{name}.scratch = global ptr null, align 8  ; set by the loader",
           f"@{name}.scratch_bytes = constant i64 {total}", *w.lines, ""]
    if shared:
        return out + _pack_job(name, t, spec, nr) + _rows_job(name, t, spec, mr, nr, mc, kc)
    if len(parts) > 1:
        out += _range(name, parts, part_bytes, spec, sums if groups > 1 else None)
    return out + _part(name, t, size, spec, mr, nr, mc, kc)


def shares_b(spec: GemmSpec, mr: int, threads: int) -> bool:
    """One product worth threads (not batches of them): each block of B is packed once, the
    threads packing its panels together, and then each takes rows of C, packing its own A. (A
    split of C alone would have every thread pack all of B, or all of A.)"""
    return (threads > 1 and spec.batch == 1 and -(-spec.m // mr) >= threads
            and 2 * spec.m * spec.n * spec.k >= PARALLEL_FLOPS)


def _job(name: str, job: str) -> tuple[_Writer, list[str], str, str]:
    """The head of one of the pool's jobs over the context [A, B, C, packed B, pc, depth]:
    the writer, the four pointers, pc and depth."""
    w = _Writer()
    w.lines.append(f"define internal void @{name}.{job}(ptr %ctx, i64 %start, i64 %end) "
                   f"{_WIDE} {{")
    w.label("%entry")
    fields = [w(f"getelementptr i64, ptr %ctx, i64 {i}") for i in range(6)]
    pointers = [w(f"load ptr, ptr {f}") for f in fields[:4]]
    return w, pointers, w(f"load i64, ptr {fields[4]}"), w(f"load i64, ptr {fields[5]}")


def _end(w: _Writer) -> list[str]:
    w.do("ret void")
    w.lines.append("}")
    return [*w.lines, ""]


def _pack_job(name: str, t: str, spec: GemmSpec, nr: int) -> list[str]:
    """`.pack`: panels [start, end) of this block of B, packed where a whole pack puts them."""
    w, (_, b, _, bp), pc, depth = _job(name, "pack")
    j0 = w(f"mul i64 %start, {nr}")
    j1 = w.min(w(f"mul i64 %end, {nr}"), str(spec.n))
    dst = w.gep(t, bp, w(f"mul i64 {j0}, {depth}"))
    w.do(f"call void @{name}.pack_b(ptr {b}, ptr {dst}, i64 {pc}, i64 {depth}, i64 {j0}, "
         f"i64 {j1})")
    return _end(w)


def _macro_kernel(w: _Writer, name: str, t: str, n: int, mr: int, nr: int,
                  buffers: tuple[str, str, str], rows: tuple[str, str],
                  columns: tuple[str, str], depth: str, load: str) -> None:
    """Rows [ic, ic + height) of C, columns [j0, j1), against one packed block of A (`ap`,
    from row ic) and of B (`bp`, from column j0): a micro-kernel call per MR x NR tile."""
    ap, bp, c = buffers
    ic, height = rows
    j0, j1 = columns

    def panel(jr: str) -> None:
        width = w.min(str(nr), w(f"sub i64 {j1}, {jr}"))
        b_panel = w.gep(t, bp, w(f"mul i64 {w(f'sub i64 {jr}, {j0}')}, {depth}"))

        def tile(ir: str) -> None:
            tall = w.min(str(mr), w(f"sub i64 {height}, {ir}"))
            a_panel = w.gep(t, ap, w(f"mul i64 {ir}, {depth}"))
            c_tile = w.gep(t, c, w.add(w(f"mul i64 {w.add(ic, ir)}, {n}"), jr))
            w.do(f"call void @{name}.tile(i64 {depth}, ptr {a_panel}, ptr {b_panel}, "
                 f"ptr {c_tile}, i64 {n}, i64 {tall}, i64 {width}, i1 {load})")

        w.loop("0", height, mr, tile, "ir")

    w.loop(j0, j1, nr, panel, "jr")


def _rows_job(name: str, t: str, spec: GemmSpec, mr: int, nr: int, mc: int, kc: int
              ) -> list[str]:
    """`.rows`: the tiles of rows [start, end) of C against the packed block of B, packing A
    in a buffer on this thread's stack."""
    m, n = spec.m, spec.n
    w, (a, _, c, bp), pc, depth = _job(name, "rows")
    ap = w(f"alloca [{mc * kc} x {t}], align 64", "ap")
    load = "true" if spec.accumulate else w(f"icmp sgt i64 {pc}, 0")
    r1 = w.min(w(f"mul i64 %end, {mr}"), str(m))

    def rows(ic: str) -> None:
        height = w.min(str(mc), w(f"sub i64 {r1}, {ic}"))
        w.do(f"call void @{name}.pack_a(ptr {a}, ptr {ap}, i64 {ic}, i64 {height}, "
             f"i64 {pc}, i64 {depth})")

        _macro_kernel(w, name, t, n, mr, nr, (ap, bp, c), (ic, height), ("0", str(n)), depth,
                      load)

    w.loop(w(f"mul i64 %start, {mr}"), r1, mc, rows, "ic")
    return _end(w)


def _i64s(values: Part) -> str:
    return ", ".join(f"i64 {v}" for v in values)


def _range(name: str, parts: list[Part], part_bytes: int, spec: GemmSpec,
           sums: int | None) -> list[str]:
    """The pool's entry: parts [start, end) of the table, on the buffers the context holds,
    part p packing into the scratch's p-th slice. Groups of batches (`sums`: where their sums
    start in the scratch) write group 0's sum into C, group g's into the g-th of the sums."""
    table = ", ".join(f"[6 x i64] [{_i64s(part)}]" for part in parts)
    w = _Writer()
    w.lines.append(f"@{name}.parts = internal constant [{len(parts)} x [6 x i64]] [{table}]")
    w.lines.append(f"define internal void @{name}.range(ptr %ctx, i64 %start, i64 %end) {{")
    w.label("%entry")
    buffers = [w(f"load ptr, ptr {w(f'getelementptr ptr, ptr %ctx, i64 {i}')}")
               for i in range(4)]

    def body(i: str) -> None:
        row = w(f"getelementptr [{len(parts)} x [6 x i64]], ptr @{name}.parts, i64 0, i64 {i}")
        values = [w(f"load i64, ptr {w(f'getelementptr [6 x i64], ptr {row}, i64 0, i64 {j}')}")
                  for j in range(6)]
        scratch = w(f"getelementptr i8, ptr {buffers[3]}, i64 {w(f'mul i64 {i}, {part_bytes}')}")
        c, first = buffers[2], str(spec.accumulate).lower()
        if sums is not None:
            t = "float" if spec.dtype == "f32" else "double"
            group0 = w(f"icmp eq i64 {i}, 0")
            offset = w(f"mul i64 {w(f'sub i64 {i}, 1')}, {spec.m * spec.n}")
            own = w.gep(t, w.gep("i8", buffers[3], str(sums)), offset)
            c = w(f"select i1 {group0}, ptr {buffers[2]}, ptr {own}")
            first = w(f"and i1 {group0}, {first}")
        w.do(f"call void @{name}.part(ptr {buffers[0]}, ptr {buffers[1]}, ptr {c}, "
             f"{', '.join(f'i64 {v}' for v in values)}, ptr {scratch}, i1 {first})")

    w.loop("%start", "%end", 1, body, "p")
    w.do("ret void")
    w.lines.append("}")
    return [*w.lines, ""]


def _part(name: str, t: str, size: int, spec: GemmSpec, mr: int, nr: int, mc: int,
          kc: int) -> list[str]:
    """The loop nest over one part, all of k, packing into `%scratch`; `%first`: the first
    block of k adds into what C holds (C (+)= ...) rather than overwriting it."""
    w = _Writer()
    n, k = spec.n, spec.k
    a0, b0, c0 = spec.a[0], spec.b[0], spec.c0
    w.lines.append(f"define internal void @{name}.part({_PART_ARGS}, ptr %scratch, i1 %first) "
                   f"{_WIDE} {{")
    w.label("%entry")
    bp = "%scratch"
    ap = w.gep("i8", bp, str(_scratch_bytes(size, spec, mr, nr, mc, kc)[0]))
    # one A for every batch (a convolution's weights), in one block of rows and of k: packed
    # once here, not once per batch
    shared_a = a0 == 0 and spec.m <= mc and k <= kc
    if shared_a:
        w.do(f"call void @{name}.pack_a(ptr %A, ptr {ap}, i64 %m0, "
             f"i64 {w('sub i64 %m1, %m0')}, i64 0, i64 {k})")

    def batch(b: str) -> None:
        a = w.gep(t, "%A", w(f"mul i64 {b}, {a0}"))
        bb = w.gep(t, "%B", w(f"mul i64 {b}, {b0}"))
        c = w.gep(t, "%C", w(f"mul i64 {b}, {c0}"))
        later_batch = w(f"icmp sgt i64 {b}, %b0") if c0 == 0 else "false"

        def block(pc: str) -> None:
            depth = w.min(str(kc), w(f"sub i64 {k}, {pc}"))
            w.do(f"call void @{name}.pack_b(ptr {bb}, ptr {bp}, i64 {pc}, i64 {depth}, "
                 "i64 %n0, i64 %n1)")
            load = w(f"or i1 {w(f'icmp sgt i64 {pc}, 0')}, {later_batch}")
            load = w(f"or i1 {load}, %first")  # into what C held (accumulating)

            def rows(ic: str) -> None:
                height = w.min(str(mc), w(f"sub i64 %m1, {ic}"))
                if not shared_a:
                    w.do(f"call void @{name}.pack_a(ptr {a}, ptr {ap}, i64 {ic}, "
                         f"i64 {height}, i64 {pc}, i64 {depth})")

                _macro_kernel(w, name, t, n, mr, nr, (ap, bp, c), (ic, height),
                              ("%n0", "%n1"), depth, load)

            w.loop("%m0", "%m1", mc, rows, "ic")

        w.loop("0", str(k), kc, block, "pc")

    w.loop("%b0", "%b1", 1, batch, "batch")
    w.do("ret void")
    w.lines.append("}")
    return w.lines
