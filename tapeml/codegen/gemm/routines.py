"""A GEMM kernel's leaf functions, as LLVM IR text: the micro-kernel (`@<symbol>.tile`: an
MR x NR tile of C in vector registers), the epilogue over a tile of C once it holds its sums
(`.epilogue`: + bias, relu), and the packing of A's and B's blocks into panels
(`.pack_a`, `.pack_b`: each takes the walk along the operand's rows or down its columns,
whichever has the smaller stride, as plan.along_rows says; `.pack_a.rows`, `.pack_a.columns`
and B's are the walks). The driver (driver.py) calls them.
"""

from __future__ import annotations

import functools

from tapeml.codegen.gemm.plan import Variant
from tapeml.codegen.gemm.writer import COLD, PAIRED_LOOP, SCALAR_LOOP, WIDE, Writer


def micro_kernel(name: str, t: str, vec: str, lanes: int, mr: int, nr: int,
                 dtype: str, windows: bool = False, panel: int = 0) -> list[str]:
    """C[mr x nr tile] (+)= Ap[kc][MR]^T Bp[kc][NR], accumulated in registers; where %epilogue
    holds (the tile's last block of k), kernel.gemm's epilogue on the registers before they
    are stored (TILE_EPILOGUE). B's rows are %ldb apart (NR: its packed panel, or B itself
    read in place: plan.direct_b). Where %direct holds, `.tile` reads A in place instead, row
    i of the tile at %a + i * %lda (rows past %mr read the last one: they are not stored), k
    along each row: a loop of its own, before the one store both loops share (as functions
    of their own, the two compiled their stores twice: W3's tiles' module 71 -> 49 ms).
    `windows` (`.tile.direct`, kernel.gemm's a_taps, the only tile of such a variant): A
    read in place through a table, column k of the tile at %a + %rows[k], row i at + i, a
    whole tile's rows at constant offsets (the dialect's A_TAPS_SLACK: an edge tile's rows
    past %mr are there to read; as 14 clamped offsets they were spilled, and the loop ran 2x
    slower). Against B's
    rows as the windows (read unaligned, a tile of 8 rows for 64 channels) a convolution's
    product ran 5-15% faster this way. (`.tile`'s B stride was a constant NR, once 3-4%
    faster on W2 n=512; a run-time %ldb now, which lets B be read in place: W2 at n = 1024,
    its B packed either way, 109.3 against 109.6 GFLOP/s, medians of five process pairs.)
    `panel` (`.tile.half`): a tile `nr` wide (one vector) over
    the first columns of packed panels `panel` wide, its sums spilled `panel` apart as a
    whole tile's: the last panel of a product whose columns end at most a vector into it
    (196 = 6 * 32 + 4) costs half a tile, not a whole one; its sums always stored through
    `.edge`. The packed tiles (`.tile`, `.tile.half`) also fetch into L2 the line at
    %pf + k * %pfs at each k: the driver's share of the next panel's block of B
    (driver._prefetched; %pfs 0 where there is nothing to fetch). Every tile of a short block
    of k fetches its rows of C (and of the residual) before its loop (`_fetch_tile_of_c`), and
    every tile of a longer one (but `.tile.half`'s) near its loop's end (`_fetch_c_late`)."""
    w = Writer()
    vectors = nr // lanes
    row_length = panel or nr  # of B's packed rows, and of the spilled sums
    both = not (windows or panel)  # (`.tile`: A packed or, where %direct, read in place)
    strided_b = not panel  # (`.tile`'s and `.tile.direct`'s B: rows %ldb apart)
    b_param = "ptr noalias %b, i64 %ldb" if strided_b else "ptr noalias align 64 %b"
    suffix = ".direct" if windows else ".half" if panel else ""
    a_param = "ptr noalias %a"  # (a panel of a block of k starts anywhere: MR per k)
    extra = ", ptr %rows" if windows else ", ptr %pf, i64 %pfs" if panel else \
        ", i1 %direct, i64 %lda, ptr %pf, i64 %pfs"
    w.lines.append(f"define void @{name}.tile{suffix}(i64 %kc, {a_param}, {b_param}, "
                   f"ptr noalias %c, i64 %ldc, i64 %mr, i64 %nr, i1 %load{extra}, "
                   f"{TILE_EPILOGUE}, ptr %edge) noinline {WIDE} {{")
    w.label("%entry")
    w.do(f"%spill = alloca [{mr * row_length} x {t}], align 64")  # (an edge tile's sums)
    _fetch_tile_of_c(w, t, mr, nr)
    loop = functools.partial(_k_loop, w, t, vec, lanes, mr, vectors, dtype, row_length,
                             strided_b, late=not panel)
    if not both:
        acc = loop("", "direct" if windows else "packed", windows=windows)
        w.label("%store")
    else:  # one loop or the other, then one store: a tile's store paths compiled once
        w.do("br i1 %direct, label %in_place, label %packed")
        w.label("%packed")
        packed = loop("p.", "packed")
        w.label("%in_place")
        in_place = loop("d.", "direct")
        w.label("%store")
        acc = [[w(f"phi {vec} [ {x}, %p.head ], [ {y}, %d.head ]", "c")
                for x, y in zip(p, d, strict=True)] for p, d in zip(packed, in_place, strict=True)]
    align = 4 if t == "float" else 8

    def whole(epilogue: bool) -> None:  # straight into C (rows of C need not be aligned)
        # C is read only to add into it: a C written over is not fetched first (an output
        # larger than the cache was read from memory for nothing)
        w.choose("%load", lambda: _store_tile(w, vec, acc, lanes, align, True, epilogue),
                 lambda: _store_tile(w, vec, acc, lanes, align, False, epilogue))

    def edge() -> None:  # through the stack: the kernel's `.edge` (%edge) serves every tile
        for i in range(mr):
            for v in range(vectors):
                p = w.gep(t, "%spill", str(i * row_length + v * lanes))
                w.do(f"store {vec} {acc[i][v]}, ptr {p}, align 64")
        w.do("call void %edge(ptr %spill, ptr %c, i64 %ldc, i64 %mr, i64 %nr, "
             "i1 %load, ptr %rb, i64 %rs, ptr %cb, i1 %relu, ptr %res, i64 %ldr, "
             "i1 %epilogue, i1 %transposed)")

    if panel:  # (one panel per product at most: its tiles through `.edge`, the code small)
        edge()
        return w.end()
    full_m, full_n = w(f"icmp eq i64 %mr, {mr}"), w(f"icmp eq i64 %nr, {nr}")
    full = w(f"and i1 {w(f'and i1 {full_m}, {full_n}')}, {w('xor i1 %transposed, true')}")
    w.choose(full, lambda: w.choose("%epilogue", lambda: whole(True), lambda: whole(False)),
             edge)
    return w.end()


