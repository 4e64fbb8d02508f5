"""The CPU's matmul kernels: BLIS-style GEMM written out as LLVM IR, shape-generic.

`kernel.gemm` (tapeml/dialects/kernel.py) becomes a call to a function whose name spells its
`GemmSpec`, the *caller* (`caller(spec, target)`): its plan (plan.py: the call's sizes,
strides, tile height, and how its work is shared out over threads), its scratch, and a call
of the *kernel* its `Variant` names (`kernel(variant)`), passing it the variant's *tiles*
(`tiles_module(variant)`: the micro-kernels and A's packing, the code that depends on the
tile's height MR). A variant is what changes the code: the element type, the register tile,
and whether each operand's inner stride is 1 (the kernel packs an operand along its rows or
down its columns, whichever the call's strides favour, so a product and its transposes share
it); a program with forty matmul shapes calls a handful of them, each module compiled once
per process (and kept in the disk cache) by the CPU backend, a kernel's once for all its
heights. A kernel computes, for b < batch,

    C[b] (+)= A[b] @ B[b],  A[b][i, p] = A[b*a0 + i*a1 + p*a2],  B[b][p, j] = B[b*b0 + p*b1 + j*b2]

with C[b] a contiguous m x n block at C + b*c0 (c0 = 0: every batch adds into one C), then the
call's epilogue, if it has one (kernel.gemm's: + a bias per row or per column, + a residual,
relu), on each tile as it stores its last block of k, or on the whole of C at the end where
groups of batches are summed apart (`.finish`). A transposed operand is only other strides: packing
reads it either way.

The loop nest (Goto/BLIS; measured in ../shared/reference/cpu-codegen-measurements.md):

    for pc in 0..k step KC:                         B[pc:pc+KC, :] packed as [n/NR][KC][NR]
        for ic in 0..m step MC:                     A[ic:ic+MC, pc:pc+KC] packed as [MC/MR][KC][MR]
            for jr in 0..n step NR:                 one KC x NR panel of B, in L1 (Zen 4's
                                                    512-deep panels: in L2, as fast there)
                for ir in 0..MC step MR:            the micro-kernel: an MR x NR tile of C in
                                                    MR * NR / lanes vector registers, one FMA
                                                    per register per k

A B whose rows run along n with stride 1, whole panels wide, is not packed at all where each
part would pack its own (plan.direct_b: its rows not 4 KB apart, and no constant its caller
packs once): the micro-kernel reads each panel in place, rows b1 apart, and the panel comes
into L2 as the first tile of its column reads it.

A product whose A's columns are a convolution's windows (GemmSpec.a_taps) calls a kernel of
its own (`Variant.windows`): its tile (`.tile.direct`) reads A in place, column k at A plus
the caller's table `@<symbol>.rows`[k], and it packs only B (a convolution's weights: packed
once, `.prepack_b`), all of k in one block.

The packed panels are zero-padded at the n edge and clamp rows at the m edge, so the
micro-kernel always runs a full tile (a last panel holding at most a vector of columns a tile
one vector wide, `.tile.half`); an edge tile is written through a small stack tile. So is
every tile of a C stored transposed (GemmSpec.c_transposed: a convolution's product with the
pixels as rows, written in the image's layout), its sums transposed in registers there (a
module of its own, `transposed_module`, which only programs with such a product compile).
Every element of C sums its k products in the same order whatever the tiling (each tile owns
its elements; blocks of KC are added in order; a windows kernel sums all of k as one block),
so results do not depend on threads.

A caller packs into `@<symbol>.scratch`, a buffer of `@<symbol>.scratch_bytes` bytes (a
multiple of 64; 0: the call packs nothing) that whoever loads it allocates, 64-aligned, and
points it at before the first call (`tapeml.codegen.cpu.bind_scratch`: a numpy buffer, so
running out of memory is a MemoryError there, not an abort in the JIT's loader), and keeps as
long as the code: no allocation and no page faults per call. A call that finds it taken
packs into the heap; where the heap has no room, it waits for the scratch.

The package, in the order a call runs through it:

    target.py     Target (the host's vector unit, threads and KC, the depth of a packed
                  block of k), host_threads(), tiles(): the MR x NR register tile
    partition.py  how one call's work is shared out over threads: partition(), batch_groups(),
                  shares_b(), PARALLEL_FLOPS
    plan.py       Variant (what a kernel's code depends on), variant(), plan(): the table of
                  one call's sizes, strides and parts
    writer.py     Writer: LLVM IR text with fresh value names and counted loops
    routines.py   the leaf functions: the micro-kernel (`.tile`), the epilogue, and the
                  packing of A and B (the tiles' module: the micro-kernels and A's)
    driver.py     the entry point (taking the scratch, handing parts to the thread pool) and
                  the loop nest over one part (`.part`, `.range`, `.pack`, `.rows`)
"""

