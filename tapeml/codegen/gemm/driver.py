"""A GEMM kernel's entry point and its loop nest, as LLVM IR text: `driver` writes
`@<symbol>` (claiming the scratch or the heap, then the parts on the thread pool, and adding
the groups' sums), `.range` (the pool's entry over a table of parts), `.part` (the Goto/BLIS
loop nest over one part), and, when the threads share one packed B, the jobs `.pack` and
`.rows`. The leaf functions they call are in routines.py.
"""

from __future__ import annotations

from collections.abc import Iterable

from tapeml.codegen.gemm.partition import Part, batch_groups, partition, shares_b
from tapeml.codegen.gemm.writer import WIDE, Writer
from tapeml.dialects.kernel import GemmSpec

_PART_ARGS = "ptr %A, ptr %B, ptr %C, i64 %b0, i64 %b1, i64 %m0, i64 %m1, i64 %n0, i64 %n1"


def _scratch_bytes(size: int, spec: GemmSpec, mr: int, nr: int, mc: int, kc: int
                   ) -> tuple[int, int]:
    """Bytes of one part's packing buffers: B's block ([n/NR][KC][NR]), then A's; each a
    multiple of 64."""
    b_bytes = -(-spec.n // nr) * nr * kc * size
    a_bytes = mc * kc * size
    return -(-b_bytes // 64) * 64, -(-a_bytes // 64) * 64


def driver(name: str, t: str, size: int, spec: GemmSpec, mr: int, nr: int, mc: int,
           kc: int, threads: int) -> list[str]:
    """The entry: the parts on the pool, each packing into its own slice of the kernel's
    scratch (the package doc); a second caller while the scratch is taken (another Python
    thread) packs into a slice of the heap instead, or, if the heap has no room, waits for the
    scratch."""
    w = Writer()
    m, n, k = spec.m, spec.n, spec.k
    w.lines.append(f"define void @{name}(ptr noalias %A, ptr noalias %B, ptr noalias %C) "
                   f"{WIDE} {{")
    w.label("%entry")
    if m == 0 or n == 0 or spec.batch == 0 or k == 0:
        if k == 0 and not spec.accumulate and m and n and spec.batch:  # an empty sum: C = 0
            total = m * n if spec.c0 == 0 else spec.batch * m * n
            w.loop("0", str(total), 1,
                   lambda i: w.do(f"store {t} 0.0, ptr {w.gep(t, '%C', i)}"), "z")
        return [f"@{name}.scratch_bytes = constant i64 0", *w.end()[:-1]]  # the only function
    shared = shares_b(spec, mr, threads)
    parts = [] if shared else partition(spec, mr, nr, threads)
    groups = batch_groups(spec)
    b_bytes, a_bytes = _scratch_bytes(size, spec, mr, nr, mc, kc)
    part_bytes = b_bytes + a_bytes
    sums = part_bytes * len(parts)  # where groups 1.. put their sums, after the packing slices
    total = b_bytes if shared else sums + (groups - 1) * m * n * size
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
    out = [f"@{name}.busy = internal global i8 0",
           f"@{name}.scratch = global ptr null, align 8  ; set by the loader",
           f"@{name}.scratch_bytes = constant i64 {total}", *w.end()]
    if shared:
        return out + _pack_job(name, t, spec, nr) + _rows_job(name, t, spec, mr, nr, mc, kc)
    if len(parts) > 1:
        out += _range(name, t, parts, part_bytes, spec, sums if groups > 1 else None)
    return out + _part(name, t, size, spec, mr, nr, mc, kc)


def _job(name: str, job: str) -> tuple[Writer, list[str], str, str]:
    """The head of one of the pool's jobs over the context [A, B, C, packed B, pc, depth]:
    the writer, the four pointers, pc and depth."""
    w = Writer()
    w.lines.append(f"define internal void @{name}.{job}(ptr %ctx, i64 %start, i64 %end) "
                   f"{WIDE} {{")
    w.label("%entry")
    fields = [w(f"getelementptr i64, ptr %ctx, i64 {i}") for i in range(6)]
    pointers = [w(f"load ptr, ptr {f}") for f in fields[:4]]
    return w, pointers, w(f"load i64, ptr {fields[4]}"), w(f"load i64, ptr {fields[5]}")


def _pack_job(name: str, t: str, spec: GemmSpec, nr: int) -> list[str]:
    """`.pack`: panels [start, end) of this block of B, packed where a whole pack puts them."""
    w, (_, b, _, bp), pc, depth = _job(name, "pack")
    j0 = w(f"mul i64 %start, {nr}")
    j1 = w.min(w(f"mul i64 %end, {nr}"), str(spec.n))
    dst = w.gep(t, bp, w(f"mul i64 {j0}, {depth}"))
    w.do(f"call void @{name}.pack_b(ptr {b}, ptr {dst}, i64 {pc}, i64 {depth}, i64 {j0}, "
         f"i64 {j1})")
    return w.end()


def _macro_kernel(w: Writer, name: str, t: str, n: int, mr: int, nr: int,
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
    return w.end()


def _i64s(values: Iterable[int | str]) -> str:
    return ", ".join(f"i64 {v}" for v in values)


def _range(name: str, t: str, parts: list[Part], part_bytes: int, spec: GemmSpec,
           sums: int | None) -> list[str]:
    """The pool's entry: parts [start, end) of the table, on the buffers the context holds,
    part p packing into the scratch's p-th slice. Groups of batches (`sums`: where their sums
    start in the scratch) write group 0's sum into C, group g's into the g-th of the sums."""
    table = ", ".join(f"[6 x i64] [{_i64s(part)}]" for part in parts)
    w = Writer()
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
            group0 = w(f"icmp eq i64 {i}, 0")
            offset = w(f"mul i64 {w(f'sub i64 {i}, 1')}, {spec.m * spec.n}")
            own = w.gep(t, w.gep("i8", buffers[3], str(sums)), offset)
            c = w(f"select i1 {group0}, ptr {buffers[2]}, ptr {own}")
            first = w(f"and i1 {group0}, {first}")
        w.do(f"call void @{name}.part(ptr {buffers[0]}, ptr {buffers[1]}, ptr {c}, "
             f"{_i64s(values)}, ptr {scratch}, i1 {first})")

    w.loop("%start", "%end", 1, body, "p")
    return w.end()


def _part(name: str, t: str, size: int, spec: GemmSpec, mr: int, nr: int, mc: int,
          kc: int) -> list[str]:
    """The loop nest over one part, all of k, packing into `%scratch`; `%first`: the first
    block of k adds into what C holds (C (+)= ...) rather than overwriting it."""
    w = Writer()
    n, k = spec.n, spec.k
    a0, b0, c0 = spec.a[0], spec.b[0], spec.c0
    w.lines.append(f"define internal void @{name}.part({_PART_ARGS}, ptr %scratch, i1 %first) "
                   f"{WIDE} {{")
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
    return w.end()[:-1]  # the module's last function: no blank line after it