def _k_loop(w: Writer, t: str, vec: str, lanes: int, mr: int, vectors: int, dtype: str,
            row_length: int, strided_b: bool, tag: str, a: str, windows: bool = False,
            late: bool = True) -> list[list[str]]:
    """The micro-kernel's loop over k, from the current block (its labels and values prefixed
    `tag`), leaving for %store from `%<tag>head`; the MR x NR sums it leaves there. `a`:
    "packed" (A's panel, MR per k; the next panel's block of B fetched at %pf + k * %pfs,
    the loop paired) or "direct" (A in place: row i at %a + i * %lda, or, `windows`, column k
    at %a + %rows[k]; not unrolled). `late`: C fetched near the loop's end (`_fetch_c_late`)."""
    acc = [[f"%{tag}c{i}.{v}" for v in range(vectors)] for i in range(mr)]
    new = [[f"%{tag}c{i}.{v}.n" for v in range(vectors)] for i in range(mr)]
    direct = a == "direct"
    k, head, body, latch = f"%{tag}k", f"%{tag}head", f"%{tag}body", f"%{tag}latch"
    if direct and not windows:
        last = w("sub i64 %mr, 1")
        rows = [w.gep(t, "%a", w(f"mul i64 {w.min(str(i), last)}, %lda")) for i in range(mr)]
    before = w.block
    exit_from = latch if late else body
    w.do(f"br label {head}")
    w.label(head)
    w.do(f"{k} = phi i64 [ 0, {before} ], [ {k}.next, {exit_from} ]")
    for i in range(mr):
        for v in range(vectors):
            w.do(f"{acc[i][v]} = phi {vec} [ zeroinitializer, {before} ], "
                 f"[ {new[i][v]}, {exit_from} ]")
    w.do(f"br i1 {w(f'icmp slt i64 {k}, %kc')}, label {body}, label %store")
    w.label(body)
    bp = w.gep(t, "%b", w(f"mul i64 {k}, {'%ldb' if strided_b else row_length}"))
    bs = []
    b_align = (4 if t == "float" else 8) if strided_b else 64
    for v in range(vectors):
        p = bp if v == 0 else w.gep(t, bp, str(v * lanes))
        bs.append(w(f"load {vec}, ptr {p}, align {b_align}", "b"))
    ap = None if direct else w.gep(t, "%a", w(f"mul i64 {k}, {mr}"))
    if windows:  # column k of A
        ap = w.gep(t, "%a", w(f"load i64, ptr {w.gep('i64', '%rows', k)}, align 8"))
    if not direct:
        ahead = w(f"getelementptr i8, ptr %pf, i64 {w(f'mul i64 {k}, %pfs')}")  # (may pass
        w.do(f"call void @llvm.prefetch.p0(ptr {ahead}, i32 0, i32 2, i32 1)")  # the end)

    def a_at(i: int) -> str:  # A[i, k]: in place along row i, or packed: MR per k
        if direct and not windows:
            return w.gep(t, rows[i], k)
        return ap if i == 0 else w.gep(t, ap, str(i))

    for i in range(mr):
        x = w(f"load {t}, ptr {a_at(i)}, align {4 if t == 'float' else 8}", "a")
        one = w(f"insertelement {vec} poison, {t} {x}, i64 0")
        splat = w(f"shufflevector {vec} {one}, {vec} poison, <{lanes} x i32> zeroinitializer")
        for v in range(vectors):
            w.do(f"{new[i][v]} = call {vec} @llvm.fma.v{lanes}{dtype}({vec} {splat}, "
                 f"{vec} {bs[v]}, {vec} {acc[i][v]})")
    w.do(f"{k}.next = add i64 {k}, 1")
    if late:
        _fetch_c_late(w, t, mr, lanes * vectors, k)
        w.do(f"br label {latch}")
        w.label(latch)
    paired = not direct and strided_b  # (the others' products are small: the GPT step, W4
    # and squeezenet ran the same with theirs paired too, and compiled slower; and not
    # unrolled at all, which LLVM's partial unrolling did by two: W3's tiles compiled 187 ->
    # 179 ms with the kernel, and W3, W4, the GPT step, ResNet-50 and a 1024 x 512 x 64
    # product ran the same, to the same bits)
    w.do(f"br label {head}, !llvm.loop {PAIRED_LOOP if paired else SCALAR_LOOP}")
    return acc


SHORT_K = 192
"""A tile whose block of k is at most this deep fetches its rows of C, and of the residual
where it applies the epilogue, into L1 before its loop (`_fetch_tile_of_c`)."""


def _fetch_tile_of_c(w: Writer, t: str, mr: int, width: int) -> None:
    """Where the block of k is short (SHORT_K) and C is stored as it lies: a prefetch, for
    writing, of each line of the tile's rows of C (MR of them, `width` elements each:
    its first, middle and last element's lines, three where the row is not aligned), and,
    where %epilogue holds, a prefetch of the residual's. The loop over k then hides what
    the stores would wait for: a short product's output comes from memory (a row of C per
    stream, MR streams at once, which the hardware's prefetchers do not follow). ResNet-50
    at batch 8 (one core): its k = 64 convolutions over 56 x 56 (a 25 MB output, the
    residual as large) 15-22% faster, those of k = 128 over 28 x 28 10-15%, the model 3%
    (batch 1: 4%, squeezenet 2%; W3, W4 and the GPT step the same); its 7 x 7 stem (k = 147)
    6% faster at 192 than at 128. Against whole blocks (KC) it cost a little (W2 n = 1024 1%
    slower): their loop is long beside the stores."""
    size = 4 if t == "float" else 8
    last = width * size - size
    lines = sorted({0, min(64, last), last})
    short = w(f"icmp sle i64 %kc, {SHORT_K}")

    def fetch(base: str, stride: str, write: int) -> None:
        for i in range(mr):  # (rows past an edge tile's, and lines past C's end: a prefetch
            # never faults)
            row = w(f"getelementptr {t}, ptr {base}, i64 {w(f'mul i64 {stride}, {i}')}")
            for offset in lines:
                line = w(f"getelementptr i8, ptr {row}, i64 {offset}")
                w.do(f"call void @llvm.prefetch.p0(ptr {line}, i32 {write}, i32 3, i32 1)")

    def rows() -> None:
        fetch("%c", "%ldc", 1)
        w.when("%epilogue", lambda: fetch("%res", "%ldr", 0))

    w.when(w(f"and i1 {short}, {w('xor i1 %transposed, true')}"), rows)


LATE_C = 64
"""A tile whose block of k is longer than SHORT_K fetches its rows of C into L1, for writing,
over the iterations from this many before its loop's end (`_fetch_c_late`): its stores (and,
in a second block of k, its loads of C) then find them there. W2 n = 1024 (C 4 MB, from L3 at
each of its two blocks of k): one core 109.8 -> 111.2 GFLOP/s (the best of nine in each of
four alternating process pairs), two threads 213.5 -> 216.0; W3's step 0.8% faster, W4's the
same. (Fetched before the loop instead, C's lines stood in L1 through all of it: W2 n = 1024
1% slower. From 128 iterations before the end: the same as 64.)"""