from __future__ import annotations

from tapeml.codegen.gemm.driver import EXTRA, TILES, driver
from tapeml.codegen.gemm.partition import PARALLEL_FLOPS, batch_groups, partition, shares_b
from tapeml.codegen.gemm.plan import INDEX, Variant, packed_bytes, plan, variant
from tapeml.codegen.gemm.routines import (
    MOST_ROWS,
    edge,
    epilogue,
    micro_kernel,
    neutral_bias,
    pack_a,
    pack_b,
    transpose_lines,
    transpose_table,
    transposed_edge,
)
from tapeml.codegen.gemm.target import Target, host_threads, tiles
from tapeml.codegen.gemm.writer import COLD, loop_metadata
from tapeml.dialects.kernel import GemmSpec

__all__ = ["PARALLEL_FLOPS", "POOL", "GemmSpec", "Target", "Variant", "batch_groups", "caller",
           "definition", "host_threads", "kernel", "partition", "shares_b", "tiles",
           "tiles_module", "tiles_of", "transposed_module", "transposed_symbol", "variant"]


def _header(v: Variant, comment: str) -> list[str]:
    t = v.element[0]
    vec = f"<{v.lanes} x {t}>"
    return [f"; {comment}",
            "declare i64 @llvm.smin.i64(i64, i64)",
            "declare i64 @llvm.smax.i64(i64, i64)",
            "declare void @llvm.prefetch.p0(ptr, i32, i32, i32)",
            f"declare {vec} @llvm.fma.v{v.lanes}{v.dtype}({vec}, {vec}, {vec})",
            *(line for width in sorted({v.lanes, v.nr}) for line in _masked(width, t, v.dtype)),
            ""]


def kernel(v: Variant) -> str:
    """The LLVM IR module defining the kernel `v.symbol` (and its internal helpers): all of it
    but its tiles (`tiles_module`) and its store into a C stored transposed
    (`transposed_module`), which each call passes it."""
    return loop_metadata(_kernel(v))


def tiles_module(v: Variant) -> str:
    """The LLVM IR module defining the tiles of `v` (`v.tiles`, TILES: the micro-kernels and
    A's packing, which depend on MR) and `.prepack_a`. Its tiles store an edge tile through
    the kernel's `.edge`, and every tile of a C stored transposed through
    `transposed_symbol(v)` (passed them)."""
    return loop_metadata(_tiles(v))


def transposed_symbol(v: Variant) -> str:
    """The kernel `v`'s store of a tile into a C stored transposed (routines.transposed_edge),
    which a caller of a product whose C is (GemmSpec.c_transposed) passes it."""
    return f"{v.symbol}.edge.transposed"


def transposed_module(v: Variant) -> str:
    """The LLVM IR module defining `transposed_symbol(v)`: compiled only for programs that
    store a C transposed (a convolution's, its pixels as rows)."""
    return loop_metadata(_transposed(v))


def _transposed(v: Variant) -> str:
    out = _header(v, f"{transposed_symbol(v)}: the tiles of {v.symbol} into a C stored "
                     "transposed")
    out += transpose_table(transposed_symbol(v), v)
    out += transposed_edge(transposed_symbol(v), v.element[0], v)
    return "\n".join(out) + "\n"


def _kernel(v: Variant) -> str:
    t, name = v.element[0], v.symbol
    out = [*_header(v, f"{name}: C (+)= A @ B, BLIS-style, tiles NR = {v.nr} wide of "
                       f"<{v.lanes} x {t}>")[:-1],
           "declare ptr @aligned_alloc(i64, i64)", "declare void @free(ptr)",
           "declare i32 @sched_yield()",
           ""]
    out += neutral_bias(name, t, v)
    out += transpose_table(name, v)
    out += transpose_lines(name, t, v)
    out += epilogue(name, t, v)
    out += edge(name, t, v)
    out += pack_b(name, t, v)
    out += _prepack(name, "b")
    out += driver(v)
    return "\n".join(out) + "\n"


def _tiles(v: Variant) -> str:
    t, name = v.element[0], v.tiles
    vec = f"<{v.lanes} x {t}>"
    assert v.mr <= MOST_ROWS, v  # (the kernel's `.edge` serves at most that many rows)
    out = _header(v, f"{name}: the {v.mr}x{v.nr} register tiles of {v.symbol}")
    if v.windows:  # (A read in place through the caller's table of columns)
        out += micro_kernel(name, t, vec, v.lanes, v.mr, v.nr, v.dtype, windows=True)
    else:  # (A packed, or read in place)
        out += micro_kernel(name, t, vec, v.lanes, v.mr, v.nr, v.dtype)
        if v.nr > v.lanes:  # (the narrow tile of a ragged last panel)
            out += micro_kernel(name, t, vec, v.lanes, v.mr, v.lanes, v.dtype, panel=v.nr)
    out += pack_a(name, t, v)
    out += _prepack(name, "a")
    return "\n".join(out) + "\n"


