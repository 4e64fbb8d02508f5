"""A GEMM kernel's leaf functions, as LLVM IR text: the micro-kernel (`@<symbol>.tile`: an
MR x NR tile of C in vector registers) and the packing of A's and B's blocks into panels
(`.pack_a`, `.pack_b`). The driver (driver.py) calls them.
"""

from __future__ import annotations

from tapeml.codegen.gemm.writer import WIDE, Writer
from tapeml.codegen.gemm.plan import Variant


def micro_kernel(name: str, t: str, vec: str, lanes: int, mr: int, nr: int,
                 dtype: str) -> list[str]:
    """C[mr x nr tile] (+)= Ap[kc][MR]^T Bp[kc][NR], accumulated in registers."""
    w = Writer()
    vectors = nr // lanes
    acc = [[f"%c{i}.{v}" for v in range(vectors)] for i in range(mr)]
    new = [[f"%c{i}.{v}.n" for v in range(vectors)] for i in range(mr)]
    w.lines.append(f"define internal void @{name}.tile(i64 %kc, ptr noalias align 64 %a, "
                   f"ptr noalias align 64 %b, ptr noalias %c, i64 %ldc, i64 %mr, i64 %nr, "
                   f"i1 %load) {WIDE} {{")
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
    return w.end()


def _strides(order: str, unit: bool) -> tuple[str, str]:
    """An operand's row and column strides inside a packing routine: its arguments, but the
    inner one (the column's when packing along rows, the row's down columns) is the constant
    1 where the variant says so."""
    if not unit:
        return "%s1", "%s2"
    return ("%s1", "1") if order == "rows" else ("1", "%s2")


def pack_b(name: str, t: str, v: Variant) -> list[str]:
    """Bp[jj / NR][p][jj % NR] = B[pc + p, j0 + jj] for p < kc and j0 + jj < j1, zero past j1
    up to a whole panel; B[p, j] = src[p * s1 + j * s2]."""
    w = Writer()
    nr = v.nr
    b1, b2 = _strides(v.b_order, v.b_unit)
    w.lines.append(f"define internal void @{name}.pack_b(ptr noalias %src, ptr noalias align 64 "
                   f"%dst, i64 %pc, i64 %kc, i64 %j0, i64 %j1, i64 %s1, i64 %s2) {WIDE} {{")
    w.label("%entry")

    def element(p: str, j: str) -> None:
        at = w.packed(w(f"sub i64 {j}, %j0"), p, nr)
        row = w(f"add i64 %pc, {p}")
        src = w.add(w(f"mul i64 {row}, {b1}"), w(f"mul i64 {j}, {b2}"))
        x = w(f"load {t}, ptr {w.gep(t, '%src', src)}")
        w.do(f"store {t} {x}, ptr {w.gep(t, '%dst', at)}")

    if v.b_order == "rows":  # rows of B are contiguous (or nearly): stream them
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
    return w.end()


def pack_a(name: str, t: str, v: Variant) -> list[str]:
    """Ap[i / MR][p][i % MR] = A[min(ic + i, m - 1), pc + p] for i < mc rounded up to MR;
    A[i, p] = src[i * s1 + p * s2]."""
    w = Writer()
    mr = v.mr
    a1, a2 = _strides(v.a_order, v.a_unit)
    w.lines.append(f"define internal void @{name}.pack_a(ptr noalias %src, ptr noalias align 64 "
                   f"%dst, i64 %ic, i64 %mc, i64 %pc, i64 %kc, i64 %m, i64 %s1, i64 %s2) "
                   f"{WIDE} {{")
    w.label("%entry")
    rounded = w(f"add i64 %mc, {mr - 1}")
    rows = w(f"mul i64 {w(f'sdiv i64 {rounded}, {mr}')}, {mr}")
    last = w("sub i64 %m, 1")

    def element(i: str, p: str) -> None:
        at = w.packed(i, p, mr)
        row = w.min(w(f"add i64 %ic, {i}"), last)
        column = w(f"add i64 %pc, {p}")
        src = w.add(w(f"mul i64 {row}, {a1}"), w(f"mul i64 {column}, {a2}"))
        x = w(f"load {t}, ptr {w.gep(t, '%src', src)}")
        w.do(f"store {t} {x}, ptr {w.gep(t, '%dst', at)}")

    if v.a_order == "rows":  # rows of A are contiguous: read along them
        w.loop("0", rows, 1, lambda i: w.loop("0", "%kc", 1, lambda p: element(i, p), "p"), "i")
    else:
        w.loop("0", "%kc", 1, lambda p: w.loop("0", rows, 1, lambda i: element(i, p), "i"), "p")
    return w.end()