def _fetch_c_late(w: Writer, t: str, mr: int, nr: int, k: str) -> None:
    """At iteration `k` of the tile's loop, where the block of k is longer than SHORT_K and C is
    stored as it lies: iterations LATE_C to LATE_C - 2 * MR before the end fetch the lines of
    row (j / 2) of the tile of C, its first element's where j is even, its last's where odd
    (j: the iteration's place in that window; both are one line where the row is aligned).
    One prefetch an iteration at most, beside the loop's MR FMAs: the loop stays bound by
    them."""
    j = w(f"sub i64 {k}, {w(f'sub i64 %kc, {LATE_C}')}")
    long_k = w(f"icmp sgt i64 %kc, {SHORT_K}")
    plain = w("xor i1 %transposed, true")
    window = w(f"icmp ult i64 {j}, {2 * mr}")  # (below the window, j wraps: not in it)

    def fetch() -> None:
        row = w(f"mul i64 {w(f'lshr i64 {j}, 1')}, %ldc")
        end = w(f"mul i64 {w(f'and i64 {j}, 1')}, {nr - 1}")
        line = w(f"getelementptr {t}, ptr %c, i64 {w(f'add i64 {row}, {end}')}")  # (not
        w.do(f"call void @llvm.prefetch.p0(ptr {line}, i32 1, i32 3, i32 1)")  # inbounds: an
        # edge tile's rows may pass C's end; a prefetch never faults) write, into L1

    w.when(w(f"and i1 {window}, {w(f'and i1 {long_k}, {plain}')}"), fetch)


EDGE_ARGS = "ptr noalias align 64 %tile, ptr noalias %c, i64 %ldc, i64 %mr, i64 %nr, i1 %load"
"""`.edge`'s and `.edge.transposed`'s parameters (then TILE_EPILOGUE's): the micro-kernel's
sums spilled to `tile` (MR x NR, aligned), where its tile of C is, and how much of it."""