def tiles_of(v: Variant) -> tuple[str, ...]:
    """The functions of `v.tiles` a call passes the kernel, in TILES' order ("" where the
    variant has none)."""
    present = {"tile.direct"} if v.windows else {"tile"} | (
        {"tile.half"} if v.nr > v.lanes else set())
    return tuple(f"{v.tiles}.{f}" if f in present or f == "pack_a" else "" for f in TILES)


PREPACK_ARGS = "ptr %src, ptr %dst, i64 %rows, i64 %columns, i64 %s1, i64 %s2"
"""`@<tiles>.prepack_a` and `@<kernel>.prepack_b`'s parameters: the operand (rows x columns,
strides s1 and s2) and where its whole packing goes (plan.packed_bytes); `.prepack_a` then
takes the kernel's `.transpose` (what its `.pack_a` calls)."""
PREPACK_TYPES = "ptr, ptr, i64, i64, i64, i64"


def _prepack(name: str, operand: str) -> list[str]:
    """The whole of a constant operand packed, for a caller to keep (plan.packed_a): A (m x k)
    as [m/MR][k][MR] (`.prepack_a`, in the tiles' module), B (k x n) as [n/NR][k][NR]
    (`.prepack_b`, the kernel's; not a windows kernel's: it reads B in place), by the packing
    routines run over all of it."""
    start, end = ("i64 %rows, ", ", ptr %transpose") if operand == "a" else ("", "")
    return [f"define void @{name}.prepack_{operand}({PREPACK_ARGS}{end}) {COLD} {{",
            f"  call void @{name}.pack_{operand}(ptr %src, ptr %dst, i64 0, i64 %rows, i64 0, "
            f"i64 %columns, {start}i64 %s1, i64 %s2{end})",
            "  ret void", "}", ""]


def _masked(lanes: int, t: str, dtype: str) -> list[str]:
    vec, mask = f"<{lanes} x {t}>", f"<{lanes} x i1>"
    return [f"declare {vec} @llvm.masked.load.v{lanes}{dtype}.p0(ptr, i32, {mask}, {vec})",
            f"declare void @llvm.masked.store.v{lanes}{dtype}.p0({vec}, ptr, i32, {mask})"]


POOL = "tapeml_parallel_for"
"""The thread pool's entry (tapeml/codegen/pool.py), which a caller whose plan runs on more
than one thread passes its kernel (EXTRA)."""


def caller(spec: GemmSpec, target: Target, declare: bool = True) -> str:
    """The LLVM IR module defining `spec.symbol(A, B, C)` (then the bias and the residual,
    those `spec` has: kernel.gemm's epilogue): the kernel of its variant, called
    with the plan of `spec` and a scratch of its own (the package doc); `declare`: the kernel
    is declared (defined elsewhere: another module, another engine)."""
    name, v = spec.symbol, variant(spec, target)
    table, whole = plan(spec, target), plan(spec, target, packed=True)
    a_bytes, b_bytes = packed_bytes(spec, v)
    a_bytes *= whole[INDEX["packed_a"]]
    b_bytes *= whole[INDEX["packed_b"]]
    out = [f"; {name}: a call of {v.symbol}",
           f"@{name}.busy = internal global i8 0",
           f"@{name}.scratch = global ptr null, align 8  ; set by the loader",
           f"@{name}.scratch_bytes = constant i64 {table[INDEX['total']]}",
           f"@{name}.packed = global ptr null, align 8  ; set by the loader",
           f"@{name}.packed_bytes = constant i64 {a_bytes + b_bytes}",
           _table(f"@{name}.plan", table)]
    if a_bytes + b_bytes:
        out += [f"@{name}.state = internal global i8 0  ; 0, 1: packing, 2: packed",
                _table(f"@{name}.plan.packed", whole)]
    passed = tiles_of(v)
    pooled = table[INDEX["threads"]] > 1  # (else the kernel never calls the pool)
    transposed = transposed_symbol(v) if spec.c_transposed else ""
    if pooled:
        out.append(f"declare void @{POOL}(ptr, ptr, i64, i64)")
    if declare:
        out.append(f"declare void @{v.symbol}(ptr, ptr, ptr, ptr, ptr, ptr, ptr)")
        out.append(f"declare void @{v.symbol}.prepack_b({PREPACK_TYPES})")
        out += [f"declare void @{v.tiles}.prepack_a({PREPACK_TYPES}, ptr)",
                f"declare void @{v.symbol}.transpose()"]  # (its address)
        out += [f"declare void @{f}()" for f in (*passed, transposed) if f]  # (addresses)
    extra = [x for x, used in (("bias", spec.bias), ("residual", spec.residual)) if used]
    params = "".join(f", ptr noalias %{x}" for x in extra)
    if spec.a_taps:  # where each column of A starts (kernel.gemm's a_taps)
        rows = ", ".join(f"i64 {spec.a_column(p)}" for p in range(spec.k))
        out.append(f"@{name}.rows = internal constant [{spec.k} x i64] "
                   f"{f'[{rows}]' if rows else 'zeroinitializer'}, align 64")
    out.append(f"define void @{name}(ptr noalias %A, ptr noalias %B, ptr noalias %C{params}) {{")
    out.append(f"  %extra = alloca [{len(EXTRA)} x ptr], align 8  ; the epilogue's operands, "
               "B's rows, the tiles (null where there are none)")
    values = {"bias": "%bias" if spec.bias else "null",
              "residual": "%residual" if spec.residual else "null",
              "rows": f"@{name}.rows" if spec.a_taps else "null",
              "pool": f"@{POOL}" if pooled else "null",
              "transposed": f"@{transposed}" if transposed else "null",
              **{f: f"@{symbol}" if symbol else "null"
                 for f, symbol in zip(TILES, passed, strict=True)}}
    for i, x in enumerate(EXTRA):
        slot = "%extra" if i == 0 else f"%extra.{i}"
        if i:
            out.append(f"  {slot} = getelementptr ptr, ptr %extra, i64 {i}")
        out.append(f"  store ptr {values[x]}, ptr {slot}, align 8")
    call = (f"call void @{v.symbol}(ptr %A, ptr %B, ptr %C, ptr %extra, ptr @{name}.plan, "
            f"ptr @{name}.scratch, ptr @{name}.busy)")
    if a_bytes + b_bytes == 0:
        return "\n".join([*out, f"  {call}", "  ret void", "}"]) + "\n"
    # a constant operand packed whole by the first call (state 0 -> 1 -> 2), kept, and passed
    # packed from then on (plan.packed_a); a call while another packs passes it as it is
    packs = []
    if a_bytes:
        packs.append(f"  call void @{v.tiles}.prepack_a(ptr %A, ptr %kept, i64 {spec.m}, "
                     f"i64 {spec.k}, i64 {spec.a[1]}, i64 {spec.a[2]}, "
                     f"ptr @{v.symbol}.transpose)")
    if b_bytes:
        packs.append(f"  call void @{v.symbol}.prepack_b(ptr %B, ptr %kept.b, i64 {spec.k}, "
                     f"i64 {spec.n}, i64 {spec.b[1]}, i64 {spec.b[2]})")
    a, b = ("%kept" if a_bytes else "%A"), ("%kept.b" if b_bytes else "%B")
    out += ["  %kept = load ptr, ptr @" + f"{name}.packed, align 8",
            f"  %kept.b = getelementptr i8, ptr %kept, i64 {a_bytes}",
            f"  %state = load atomic i8, ptr @{name}.state acquire, align 1",
            "  %ready = icmp eq i8 %state, 2",
            "  br i1 %ready, label %packed, label %claim",
            "claim:",
            f"  %claimed = cmpxchg ptr @{name}.state, i8 0, i8 1 acq_rel acquire",
            "  %won = extractvalue { i8, i1 } %claimed, 1",
            "  br i1 %won, label %pack, label %as.is",
            "pack:", *packs,
            f"  store atomic i8 2, ptr @{name}.state release, align 1",
            "  br label %packed",
            "packed:",
            f"  call void @{v.symbol}(ptr {a}, ptr {b}, ptr %C, ptr %extra, "
            f"ptr @{name}.plan.packed, ptr @{name}.scratch, ptr @{name}.busy)",
            "  ret void",
            "as.is:", f"  {call}", "  ret void", "}"]
    return "\n".join(out) + "\n"


def _table(symbol: str, values: list[int]) -> str:
    text = ", ".join(f"i64 {x}" for x in values)
    return f"{symbol} = internal constant [{len(values)} x i64] [{text}]"


def definition(spec: GemmSpec, target: Target) -> str:
    """One LLVM IR module defining `spec.symbol`, the kernel it calls and its tiles (and its
    store into a C stored transposed, where `spec`'s is)."""
    v = variant(spec, target)
    seen: set[str] = set()
    lines = []
    parts = [_kernel(v), _tiles(v), *([_transposed(v)] if spec.c_transposed else []),
             caller(spec, target, declare=False)]
    for line in "\n".join(parts).split("\n"):
        if line.startswith("declare "):
            if line in seen:
                continue
            seen.add(line)
        lines.append(line)
    return loop_metadata("\n".join(lines))