def edge(name: str, t: str, v: Variant) -> list[str]:
    """`.edge(tile, ...)`: an edge tile of C (rows below %mr, lanes below %nr), its sums
    spilled by the micro-kernel to `tile`, stored as the micro-kernel stores a whole tile:
    added to what C holds where %load, then through `.epilogue` where %epilogue (the same steps
    in the same order, so the same bits). Out of line, once per kernel: written into each
    micro-kernel, the masked stores were half of its code. A C stored transposed has every
    tile stored by `transposed_edge` instead."""
    w = Writer()
    lanes, dtype, align = v.lanes, v.dtype, v.element[1]
    vec, mask_type = f"<{lanes} x {t}>", f"<{lanes} x i1>"
    w.lines.append(f"define internal void @{name}.edge({EDGE_ARGS}, {TILE_EPILOGUE}) "
                   f"noinline {WIDE} {{")
    w.label("%entry")
    masks = [_lanes_below(w, lanes, j * lanes, "%nr") for j in range(v.nr // lanes)]
    adds = [w(f"and {mask_type} {mask}, {_splat_i1(w, lanes, '%load')}") for mask in masks]

    def row(i: str) -> None:
        start = w.gep(t, "%c", w(f"mul i64 {i}, %ldc"))
        sums = w.gep(t, "%tile", w(f"mul i64 {i}, {v.nr}"))
        for j, mask in enumerate(masks):
            p = start if j == 0 else w.gep(t, start, str(j * lanes))
            x = w(f"load {vec}, ptr {w.gep(t, sums, str(j * lanes))}, align 64")
            w.do(f"call void @llvm.masked.store.v{lanes}{dtype}.p0("
                 f"{vec} {_added(w, vec, lanes, dtype, align, p, adds[j], x)}, ptr {p}, "
                 f"i32 {align}, {mask_type} {mask})")

    w.loop("0", "%mr", 1, row, "i", paired=True)  # (by two, not the eight LLVM chose at run
    # time: W3's kernel compiled 137 -> 130 ms with `.epilogue`'s likewise; a 250 x 64 x 250
    # product with its bias and relu, a tenth of its tiles edge ones, ran the same)
    w.when("%epilogue", lambda: w.do(
        f"call void @{name}.epilogue(ptr %c, i64 %ldc, i64 %mr, i64 %nr, ptr %rb, "
        "i64 %rs, ptr %cb, i1 %relu, ptr %res, i64 %ldr)"))
    return w.end()


def transposed_edge(symbol: str, t: str, v: Variant) -> list[str]:
    """`@<symbol>(tile, ...)`, `.edge`'s parameters: any tile of a C stored transposed
    (GemmSpec.c_transposed: `_transposed_tile`), and the -0.0s it reads where there is
    nothing (`@<symbol>.no_bias`, `neutral_bias`). A module of its own
    (gemm.transposed_module), which only programs with such a product (a convolution's, its
    pixels as rows) load: in the kernel's module it took 15% of that module's compile time
    (W3's kernel 117 -> 100 ms, one core), in every program's first call."""
    w = Writer()
    w.lines.append(f"define void @{symbol}({EDGE_ARGS}, {TILE_EPILOGUE}) noinline {WIDE} {{")
    w.label("%entry")
    _transposed_tile(w, symbol, t, v)
    return [*neutral_bias(symbol, t, v), *w.end()]


def _added(w: Writer, vec: str, lanes: int, dtype: str, align: int, p: str, mask: str,
           x: str) -> str:
    """x + what C holds at p (its lanes in `mask`) where %load, else x."""
    old = w(f"call {vec} @llvm.masked.load.v{lanes}{dtype}.p0(ptr {p}, i32 {align}, "
            f"<{lanes} x i1> {mask}, {vec} zeroinitializer)")
    return w(f"select i1 %load, {vec} {w(f'fadd {vec} {old}, {x}')}, {vec} {x}")


MOST_ROWS = 16
"""The most rows a tile has (target.tiles' MR, any height: 14 or 16 with AVX-512): `.edge`, in
the kernel's module, serves the tiles of every height."""


def _transposed_tile(w: Writer, name: str, t: str, v: Variant) -> None:
    """`.edge.transposed`'s tile into a C stored transposed (GemmSpec.c_transposed: the tile's
    column j is C's row j, %ldc apart): per lanes x lanes block of the spilled sums (a loop over the
    tile's vectors), the block transposed in registers (`_transpose`; rows past %mr .no_bias's)
    into a stack buffer, then per column below %nr, its first %mr lanes added to what C
    holds where %load, through the epilogue (`_store_tile`'s steps in its order: the rows'
    bias a vector here, the column's a broadcast), and stored. One straight path: where
    %epilogue does not hold, the biases and the residual are .no_bias (x + -0.0 is x, every
    x) and relu is off. Loops, not unrolled: unrolled over NR columns, the code took LLVM
    55 ms more to compile, in every kernel."""
    lanes, dtype, align = v.lanes, v.dtype, v.element[1]
    vec, mask_type = f"<{lanes} x {t}>", f"<{lanes} x i1>"
    load = _splat_i1(w, lanes, "%load")
    relu = _splat_i1(w, lanes, w("and i1 %relu, %epilogue"))
    none = f"@{name}.no_bias"
    rb, cb, res = (w(f"select i1 %epilogue, ptr {p}, ptr {none}") for p in ("%rb", "%cb", "%res"))
    rs, ldr = (w(f"select i1 %epilogue, i64 {x}, i64 0") for x in ("%rs", "%ldr"))
    cs = w("zext i1 %epilogue to i64")  # (the columns' bias: contiguous, or .no_bias's)
    columns = w(f"alloca [{lanes * lanes} x {t}], align 64", "columns")

    def masked_load(p: str, mask: str) -> str:
        return w(f"call {vec} @llvm.masked.load.v{lanes}{dtype}.p0(ptr {p}, i32 {align}, "
                 f"{mask_type} {mask}, {vec} zeroinitializer)")

    def rows_from(first: int) -> None:  # the tile's rows first.. (lanes of them)
        inside = _lanes_below(w, lanes, first, "%mr")
        rows_bias = masked_load(w.gep(t, rb, w(f"mul i64 {rs}, {first}")), inside)
        # (no residual: .no_bias, %ldr 0, read from its start)
        residual = w(f"select i1 {w(f'icmp eq i64 {ldr}, 0')}, ptr {res}, "
                     f"ptr {w.gep(t, res, str(first))}")

        def column(j: str, x: str, first=first, inside=inside, rows_bias=rows_bias,
                   residual=residual) -> None:  # the tile's column j: C's row j
            p = w.gep(t, "%c", w.add(w(f"mul i64 {j}, %ldc"), str(first)))
            old = masked_load(p, w(f"and {mask_type} {inside}, {load}"))
            x = w(f"select i1 %load, {vec} {w(f'fadd {vec} {old}, {x}')}, {vec} {x}")
            bias = w(f"load {t}, ptr {w.gep(t, cb, w(f'mul i64 {cs}, {j}'))}, align {align}")
            splat = w(f"shufflevector {vec} {w(f'insertelement {vec} poison, {t} {bias}, i64 0')}"
                      f", {vec} poison, <{lanes} x i32> zeroinitializer")
            x = w(f"fadd {vec} {w(f'fadd {vec} {x}, {rows_bias}')}, {splat}")
            x = w(f"fadd {vec} {x}, "
                  f"{masked_load(w.gep(t, residual, w(f'mul i64 {j}, {ldr}')), inside)}")
            cut = w(f"and {mask_type} {w(f'fcmp ole {vec} {x}, zeroinitializer')}, {relu}")
            x = w(f"select {mask_type} {cut}, {vec} zeroinitializer, {vec} {x}")
            w.do(f"call void @llvm.masked.store.v{lanes}{dtype}.p0({vec} {x}, ptr {p}, "
                 f"i32 {align}, {mask_type} {inside})")

        def block(j0: str, first=first, column=column) -> None:  # columns j0 .. j0 + lanes
            rows = []
            for r in range(lanes):  # (a row past %mr: .no_bias read instead, never stored)
                if first + r < MOST_ROWS:
                    at = w.gep(t, "%tile", w.add(j0, str((first + r) * v.nr)))
                    at = w(f"select i1 {w(f'icmp slt i64 {first + r}, %mr')}, ptr {at}, "
                           f"ptr {none}")
                    rows.append(w(f"load {vec}, ptr {at}, align {align}"))
                else:
                    rows.append("zeroinitializer")
            for c, x in enumerate(_transpose(w, v, name, rows)):
                w.do(f"store {vec} {x}, ptr {w.gep(t, columns, str(c * lanes))}, align 64")
            w.loop("0", w.min(str(lanes), w(f"sub i64 %nr, {j0}")), 1, lambda c: column(
                w.add(j0, c), w(f"load {vec}, ptr {w.gep(t, columns, w(f'mul i64 {c}, {lanes}'))}"
                                f", align 64")), "column", scalar=True)

        w.loop("0", "%nr", lanes, block, "block", scalar=True)

    for first in range(0, MOST_ROWS, lanes):
        w.when(w(f"icmp slt i64 {first}, %mr"), lambda first=first: rows_from(first))


def _splat_i1(w: Writer, lanes: int, flag: str) -> str:
    mask_type = f"<{lanes} x i1>"
    return w(f"shufflevector {mask_type} {w(f'insertelement {mask_type} poison, i1 {flag}, i64 0')}"
             f", {mask_type} poison, <{lanes} x i32> zeroinitializer")


EPILOGUE_ARGS = ("ptr %c, i64 %ldc, i64 %rows, i64 %columns, ptr %rb, i64 %rs, ptr %cb, "
                 "i1 %relu, ptr %res, i64 %ldr")
"""`.epilogue`'s parameters: rows x columns (at most NR) of C from %c, rows %ldc apart; the
bias of row i at %rb + i * %rs, of column j at %cb + j; whether relu follows; the residual's
row i at %res + i * %ldr."""


def neutral_bias(name: str, t: str, v: Variant) -> list[str]:
    """`@<kernel>.no_bias`: NR elements of -0.0, what `.epilogue` adds where a call has no bias
    of that kind: x + -0.0 is x for every x (-0 and NaN included), so one code path serves
    every epilogue and nothing is branched on per element."""
    values = ", ".join(f"{t} -0.0" for _ in range(v.nr))
    return [f"@{name}.no_bias = internal constant [{v.nr} x {t}] [{values}], align 64", ""]


def epilogue(name: str, t: str, v: Variant) -> list[str]:
    """`.epilogue(EPILOGUE_ARGS)`: C[i, j] = relu?(C[i, j] + rb[i * rs] + cb[j] + res[i, j])
    over the rows and the first `columns` lanes of an NR-wide tile (kernel.gemm's epilogue:
    what a call has not is `.no_bias`, stride 0); relu as tape.relu, maximum(x, +0): x <= 0
    (not NaN) becomes +0. The driver runs it where the tiles could not (`.finish`); the
    micro-kernel applies the same steps to its registers (`_store_tile`)."""
    w = Writer()
    lanes, dtype, align = v.lanes, v.dtype, v.element[1]
    vec, mask_type = f"<{lanes} x {t}>", f"<{lanes} x i1>"
    w.lines.append(f"define internal void @{name}.epilogue({EPILOGUE_ARGS}) noinline {WIDE} {{")
    w.label("%entry")
    vectors = v.nr // lanes
    masks = [_lanes_below(w, lanes, j * lanes, "%columns") for j in range(vectors)]

    def masked_load(p: str, mask: str) -> str:
        return w(f"call {vec} @llvm.masked.load.v{lanes}{dtype}.p0(ptr {p}, i32 {align}, "
                 f"{mask_type} {mask}, {vec} zeroinitializer)")

    columns = [masked_load(w.gep(t, "%cb", str(j * lanes)), masks[j]) for j in range(vectors)]
    relu = _splat_i1(w, lanes, "%relu")

    def row(i: str) -> None:
        bias = w(f"load {t}, ptr {w.gep(t, '%rb', w(f'mul i64 {i}, %rs'))}, align {align}")
        splat = w(f"shufflevector {vec} {w(f'insertelement {vec} poison, {t} {bias}, i64 0')}, "
                  f"{vec} poison, <{lanes} x i32> zeroinitializer")
        start = w.gep(t, "%c", w(f"mul i64 {i}, %ldc"))
        residual = w.gep(t, "%res", w(f"mul i64 {i}, %ldr"))
        for j in range(vectors):
            p = start if j == 0 else w.gep(t, start, str(j * lanes))
            x = w(f"fadd {vec} {w(f'fadd {vec} {masked_load(p, masks[j])}, {splat}')}, "
                  f"{columns[j]}")
            x = w(f"fadd {vec} {x}, {masked_load(w.gep(t, residual, str(j * lanes)), masks[j])}")
            cut = w(f"and {mask_type} {w(f'fcmp ole {vec} {x}, zeroinitializer')}, {relu}")
            x = w(f"select {mask_type} {cut}, {vec} zeroinitializer, {vec} {x}")
            w.do(f"call void @llvm.masked.store.v{lanes}{dtype}.p0({vec} {x}, ptr {p}, "
                 f"i32 {align}, {mask_type} {masks[j]})")

    w.loop("0", "%rows", 1, row, "i", paired=True)
    return w.end()


TILE_EPILOGUE = ("ptr %rb, i64 %rs, ptr %cb, i1 %relu, ptr %res, i64 %ldr, i1 %epilogue, "
                 "i1 %transposed")
"""The micro-kernel's last parameters: the epilogue's operands as `.epilogue` takes them (the
rows' bias from the tile's first row, the columns' from its first column, the residual from
the tile's first element), whether to apply it, and whether C is stored transposed
(GemmSpec.c_transposed: the tile's (i, j) at %c + j * %ldc + i, the residual's likewise;
every tile then goes through `.edge`)."""


def _store_tile(w: Writer, vec: str, acc: list[list[str]], lanes: int, align: int,
                add: bool, epilogue: bool) -> None:
    """The whole tile's registers into C (rows %ldc apart), added to what C holds where `add`,
    then through kernel.gemm's epilogue where `epilogue` (TILE_EPILOGUE's operands: + the
    row's and the column's bias, + the residual, relu, as `.epilogue` takes them)."""
    t = vec.split(" x ")[1].rstrip(">")
    mask_type = f"<{lanes} x i1>"

    def load(p: str) -> str:
        return w(f"load {vec}, ptr {p}, align {align}")

    columns = [load(w.gep(t, "%cb", str(v * lanes))) for v in range(len(acc[0]))] \
        if epilogue else []
    relu = _splat_i1(w, lanes, "%relu") if epilogue else ""

    def finished(value: str, v: int, bias: str, residual: str) -> str:  # the epilogue's steps
        if not epilogue:
            return value
        value = w(f"fadd {vec} {w(f'fadd {vec} {value}, {bias}')}, {columns[v]}")
        value = w(f"fadd {vec} {value}, {load(w.gep(t, residual, str(v * lanes)))}")
        cut = w(f"and {mask_type} {w(f'fcmp ole {vec} {value}, zeroinitializer')}, {relu}")
        return w(f"select {mask_type} {cut}, {vec} zeroinitializer, {vec} {value}")

    for i, registers in enumerate(acc):
        row = w.gep(t, "%c", w(f"mul i64 %ldc, {i}"))
        bias, residual = "", w.gep(t, "%res", w(f"mul i64 %ldr, {i}"))
        if epilogue:
            scalar = w(f"load {t}, ptr {w.gep(t, '%rb', w(f'mul i64 %rs, {i}'))}, "
                       f"align {align}")
            one = w(f"insertelement {vec} poison, {t} {scalar}, i64 0")
            bias = w(f"shufflevector {vec} {one}, {vec} poison, "
                     f"<{lanes} x i32> zeroinitializer")
        for v, register in enumerate(registers):
            p = row if v == 0 else w.gep(t, row, str(v * lanes))
            value = w(f"fadd {vec} {load(p)}, {register}") if add else register
            w.do(f"store {vec} {finished(value, v, bias, residual)}, ptr {p}, align {align}")


def _lanes_below(w: Writer, lanes: int, first: int, bound: str) -> str:
    """The <lanes x i1> mask of lanes first, first + 1, ... that are below `bound` (an i64)."""
    index = ", ".join(f"i64 {first + lane}" for lane in range(lanes))
    one = w(f"insertelement <{lanes} x i64> poison, i64 {bound}, i64 0")
    splat = w(f"shufflevector <{lanes} x i64> {one}, <{lanes} x i64> poison, "
              f"<{lanes} x i32> zeroinitializer")
    return w(f"icmp slt <{lanes} x i64> <{index}>, {splat}")


def _strides(order: str, unit: bool) -> tuple[str, str]:
    """An operand's row and column strides inside a packing routine: its arguments, but the
    inner one (the column's when packing along rows, the row's down columns) is the constant
    1 where the variant says so."""
    if not unit:
        return "%s1", "%s2"
    return ("%s1", "1") if order == "rows" else ("1", "%s2")


def _by_strides(routine: str, params: str, args: str, linkage: str = "internal ") -> list[str]:
    """`routine`(params): the walk along rows when the column stride %s2 is at most the row
    stride %s1 (plan.along_rows), else down columns; `args` passes the parameters on."""
    w = Writer()
    w.lines.append(f"define {linkage}void @{routine}({params}) {COLD} {WIDE} {{")
    w.label("%entry")
    w.choose(w("icmp sle i64 %s2, %s1"),
             lambda: w.do(f"call void @{routine}.rows({args})"),
             lambda: w.do(f"call void @{routine}.columns({args})"))
    return w.end()


_PACK_B = ("ptr noalias %src, ptr noalias align 64 %dst, i64 %pc, i64 %kc, i64 %j0, i64 %j1, "
           "i64 %s1, i64 %s2")
_PACK_A = ("ptr noalias %src, ptr noalias align 64 %dst, i64 %ic, i64 %mc, i64 %pc, i64 %kc, "
           "i64 %m, i64 %s1, i64 %s2, ptr %transpose")
"""`.pack_a`'s parameters: where the panels go, A's rows [ic, ic + mc) (clamped at %m) and
columns [pc, pc + kc), its strides, and the kernel's `transpose_lines` (`@<kernel>.transpose`,
in the kernel's module, which the tiles' modules of every height share)."""


def _arguments(params: str) -> str:
    return ", ".join(p.replace("noalias ", "").replace("align 64 ", "")
                     for p in params.split(", "))


def pack_b(name: str, t: str, v: Variant) -> list[str]:
    """`.pack_b` and its two walks (`_pack_b`)."""
    return [*_by_strides(f"{name}.pack_b", _PACK_B, _arguments(_PACK_B)),
            *_pack_b(name, t, v, "rows"), *_pack_b(name, t, v, "columns")]


def pack_a(name: str, t: str, v: Variant) -> list[str]:
    """`.pack_a` (one of the tiles the caller passes the kernel) and its two walks
    (`_pack_a`)."""
    return [*_by_strides(f"{name}.pack_a", _PACK_A, _arguments(_PACK_A), linkage=""),
            *_pack_a(name, t, v, "rows"), *_pack_a(name, t, v, "columns")]


def _pack_b(name: str, t: str, v: Variant, order: str) -> list[str]:
    """Bp[jj / NR][p][jj % NR] = B[pc + p, j0 + jj] for p < kc and j0 + jj < j1, zero past j1
    up to a whole panel; B[p, j] = src[p * s1 + j * s2]. Where B's rows are contiguous, the whole
    panels B_ROWS rows at a time (a vector per row and panel); else panel by panel, along B's
    rows or down its columns (a transposed B; contiguous columns as transposed blocks,
    the kernel's `transpose_lines`); a ragged last panel as masked vectors along contiguous
    rows, or contiguous columns through `transpose_lines` and zeros past them, else element
    by element."""
    w = Writer()
    nr = v.nr
    b1, b2 = _strides(order, v.b_unit)
    w.lines.append(f"define internal void @{name}.pack_b.{order}({_PACK_B}) {WIDE} {{")
    w.label("%entry")

    def address(p: str, j: str) -> str:  # of B[pc + p, j]
        return w.gep(t, "%src", w.add(w(f"mul i64 {w(f'add i64 %pc, {p}')}, {b1}"),
                                      w(f"mul i64 {j}, {b2}")))

    def panel(jp: str, ragged: bool = False) -> None:  # (ragged: the edge one, narrower)
        into = w.gep(t, "%dst", w(f"mul i64 {w(f'sub i64 {jp}, %j0')}, %kc"))
        width = w.min(str(nr), w(f"sub i64 %j1, {jp}"))

        def copy(p: str, jj: str) -> None:
            x = w(f"load {t}, ptr {address(p, w(f'add i64 {jp}, {jj}'))}")
            w.do(f"store {t} {x}, ptr {w.gep(t, into, w.add(w(f'mul i64 {p}, {nr}'), jj))}")

        def whole() -> None:  # (contiguous rows: the walk below, a group of rows at a time)
            if order == "rows":
                w.loop("0", "%kc", 1, lambda p: w.loop(
                    "0", str(nr), 1, lambda jj: copy(p, jj), "jj"), "p")
            elif v.b_unit:  # B's columns contiguous (a transposed B): transposed blocks of
                lanes = v.lanes  # a vector's lanes of columns (`transpose_lines`)
                w.loop("0", str(nr), lanes, lambda first: w.do(
                    f"call void @{name}.transpose(ptr {address('0', w.add(jp, first))}, "
                    f"i64 {b2}, i64 {lanes}, i64 {lanes}, ptr {w.gep(t, into, first)}, "
                    f"i64 {nr}, i64 %kc)"), "jg", scalar=True)
            else:  # down B's columns, each read along k
                w.loop("0", str(nr), 1, lambda jj: w.loop(
                    "0", "%kc", 1, lambda p: copy(p, jj), "p"), "jj")

        def edge() -> None:  # the last, narrower panel: zero past j1
            if order == "rows" and v.b_unit:  # one masked vector load per row
                vec, mask = f"<{nr} x {t}>", _lanes_below(w, nr, 0, width)

                def masked(p: str) -> None:
                    x = w(f"call {vec} @llvm.masked.load.v{nr}{v.dtype}.p0(ptr {address(p, jp)}, "
                          f"i32 {v.element[1]}, <{nr} x i1> {mask}, {vec} zeroinitializer)")
                    w.do(f"store {vec} {x}, ptr {w.gep(t, into, w(f'mul i64 {p}, {nr}'))}, "
                         f"align {v.element[1]}")

                w.loop("0", "%kc", 1, masked, "p", scalar=True)
                return
            if v.b_unit:  # its columns through `transpose_lines` (a group at a time), then
                vec = f"<{nr} x {t}>"  # zeros past them, a masked store per row
                for first in range(0, nr, v.lanes):
                    count = w.min(str(v.lanes), w(f"sub i64 {width}, {first}"))
                    w.when(w(f"icmp sgt i64 {count}, 0"), lambda first=first, count=count: w.do(
                        f"call void @{name}.transpose(ptr {address('0', w.add(jp, str(first)))}, "
                        f"i64 {b2}, i64 {count}, i64 {count}, "
                        f"ptr {w.gep(t, into, str(first))}, i64 {nr}, i64 %kc)"))
                past = w(f"xor <{nr} x i1> {_lanes_below(w, nr, 0, width)}, "
                         f"<{', '.join(['i1 true'] * nr)}>")
                w.loop("0", "%kc", 1, lambda p: w.do(
                    f"call void @llvm.masked.store.v{nr}{v.dtype}.p0({vec} zeroinitializer, "
                    f"ptr {w.gep(t, into, w(f'mul i64 {p}, {nr}'))}, i32 {v.element[1]}, "
                    f"<{nr} x i1> {past})"), "p", scalar=True)
                return

            def row(p: str) -> None:
                w.loop("0", width, 1, lambda jj: copy(p, jj), "jj")
                w.loop(width, str(nr), 1, lambda jj: w.do(
                    f"store {t} 0.0, ptr {w.gep(t, into, w.add(w(f'mul i64 {p}, {nr}'), jj))}"),
                    "z")

            w.loop("0", "%kc", 1, row, "p")

        if ragged:
            edge()
        else:
            w.choose(w(f"icmp eq i64 {width}, {nr}"), whole, edge)

    if order == "rows" and v.b_unit:  # the whole panels a group of rows at a time, then the edge
        vec = f"<{nr} x {t}>"
        panels = w(f"sdiv i64 {w('sub i64 %j1, %j0')}, {nr}")
        wholes = w.add("%j0", w(f"mul i64 {panels}, {nr}"))

        def rows(first: str, count: int) -> None:  # rows first.. of every whole panel
            def one(jp: str) -> None:
                into = w.gep(t, "%dst", w(f"mul i64 {w(f'sub i64 {jp}, %j0')}, %kc"))
                for r in range(count):
                    p = w.add(first, str(r))
                    x = w(f"load {vec}, ptr {address(p, jp)}, align {v.element[1]}")
                    w.do(f"store {vec} {x}, ptr {w.gep(t, into, w(f'mul i64 {p}, {nr}'))}, "
                         f"align {v.element[1]}")

            w.loop("%j0", wholes, nr, one, "jw", scalar=True)

        grouped = w(f"and i64 %kc, {-B_ROWS}")
        w.loop("0", grouped, B_ROWS, lambda p: rows(p, B_ROWS), "pg")
        w.loop(grouped, "%kc", 1, lambda p: rows(p, 1), "pr", scalar=True)
        w.when(w(f"icmp slt i64 {wholes}, %j1"), lambda: panel(wholes, ragged=True))
    else:
        w.loop("%j0", "%j1", nr, panel, "jp")
    return w.end()


B_ROWS = 8
"""Rows of B a contiguous walk packs at once, into each whole panel in turn: B_ROWS streams
along B's rows, each panel written B_ROWS lines at a time. Panel by panel down B's rows (a
line per row, rows a page or more apart: no stream the prefetchers follow) it took 2.7% of
W2's n=1024 samples (`perf`, one core, Zen 4) and 4% of W3's; this way 1.1% and 3.2%, W2 at
n=1024 about 2% and the W3 step 1.2% faster (configurations alternated call by call in one
process)."""


def _pack_a(name: str, t: str, v: Variant, order: str) -> list[str]:
    """Ap[i / MR][p][i % MR] = A[min(ic + i, m - 1), pc + p] for i < mc rounded up to MR;
    A[i, p] = src[i * s1 + p * s2]. Panel by panel (MR rows): along each row of A (rows
    contiguous: as transposed blocks, `_transposed_rows`), or, a transposed A, MR contiguous
    elements per k (as vectors where they are contiguous, `_column_runs`); rows clamped only
    in the last panel (every panel, the blocks: once per panel, not per element), where
    the runs go element by element."""
    w = Writer()
    mr = v.mr
    transposed = order == "rows" and _transposes(v)
    a1, a2 = _strides(order, v.a_unit)
    w.lines.append(f"define internal void @{name}.pack_a.{order}({_PACK_A}) {WIDE} {{")
    w.label("%entry")
    rounded = w(f"add i64 %mc, {mr - 1}")
    rows = w(f"mul i64 {w(f'sdiv i64 {rounded}, {mr}')}, {mr}")
    last = w("sub i64 %m, 1")

    def panel(ip: str) -> None:
        into = w.gep(t, "%dst", w(f"mul i64 {ip}, %kc"))
        top = w(f"add i64 %ic, {ip}")

        def fill(clamp: bool) -> None:
            def row_of(ii: str) -> str:
                row = w(f"add i64 {top}, {ii}")
                return w.min(row, last) if clamp else row

            def copy(row: str, p: str, ii: str) -> None:
                src = w.add(w(f"mul i64 {row}, {a1}"), w(f"mul i64 {w(f'add i64 %pc, {p}')}, {a2}"))
                x = w(f"load {t}, ptr {w.gep(t, '%src', src)}")
                w.do(f"store {t} {x}, ptr {w.gep(t, into, w.add(w(f'mul i64 {p}, {mr}'), ii))}")

            if transposed:
                _transposed_rows(w, t, v, into, top)
            elif order == "rows":  # along each of the MR rows
                w.loop("0", str(mr), 1, lambda ii: (lambda row: w.loop(
                    "0", "%kc", 1, lambda p: copy(row, p, ii), "p"))(row_of(ii)),
                    "ii", scalar=True)
            elif v.a_unit and not clamp:  # MR contiguous elements per k: vectors of them
                w.loop("0", "%kc", 1, lambda p: _column_runs(w, t, v, into, top, p), "p",
                       scalar=True)
            else:  # a transposed A: MR contiguous elements for each k
                w.loop("0", "%kc", 1, lambda p: w.loop(
                    "0", str(mr), 1, lambda ii: copy(row_of(ii), p, ii), "ii"), "p",
                    scalar=True)

        if transposed:
            fill(True)
        else:
            w.choose(w(f"icmp sle i64 {w(f'add i64 {top}, {mr}')}, %m"), lambda: fill(False),
                     lambda: fill(True))

    w.loop("0", rows, mr, panel, "ip")
    return w.end()


def _column_runs(w: Writer, t: str, v: Variant, into: str, top: str, p: str) -> None:
    """A panel's MR rows at k = p of a transposed A (rows contiguous: row i of column k at
    %src + top + i + (%pc + p) * %s2), none clamped, copied to Ap[p][MR] a vector's lanes
    at a time (the last masked past MR). Element by element it took 5% of W3's weight
    gradients."""
    lanes, mr, size = v.lanes, v.mr, v.element[1]
    vec = f"<{lanes} x {t}>"
    column = w.gep(t, "%src", w.add(top, w(f"mul i64 {w(f'add i64 %pc, {p}')}, %s2")))
    at = w.gep(t, into, w(f"mul i64 {p}, {mr}"))
    for first in range(0, mr, lanes):
        count = min(lanes, mr - first)
        source = w.gep(t, column, str(first)) if first else column
        target = w.gep(t, at, str(first)) if first else at
        if count == lanes:
            x = w(f"load {vec}, ptr {source}, align {size}")
            w.do(f"store {vec} {x}, ptr {target}, align {size}")
            continue
        mask = "<" + ", ".join(f"i1 {'true' if lane < count else 'false'}"
                               for lane in range(lanes)) + ">"
        x = w(f"call {vec} @llvm.masked.load.v{lanes}{v.dtype}.p0(ptr {source}, i32 {size}, "
              f"<{lanes} x i1> {mask}, {vec} zeroinitializer)")
        w.do(f"call void @llvm.masked.store.v{lanes}{v.dtype}.p0({vec} {x}, ptr {target}, "
             f"i32 {size}, <{lanes} x i1> {mask})")


def _transposes(v: Variant) -> bool:
    """`_pack_a` packs A along its rows as transposed blocks: A's rows are contiguous, and
    each group of `v.lanes` rows of a panel (the last one may be short) has at least half of
    them (fewer would load more rows than they store: one row, MR = 1, is a copy)."""
    rest = v.mr % v.lanes
    return v.a_unit and (rest == 0 or 2 * rest >= v.lanes)


def _transposed_rows(w: Writer, t: str, v: Variant, into: str, top: str) -> None:
    """A panel of MR rows of A (row i at %src + min(top + i, %m - 1) * %s1 + %pc, contiguous
    along k) into Ap[p][MR], a group of lanes rows at a time through the kernel's
    `transpose_lines` (%transpose): the rows past %m the last one again."""
    lanes, mr = v.lanes, v.mr
    for first in range(0, mr, lanes):
        count = min(lanes, mr - first)
        row = w.add(top, str(first))
        line = w.gep(t, "%src", w.add(w(f"mul i64 {w.min(row, w('sub i64 %m, 1'))}, %s1"),
                                      "%pc"))
        rest = w.min(str(count), w(f"sub i64 %m, {row}"))
        valid = w(f"call i64 @llvm.smax.i64(i64 1, i64 {rest})")
        w.do(f"call void %transpose(ptr {line}, i64 %s1, i64 {valid}, i64 {count}, "
             f"ptr {w.gep(t, into, str(first))}, i64 {mr}, i64 %kc)")


TRANSPOSE_ARGS = ("ptr noalias %line, i64 %stride, i64 %valid, i64 %count, "
                  "ptr noalias %dst, i64 %width, i64 %kc")


def transpose_lines(name: str, t: str, v: Variant) -> list[str]:
    """`@<name>.transpose(TRANSPOSE_ARGS)`: lanes lines of an operand, each contiguous along k
    (line l at %line + min(l, %valid - 1) * %stride: past the valid ones, the last again),
    written transposed, dst[p * %width + l] = line l's element p for p < %kc and l < %count:
    by blocks of lanes x lanes, loaded, transposed in registers (`_transpose`) and stored a
    vector per k (masked past %count), the last %kc % lanes element by element. What both
    transposing packings call, a group of lanes lines of a panel at a time: `.pack_b.columns`
    (B's columns) and the tiles' `.pack_a.rows` (A's rows), so a kernel compiles that code
    once, not once more in each height's tiles: W3's kernel and tiles 175 -> 157 ms (one core,
    medians of ten alternating in one process), W2 (n = 1024, B as it is and transposed) as
    fast (six alternating process pairs: 108.5 and 107.5 GFLOP/s either way), the same bits.
    The element-by-element walk took 5-8% of W2 (n=512)."""
    w = Writer()
    lanes, size = v.lanes, v.element[1]
    vec = f"<{lanes} x {t}>"
    w.lines.append(f"define void @{name}.transpose({TRANSPOSE_ARGS}) {WIDE} {{")
    w.label("%entry")
    last = w("sub i64 %valid, 1")
    bases = [w.gep(t, "%line", w(f"mul i64 {w.min(str(r), last)}, %stride"))
             for r in range(lanes)]
    whole = w(f"and i64 %kc, {-lanes}")
    all_lanes = w(f"icmp eq i64 %count, {lanes}")
    mask = _lanes_below(w, lanes, 0, "%count")

    def block(p0: str) -> None:
        rows = _transpose(w, v, name, [
            w(f"load {vec}, ptr {w.gep(t, base, p0)}, align {size}") for base in bases])
        targets = [w.gep(t, "%dst", w(f"mul i64 {w.add(p0, str(c))}, %width"))
                   for c in range(lanes)]
        w.choose(all_lanes, lambda: [w.do(f"store {vec} {x}, ptr {at}, align {size}")
                                     for x, at in zip(rows, targets, strict=True)],
                 lambda: [w.do(f"call void @llvm.masked.store.v{lanes}{v.dtype}.p0({vec} {x}, "
                               f"ptr {at}, i32 {size}, <{lanes} x i1> {mask})")
                          for x, at in zip(rows, targets, strict=True)])

    def element(p: str, line: str) -> None:
        start = w.gep(t, "%line", w(f"mul i64 {w.min(line, last)}, %stride"))
        x = w(f"load {t}, ptr {w.gep(t, start, p)}")
        w.do(f"store {t} {x}, ptr {w.gep(t, '%dst', w.add(w(f'mul i64 {p}, %width'), line))}")

    w.loop("0", whole, lanes, block, "p0", scalar=True)
    w.loop(whole, "%kc", 1, lambda p: w.loop("0", "%count", 1, lambda line: element(p, line),
                                              "l", scalar=True), "p", scalar=True)
    return w.end()


def _transpose(w: Writer, v: Variant, name: str, rows: list[str]) -> list[str]:
    """The `lanes` vectors of a lanes x lanes block, row r in rows[r], as its columns: log2
    lanes rounds of shuffles, each exchanging the off-diagonal halves of blocks (for 16
    lanes, 64 shuffles; `_masks`): shufflevectors, or, where a vector is 512 bits, AVX-512's
    two-source permutes on the masks of `@<name>.transposes` (`transpose_table`)."""
    lanes, t = v.lanes, v.element[0]
    vec = f"<{lanes} x {t}>"
    masks = _masks(lanes)
    permute = _permute(v)

    def shuffle(a: str, b: str, i: int, loaded: list[str]) -> str:
        if permute is None:
            picks = ", ".join(f"i32 {x}" for x in masks[i])
            return w(f"shufflevector {vec} {a}, {vec} {b}, <{lanes} x i32> <{picks}>")
        index = f"<{lanes} x {permute[1]}>"
        return w(f"call {vec} @{permute[0]}({vec} {a}, {index} {loaded[i % 2]}, {vec} {b})")

    for round_ in range(len(masks) // 2):  # rows r and r + half swap the blocks off their
        half = lanes >> (round_ + 1)  # diagonal
        loaded = []
        if permute is not None:
            index = f"<{lanes} x {permute[1]}>"
            loaded = [w(f"load {index}, ptr {w.gep(index, f'@{name}.transposes', str(i))}, "
                        "align 64") for i in (2 * round_, 2 * round_ + 1)]
        swapped = list(rows)
        for r in (r for r in range(lanes) if not r & half):
            a, b = rows[r], rows[r + half]
            swapped[r] = shuffle(a, b, 2 * round_, loaded)
            swapped[r + half] = shuffle(a, b, 2 * round_ + 1, loaded)
        rows = swapped
    return rows


def _masks(lanes: int) -> list[list[int]]:
    """`_transpose`'s masks over the two rows' lanes (the first row's, then the second's), two
    per round (half = lanes / 2, ..., 1): the first row's blocks off the diagonal taken from
    the second, and the second's from the first."""
    out = []
    half = lanes // 2
    while half:
        out.append([c if not c & half else lanes + c - half for c in range(lanes)])
        out.append([c + half if not c & half else lanes + c for c in range(lanes)])
        half //= 2
    return out


def _permute(v: Variant) -> tuple[str, str] | None:
    """AVX-512's two-source permute of `v`'s vectors and the type of its lane indices, where
    a vector is 512 bits (vpermi2ps, vpermi2pd), else None (shufflevectors). Each is one
    instruction, which LLVM selects as it is; of the same transposes written as
    shufflevectors its x86 shuffle lowering searched each of the 64 for a cheaper sequence:
    W3's kernel (the two modules) compiled 204 -> 194 ms (one core, medians of seven),
    and W2 (n = 1024, either operand transposed) and W3 ran the same, to the same bits."""
    if v.lanes * v.element[1] != 64:
        return None
    return (("llvm.x86.avx512.vpermi2var.ps.512", "i32") if v.dtype == "f32"
            else ("llvm.x86.avx512.vpermi2var.pd.512", "i64"))


def transpose_table(name: str, v: Variant) -> list[str]:
    """`@<name>.transposes`, `_transpose`'s masks (`_masks`) as `_permute`'s lane indices, and
    the permute's declaration, for a module of `v` whose code transposes blocks by permutes;
    nothing where it shuffles. A global written nowhere, not a constant: InstCombine folds a
    permute of constant indices back into the shufflevector (X86InstCombineIntrinsic)."""
    permute = _permute(v)
    if permute is None:
        return []
    intrinsic, lane = permute
    vec, index = f"<{v.lanes} x {v.element[0]}>", f"<{v.lanes} x {lane}>"
    rows = ", ".join(f"{index} <{', '.join(f'{lane} {x}' for x in mask)}>"
                     for mask in _masks(v.lanes))
    count = len(_masks(v.lanes))
    return [f"@{name}.transposes = internal global [{count} x {index}] [{rows}], align 64",
            f"declare {vec} @{intrinsic}({vec}, {index}, {vec})", ""]
