"""A shape-generic GEMM kernel's entry point and its loop nest, as LLVM IR text: `driver`
writes `@<symbol>` (claiming the caller's scratch or the heap, then the parts on the thread
pool, and adding the groups' sums), `.range` (the pool's entry over the plan's table of
parts), `.part` (the Goto/BLIS loop nest over one part), and, when the threads share one
packed B, the jobs `.pack` and `.rows`. Every size, stride and choice of how the work is
shared out comes from the call's plan (plan.py); the leaf functions they call are in
routines.py.
"""

from __future__ import annotations

from tapeml.codegen.gemm.plan import FIELDS, INDEX, Variant
from tapeml.codegen.gemm.writer import COLD, WIDE, Writer

_PART_ARGS = ("ptr %A, ptr %B, ptr %C, ptr %extra, i64 %b0, i64 %b1, i64 %m0, i64 %m1, "
              "i64 %n0, i64 %n1, ptr %scratch, i1 %first, ptr %plan")
ENTRY_ARGS = ("ptr noalias %A, ptr noalias %B, ptr noalias %C, ptr %extra, ptr %plan, "
              "ptr %slot, ptr %busy")
"""The kernel's parameters: the three buffers, `%extra` (EXTRA), the call's plan, where the
caller keeps its scratch's address (bound by the loader) and the flag that says the scratch is
taken."""
TILES = ("tile", "tile.half", "tile.direct", "pack_a")
"""The functions of a variant's tiles (Variant.tiles, routines.py) the kernel calls: the
micro-kernels and A's packing, which depend on MR."""
EXTRA = ("bias", "residual", "rows", *TILES, "transposed", "pool")
"""What `%extra` points at, in order: the bias and the residual (null where the call has
none), the table of A's columns (a windows kernel's), the tiles (TILES; null where the variant
has none), the kernel's `.edge.transposed` where the call's C is stored transposed (null
elsewhere: a module of its own, routines.transposed_edge, which only such programs load), and
the thread pool's `tapeml_parallel_for` (null where the call's plan runs on one thread: a
kernel refers to no pool, so a process on one thread compiles none)."""


def _tiles(w: Writer, extra: str) -> dict[str, str]:
    """The tiles' addresses (TILES) and the transposed tiles' store ("transposed"), loaded
    from `%extra`."""
    return {f: w(f"load ptr, ptr {w(f'getelementptr ptr, ptr {extra}, i64 {EXTRA.index(f)}')}",
                 f"{f.replace('.', '_')}.")
            for f in (*TILES, "transposed")}


def _pool(w: Writer, extra: str) -> str:
    """The pool's `tapeml_parallel_for`, loaded from `%extra`."""
    slot = w(f"getelementptr ptr, ptr {extra}, i64 {EXTRA.index('pool')}")
    return w(f"load ptr, ptr {slot}", "pool.")


def _fields(w: Writer, plan: str, *names: str) -> list[str]:
    """The plan's values of `names`, loaded."""
    return [w(f"load i64, ptr {w(f'getelementptr i64, ptr {plan}, i64 {INDEX[n]}')}", f"{n}.")
            for n in names]


def _part_row(w: Writer, row: str) -> list[str]:
    """One row of the parts table (partition.Part: b0 b1 m0 m1 n0 n1), loaded."""
    return [w(f"load i64, ptr {w(f'getelementptr i64, ptr {row}, i64 {i}')}", "part.")
            for i in range(6)]


def _true(w: Writer, value: str) -> str:
    return w(f"icmp ne i64 {value}, 0")


Epilogue = tuple[str, str, str, str, str, str, str, str]
"""What `.epilogue` is called with, as `_epilogue` loads it: whether the tiles apply it (an
i1), the rows' bias and its stride, the columns' bias and its stride, relu (an i1), the
residual and 1 where there is one (0: `.no_bias`, and every step through it 0)."""


def _epilogue(w: Writer, name: str, plan: str, extra: str) -> Epilogue:
    """The plan's epilogue as `.epilogue`'s operands: the call's bias where the plan has one of
    that kind, else `.no_bias` with stride 0; its residual likewise."""
    kind, relu, where, residual = _fields(w, plan, "bias", "relu", "epilogue", "residual")
    bias, res = (w(f"load ptr, ptr {w(f'getelementptr ptr, ptr {extra}, i64 {i}')}")
                 for i in range(2))
    operands = []
    for code in (1, 2):  # the rows' bias, the columns'
        mine = w(f"icmp eq i64 {kind}, {code}")
        operands += [w(f"select i1 {mine}, ptr {bias}, ptr @{name}.no_bias"),
                     w(f"zext i1 {mine} to i64")]
    mine = _true(w, residual)
    return (w(f"icmp eq i64 {where}, 1"), *operands, _true(w, relu),  # type: ignore[return-value]
            w(f"select i1 {mine}, ptr {res}, ptr @{name}.no_bias"), residual)


def _apply_epilogue(w: Writer, v: Variant, epilogue: Epilogue, c: str, ldc: str, row: str,
                    rows: str, column: str, columns: str) -> None:
    """`.epilogue` on rows [row, row + rows) x columns [column, column + columns) of C (at most
    NR), whose first element is at `c`, rows `ldc` apart."""
    t = v.element[0]
    _, rb, rs, cb, cs, relu, res, rf = epilogue
    at = w(f"mul i64 {w.add(w(f'mul i64 {row}, {ldc}'), column)}, {rf}")  # in the residual
    w.do(f"call void @{v.symbol}.epilogue(ptr {c}, i64 {ldc}, i64 {rows}, i64 {columns}, "
         f"ptr {w.gep(t, rb, w(f'mul i64 {row}, {rs}'))}, i64 {rs}, "
         f"ptr {w.gep(t, cb, w(f'mul i64 {column}, {cs}'))}, i1 {relu}, "
         f"ptr {w.gep(t, res, at)}, i64 {w(f'mul i64 {ldc}, {rf}')})")


def _finish(v: Variant) -> list[str]:
    """`.finish(C, plan, extra)`: the epilogue over the whole of C, where the tiles could not
    apply it (plan's `epilogue` 2: the groups' sums are added at the end) or there were no
    tiles (an empty sum, k = 0)."""
    w = Writer()
    w.lines.append(f"define internal void @{v.symbol}.finish(ptr %C, ptr %plan, ptr %extra) "
                   f"{COLD} {WIDE} {{")
    w.label("%entry")
    t = v.element[0]
    batch, m, n, c0, transposed = _fields(w, "%plan", "batch", "m", "n", "c0", "transposed")
    epilogue = _epilogue(w, v.symbol, "%plan", "%extra")
    blocks = w(f"select i1 {w(f'icmp eq i64 {c0}, 0')}, i64 1, i64 {batch}")
    mn = w(f"mul i64 {m}, {n}")

    def block(b: str) -> None:
        c = w.gep(t, "%C", w(f"mul i64 {b}, {c0}"))
        last, rb, rs, cb, cs, relu, res, rf = epilogue
        # the residual's block b: its own m x n, one after another
        res = w.gep(t, res, w(f"mul i64 {w(f'mul i64 {b}, {mn}')}, {rf}"))

        def over(rows: str, columns: str, here: Epilogue) -> None:  # C as it lies
            w.loop("0", columns, v.nr, lambda j: _apply_epilogue(
                w, v, here, w.gep(t, c, j), columns, "0", rows, j,
                w.min(str(v.nr), w(f"sub i64 {columns}, {j}"))), "j")

        # stored transposed, C's rows are the product's columns: the biases exchanged
        w.choose(_true(w, transposed),
                 lambda: over(n, m, (last, cb, cs, rb, rs, relu, res, rf)),
                 lambda: over(m, n, (last, rb, rs, cb, cs, relu, res, rf)))

    w.loop("0", blocks, 1, block, "b")
    return w.end()


def driver(v: Variant) -> list[str]:
    """The entry: the parts on the pool, each packing into its own slice of the caller's
    scratch (the package doc); a second caller while the scratch is taken (another Python
    thread) packs into a slice of the heap instead, or, if the heap has no room, waits for the
    scratch."""
    name, (t, _) = v.symbol, v.element
    w = Writer()
    w.lines.append(f"define void @{name}({ENTRY_ARGS}) {COLD} {WIDE} {{")
    w.label("%entry")
    batch, m, n, k, c0, acc, threads, shared, groups, parts, total, epilogue = _fields(
        w, "%plan", "batch", "m", "n", "k", "c0", "accumulate", "threads", "shared", "groups",
        "parts", "total", "epilogue")
    finish = f"call void @{name}.finish(ptr %C, ptr %plan, ptr %extra)"
    mn = w(f"mul i64 {m}, {n}")
    empty = w(f"or i1 {w(f'icmp eq i64 {mn}, 0')}, {w(f'icmp eq i64 {batch}, 0')}")
    w.do(f"br i1 {empty}, label %done, label %sized")
    w.label("%sized")
    w.do(f"br i1 {w(f'icmp eq i64 {k}, 0')}, label %no.sum, label %work")
    w.label("%no.sum")  # an empty sum: C = 0, unless accumulating; then the epilogue
    w.do(f"br i1 {_true(w, acc)}, label %summed, label %zero")
    w.label("%zero")  # each block of C (one, where the batches sum into it)
    blocks = w(f"select i1 {w(f'icmp eq i64 {c0}, 0')}, i64 1, i64 {batch}")
    w.loop("0", blocks, 1, lambda b: (lambda block: w.loop(
        "0", mn, 1, lambda i: w.do(f"store {t} 0.0, ptr {w.gep(t, block, i)}"), "z"))(
        w.gep(t, "%C", w(f"mul i64 {b}, {c0}"))), "zb")
    w.do("br label %summed")
    w.label("%summed")
    w.when(_true(w, epilogue), lambda: w.do(finish))
    w.do("br label %done")
    w.label("%done")
    w.do("ret void")
    w.label("%work")
    w.do("%was = atomicrmw xchg ptr %busy, i8 1 acquire")
    w.do("%free = icmp eq i8 %was, 0")
    w.do("br i1 %free, label %kept, label %heap")
    w.label("%heap")
    w.do(f"%own = call ptr @aligned_alloc(i64 64, i64 {total})")
    w.do("%none = icmp eq ptr %own, null")
    w.do("br i1 %none, label %wait, label %run")
    w.label("%wait")  # no room on the heap: the kept scratch, once its caller is done with it
    w.do("call i32 @sched_yield()")
    w.do("%was.again = atomicrmw xchg ptr %busy, i8 1 acquire")
    w.do("%free.now = icmp eq i8 %was.again, 0")
    w.do("br i1 %free.now, label %kept, label %wait")
    w.label("%kept")
    w.do("%bound = load ptr, ptr %slot, align 8")
    w.do("br label %run")
    w.label("%run")
    w.do("%scratch = phi ptr [ %bound, %kept ], [ %own, %heap ]")
    w.do("%mine = phi i1 [ true, %kept ], [ false, %heap ]")
    if v.windows:  # (never shared: A is read in place)
        w.do("br label %parts")
    else:
        w.do(f"br i1 {_true(w, shared)}, label %shared, label %parts")
        _shared(w, v, k, m, n, threads)
    w.label("%parts")
    w.do(f"br i1 {w(f'icmp eq i64 {parts}, 1')}, label %single, label %many")
    w.label("%single")
    row = _part_row(w, w(f"getelementptr i64, ptr %plan, i64 {len(FIELDS)}"))
    w.do(f"call void @{name}.part(ptr %A, ptr %B, ptr %C, ptr %extra, {_i64s(row)}, "
         f"ptr %scratch, i1 {_true(w, acc)}, ptr %plan)")
    w.do("br label %finish")
    w.label("%many")  # the parts on the thread pool (tapeml/codegen/pool.py), the caller taking one
    context = w("alloca [6 x ptr]", "ctx")
    for field, value in enumerate(["%A", "%B", "%C", "%scratch", "%plan", "%extra"]):
        w.do(f"store ptr {value}, ptr {w(f'getelementptr ptr, ptr {context}, i64 {field}')}")
    w.do(f"br i1 {w(f'icmp sgt i64 {threads}, 1')}, label %pool, label %serial")
    w.label("%pool")
    w.do(f"call void {_pool(w, '%extra')}(ptr @{name}.range, ptr {context}, i64 {parts}, "
         f"i64 {threads})")
    w.do("br label %grouped")
    w.label("%serial")  # the groups of batches, one after another
    w.do(f"call void @{name}.range(ptr {context}, i64 0, i64 {parts})")
    w.do("br label %grouped")
    w.label("%grouped")

    def add_sums() -> None:  # C += the other groups' sums, in order
        first = w.gep("i8", "%scratch", _fields(w, "%plan", "sums")[0])

        def group(g: str) -> None:
            own = w.gep(t, first, w(f"mul i64 {w(f'sub i64 {g}, 1')}, {mn}"))

            def add(i: str) -> None:
                c = w.gep(t, "%C", i)
                total = w(f"fadd {t} {w(f'load {t}, ptr {c}')}, "
                          f"{w(f'load {t}, ptr {w.gep(t, own, i)}')}")
                w.do(f"store {t} {total}, ptr {c}")

            w.loop("0", mn, 1, add, "s")

        w.loop("1", groups, 1, group, "g")

    w.when(w(f"icmp sgt i64 {groups}, 1"), add_sums)
    w.when(w(f"icmp eq i64 {epilogue}, 2"), lambda: w.do(finish))  # on the whole sums
    w.do("br label %finish")
    w.label("%finish")
    w.do("br i1 %mine, label %release, label %heap.free")
    w.label("%release")
    w.do("store atomic i8 0, ptr %busy release, align 1")
    w.do("ret void")
    w.label("%heap.free")
    w.do("call void @free(ptr %scratch)")
    jobs = [] if v.windows else [*_pack_job(v), *_rows_job(v)]
    return [*w.end(), *_range(v), *jobs, *_finish(v), *_part(v)]


def _shared(w: Writer, v: Variant, k: str, m: str, n: str, threads: str) -> None:
    """The entry's `%shared` block: per block of k, B packed by every thread (`.pack`), then
    rows of C shared out (`.rows`)."""
    name = v.symbol
    w.label("%shared")
    context = w("alloca [8 x i64]", "ctx")
    slots = [w(f"getelementptr i64, ptr {context}, i64 {i}") for i in range(8)]
    for i, value in ((0, "%A"), (1, "%B"), (2, "%C"), (3, "%scratch"), (6, "%plan"),
                     (7, "%extra")):
        w.do(f"store ptr {value}, ptr {slots[i]}")
    panels = w(f"sdiv i64 {w(f'add i64 {n}, {v.nr - 1}')}, {v.nr}")
    pool = _pool(w, "%extra")
    mr, = _fields(w, "%plan", "mr")
    rounded = w.add(m, w(f"sub i64 {mr}, 1"))
    tiles = w(f"sdiv i64 {rounded}, {mr}")

    def block(pc: str) -> None:
        w.do(f"store i64 {pc}, ptr {slots[4]}")
        w.do(f"store i64 {w.min(str(v.kc), w(f'sub i64 {k}, {pc}'))}, ptr {slots[5]}")
        for job, jobs in (("pack", panels), ("rows", tiles)):
            w.do(f"call void {pool}(ptr @{name}.{job}, ptr {context}, i64 {jobs}, "
                 f"i64 {threads})")

    w.loop("0", k, v.kc, block, "pc")
    w.do("br label %finish")


def _job(name: str, job: str) -> tuple[Writer, list[str], str, str, str, str]:
    """The head of one of the pool's jobs over the context [A, B, C, packed B, pc, depth,
    plan, extra]: the writer, the four pointers, pc, depth, the plan and the epilogue's
    operands."""
    w = Writer()
    w.lines.append(f"define internal void @{name}.{job}(ptr %ctx, i64 %start, i64 %end) "
                   f"{COLD} {WIDE} {{")
    w.label("%entry")
    fields = [w(f"getelementptr i64, ptr %ctx, i64 {i}") for i in range(8)]
    pointers = [w(f"load ptr, ptr {f}") for f in fields[:4]]
    return (w, pointers, w(f"load i64, ptr {fields[4]}"), w(f"load i64, ptr {fields[5]}"),
            w(f"load ptr, ptr {fields[6]}"), w(f"load ptr, ptr {fields[7]}"))


def _pack_job(v: Variant) -> list[str]:
    """`.pack`: panels [start, end) of this block of B, packed where a whole pack puts them."""
    t = v.element[0]
    w, (_, b, _, bp), pc, depth, plan, _ = _job(v.symbol, "pack")
    n, b1, b2 = _fields(w, plan, "n", "b1", "b2")
    j0 = w(f"mul i64 %start, {v.nr}")
    j1 = w.min(w(f"mul i64 %end, {v.nr}"), n)
    dst = w.gep(t, bp, w(f"mul i64 {j0}, {depth}"))
    w.do(f"call void @{v.symbol}.pack_b(ptr {b}, ptr {dst}, i64 {pc}, i64 {depth}, i64 {j0}, "
         f"i64 {j1}, i64 {b1}, i64 {b2})")
    return w.end()


def _macro_kernel(w: Writer, v: Variant, tiles: dict[str, str], mr: str,
                  c_shape: tuple[str, str, str], buffers: tuple[str, str, str],
                  rows: tuple[str, str], columns: tuple[str, str], depth: str,
                  load: str, epilogue: Epilogue, direct: tuple[str, str] | None = None,
                  direct_b: tuple[str, str, str] | None = None,
                  steps: tuple[str, str] | None = None,
                  prefetch: str = "false", windows: str | None = None) -> None:
    """Rows [ic, ic + height) of C (`c_shape`: m, n, and whether C is stored transposed),
    columns [j0, j1), against one packed block of A
    (`ap`, from row ic) and of B (`bp`, from column j0): a micro-kernel call per MR x NR
    tile (`tiles`: their addresses, `_tiles`; `mr`: their height), which store an edge tile
    through the kernel's `.edge` and every tile of a C stored transposed through
    `tiles["transposed"]`. `direct` = (flag, lda):
    where the flag holds, `ap` is A itself at row ic (and the
    block's first k), read in place by `.tile` (%direct) with rows lda apart. `direct_b` =
    (flag, B at the block's first k, ldb): where the flag holds, B is read in place. `steps`:
    elements from one panel of A's block to the next, and of B's (the block's depth, or all
    of k where the caller packed the operand whole: plan.packed_a). `epilogue`: each tile applies
    it as it stores, where its first flag holds (the last block of k). `prefetch` (an i1):
    B's panels come from memory (packed whole by the caller: a model's weights, read once
    per call), so the tiles of each panel fetch the next panel's block into L2 as they go
    (`_prefetched`). `windows`: A's columns are windows (Variant.windows): the table of where
    each starts, from the block's first k, which `.tile.direct` takes in place of A's row
    stride."""
    t, nr = v.element[0], v.nr
    ap, bp, c = buffers
    a_step, b_step = steps or (depth, depth)
    ic, height = rows
    j0, j1 = columns
    m, n, transposed = c_shape
    ldc = w(f"select i1 {transposed}, i64 {m}, i64 {n}")  # C's (i, j) at i * ldc + j, or
    # j * ldc + i
    store = w(f"select i1 {transposed}, ptr {tiles['transposed']}, ptr @{v.symbol}.edge")
    step, row_bytes = _prefetched(w, v, prefetch, height, mr, depth)

    def panel(jr: str) -> None:
        width = w.min(str(nr), w(f"sub i64 {j1}, {jr}"))
        narrow_panel = w(f"icmp sle i64 {width}, {v.lanes}")  # (`.tile.half`)
        b_panel = w.gep(t, bp, w(f"mul i64 {w(f'sub i64 {jr}, {j0}')}, {b_step}"))
        b_here, ldb = b_panel, str(nr)
        ahead = w(f"select i1 {prefetch}, ptr {w.gep(t, b_panel, w(f'mul i64 {nr}, {b_step}'))}, "
                  f"ptr {b_panel}")  # the next panel's block, or (nothing to fetch) this one's
        if direct_b is not None:  # (plan.direct_b)
            flag, b_block, b_row = direct_b
            b_here = w(f"select i1 {flag}, ptr {w.gep(t, b_block, jr)}, ptr {b_panel}")
            ldb = w(f"select i1 {flag}, i64 {b_row}, i64 {nr}")

        def tile(ir: str) -> None:
            tall = w.min(mr, w(f"sub i64 {height}, {ir}"))
            last, rb, rs, cb, cs, relu, res, rf = epilogue
            row = w.add(ic, ir)
            offset = w(f"select i1 {transposed}, i64 {w.add(w(f'mul i64 {jr}, {ldc}'), row)}, "
                       f"i64 {w.add(w(f'mul i64 {row}, {ldc}'), jr)}")
            c_tile = w.gep(t, c, offset)
            at = w(f"mul i64 {offset}, {rf}")  # in the residual
            finish = (f"ptr {w.gep(t, rb, w(f'mul i64 {row}, {rs}'))}, i64 {rs}, "
                      f"ptr {w.gep(t, cb, w(f'mul i64 {jr}, {cs}'))}, i1 {relu}, "
                      f"ptr {w.gep(t, res, at)}, i64 {w(f'mul i64 {ldc}, {rf}')}, i1 {last}, "
                      f"i1 {transposed}, ptr {store}")

            a_panel = w.gep(t, ap, w(f"mul i64 {ir}, {a_step}"))
            fetch = w(f"getelementptr i8, ptr {ahead}, i64 {w(f'mul i64 {ir}, {row_bytes}')}")
            rest = (f"ptr {c_tile}, i64 {ldc}, i64 {tall}, i64 {width}, i1 {load}")
            if windows is not None:  # (`.tile.direct`, the windows variant's only tile)
                lda = direct[1] if direct is not None else "0"
                w.do(f"call void {tiles['tile.direct']}(i64 {depth}, "
                     f"ptr {w.gep(t, ap, w(f'mul i64 {ir}, {lda}'))}, ptr {b_here}, "
                     f"i64 {ldb}, {rest}, ptr {windows}, {finish})")
                return
            in_place, lda = direct if direct is not None else ("false", "0")
            # `.tile` reads B where `b_here` says (its panel, or B itself: plan.direct_b,
            # whole panels only, so never through `.tile.half`), A packed or, where
            # `in_place`, where it lies
            a = w(f"select i1 {in_place}, ptr {w.gep(t, ap, w(f'mul i64 {ir}, {lda}'))}, "
                  f"ptr {a_panel}")
            whole = (f"(i64 {depth}, ptr {a}, ptr {b_here}, i64 {ldb}, {rest}, "
                     f"i1 {in_place}, i64 {lda}, ptr {fetch}, i64 {step}, {finish})")
            if nr == v.lanes:
                w.do(f"call void {tiles['tile']}{whole}")
                return
            half = (f"(i64 {depth}, ptr {a_panel}, ptr {b_panel}, {rest}, ptr {fetch}, "
                    f"i64 {step}, {finish})")
            narrow = w(f"and i1 {narrow_panel}, {w(f'xor i1 {in_place}, true')}")
            w.choose(narrow, lambda: w.do(f"call void {tiles['tile.half']}{half}"),
                     lambda: w.do(f"call void {tiles['tile']}{whole}"))

        w.loop("0", height, mr, tile, "ir")

    w.loop(j0, j1, nr, panel, "jr")


def _prefetched(w: Writer, v: Variant, prefetch: str, height: str, mr: str,
                depth: str) -> tuple[str, str]:
    """How the tiles of a panel share out fetching the next panel's block of B (`depth` rows
    of NR) where `prefetch` holds: each tile of the `height` rows fetches its part, `step`
    bytes further at each k (a line at most, so no line is skipped), from `row_bytes` times
    its first row into the block; (0, 0) otherwise. One panel's tiles then read its block
    from L2 where the first read it from memory: ResNet-50's 7 x 7 layers (49 rows of C,
    their weights' 9 MB read once per call) ran 25-30% faster, the model 8-9% (one core)."""
    size = v.nr * v.element[1]
    tiles = w(f"sdiv i64 {w.add(height, w(f'sub i64 {mr}, 1'))}, {mr}")
    share = w(f"sdiv i64 {w.add(str(size - 1), tiles)}, {tiles}")  # ceil(size / tiles)
    share = w.min(share, "64")
    step = w(f"select i1 {prefetch}, i64 {share}, i64 0")
    return step, w(f"sdiv i64 {w(f'mul i64 {step}, {depth}')}, {mr}")


def _rows_job(v: Variant) -> list[str]:
    """`.rows`: the tiles of rows [start, end) of C against the packed block of B, packing A
    in a buffer on this thread's stack."""
    t = v.element[0]
    w, (a, _, c, bp), pc, depth, plan, extra = _job(v.symbol, "rows")
    m, n, k, acc, a1, a2, transposed, mr, mc = _fields(
        w, plan, "m", "n", "k", "accumulate", "a1", "a2", "transposed", "mr", "mc")
    tiles = _tiles(w, extra)
    epilogue = _epilogue(w, v.symbol, plan, extra)
    last = w(f"and i1 {epilogue[0]}, {w(f'icmp eq i64 {w.add(pc, depth)}, {k}')}")
    ap = w(f"alloca {t}, i64 {w(f'mul i64 {mc}, {depth}')}, align 64", "ap")
    load = w(f"or i1 {_true(w, acc)}, {w(f'icmp sgt i64 {pc}, 0')}")
    r1 = w.min(w(f"mul i64 %end, {mr}"), m)

    def rows(ic: str) -> None:
        height = w.min(mc, w(f"sub i64 {r1}, {ic}"))
        w.do(f"call void {tiles['pack_a']}(ptr {a}, ptr {ap}, i64 {ic}, i64 {height}, "
             f"i64 {pc}, i64 {depth}, i64 {m}, i64 {a1}, i64 {a2}, "
             f"ptr @{v.symbol}.transpose)")
        _macro_kernel(w, v, tiles, mr, (m, n, _true(w, transposed)), (ap, bp, c),
                      (ic, height), ("0", n), depth, load, (last, *epilogue[1:]))

    w.loop(w(f"mul i64 %start, {mr}"), r1, mc, rows, "ic")
    return w.end()


def _i64s(values: list[str]) -> str:
    return ", ".join(f"i64 {x}" for x in values)


def _range(v: Variant) -> list[str]:
    """The pool's entry: parts [start, end) of the plan's table, on the buffers the context
    [A, B, C, scratch, plan, extra] holds, part p packing into the scratch's p-th slice. Groups of
    batches (`groups` > 1) write group 0's sum into C, group g's into the g-th of the sums."""
    name, t = v.symbol, v.element[0]
    w = Writer()
    w.lines.append(f"define internal void @{name}.range(ptr %ctx, i64 %start, i64 %end) "
                   f"{COLD} {{")
    w.label("%entry")
    a, b, c, scratch, plan, extra = [
        w(f"load ptr, ptr {w(f'getelementptr ptr, ptr %ctx, i64 {i}')}") for i in range(6)]
    m, n, acc, groups, part_bytes, sums = _fields(w, plan, "m", "n", "accumulate", "groups",
                                                  "part_bytes", "sums")
    mn = w(f"mul i64 {m}, {n}")
    table = w(f"getelementptr i64, ptr {plan}, i64 {len(FIELDS)}")
    grouped = w(f"icmp sgt i64 {groups}, 1")
    first_sum = w.gep("i8", scratch, sums)
    accumulate = _true(w, acc)

    def body(i: str) -> None:
        row = _part_row(w, w(f"getelementptr i64, ptr {table}, i64 {w(f'mul i64 {i}, 6')}"))
        part_scratch = w(f"getelementptr i8, ptr {scratch}, i64 {w(f'mul i64 {i}, {part_bytes}')}")
        own = w(f"and i1 {grouped}, {w(f'icmp sgt i64 {i}, 0')}")  # a sum of its own
        own_c = w.gep(t, first_sum, w(f"mul i64 {w(f'sub i64 {i}, 1')}, {mn}"))
        target = w(f"select i1 {own}, ptr {own_c}, ptr {c}")
        first = w(f"and i1 {accumulate}, {w(f'xor i1 {own}, true')}")
        w.do(f"call void @{name}.part(ptr {a}, ptr {b}, ptr {target}, ptr {extra}, "
             f"{_i64s(row)}, ptr {part_scratch}, i1 {first}, ptr {plan})")

    w.loop("%start", "%end", 1, body, "p")
    return w.end()


def _part(v: Variant) -> list[str]:
    """The loop nest over one part, all of k, packing into `%scratch`; `%first`: the first
    block of k adds into what C holds (C (+)= ...) rather than overwriting it. Per block of k,
    the columns in chunks of the plan's `nc` (plan.chunk_columns): each chunk's block of B
    packed, then used by every row of the part."""
    name, t = v.symbol, v.element[0]
    w = Writer()
    w.lines.append(f"define internal void @{name}.part({_PART_ARGS}) {COLD} {WIDE} {{")
    w.label("%entry")
    m, n, k, a0, a1, a2, b0, b1, b2, c0, a_offset, direct_a, direct_b, packed_a, packed_b, nc, \
        transposed, mr, mc = _fields(
            w, "%plan", "m", "n", "k", "a0", "a1", "a2", "b0", "b1", "b2", "c0", "a_offset",
            "direct_a", "direct_b", "packed_a", "packed_b", "nc", "transposed", "mr", "mc")
    tiles = _tiles(w, "%extra")
    c_shape = (m, n, _true(w, transposed))
    several_blocks = w(f"icmp sgt i64 {w('sub i64 %m1, %m0')}, {mc}")  # of A's rows
    bp = "%scratch"
    ap = w.gep("i8", bp, a_offset)
    direct = _true(w, direct_a)
    in_place_b = _true(w, direct_b)
    whole_a, whole_b = _true(w, packed_a), _true(w, packed_b)  # packed by the caller
    # a windows kernel's: where each column of A starts (kernel.gemm's a_taps), the caller's
    # (or where each column of A starts: a_taps)
    table = (w(f"load ptr, ptr {w('getelementptr ptr, ptr %extra, i64 2')}")
             if v.windows else "")
    pack_b_here = w(f"and i1 {w(f'xor i1 {in_place_b}, true')}, {w(f'xor i1 {whole_b}, true')}")
    not_whole_a = w(f"xor i1 {whole_a}, true")
    # one A for every batch (a convolution's weights), in one block of rows and of k: packed
    # once here, not once per batch
    one_block = w(f"and i1 {w(f'icmp sle i64 {m}, {mc}')}, {w(f'icmp sle i64 {k}, {v.kc}')}")
    shared_a = w(f"and i1 {w(f'icmp eq i64 {a0}, 0')}, {one_block}")
    shared_a = w(f"and i1 {shared_a}, {w(f'xor i1 {direct}, true')}")
    shared_a = w(f"and i1 {shared_a}, {not_whole_a}")
    w.when(shared_a, lambda: w.do(
        f"call void {tiles['pack_a']}(ptr %A, ptr {ap}, i64 %m0, i64 {w('sub i64 %m1, %m0')}, "
        f"i64 0, i64 {k}, i64 {m}, i64 {a1}, i64 {a2}, ptr @{v.symbol}.transpose)"))
    own_a = w(f"and i1 {w(f'xor i1 {shared_a}, true')}, {w(f'xor i1 {direct}, true')}")
    own_a = w(f"and i1 {own_a}, {not_whole_a}")
    summed = w(f"icmp eq i64 {c0}, 0")
    epilogue = _epilogue(w, name, "%plan", "%extra")
    final_batch = w("sub i64 %b1, 1")  # where batches sum into one C, its sum's last
    # the residual's step from one batch to the next: m * n, or 0 (one C, one residual)
    block = w(f"mul i64 {w(f'mul i64 {m}, {n}')}, {epilogue[7]}")
    res_step = w(f"select i1 {summed}, i64 0, i64 {block}")

    def batch(b: str) -> None:
        a = w.gep(t, "%A", w(f"mul i64 {b}, {a0}"))
        bb = w.gep(t, "%B", w(f"mul i64 {b}, {b0}"))
        c = w.gep(t, "%C", w(f"mul i64 {b}, {c0}"))
        later_batch = w(f"and i1 {summed}, {w(f'icmp sgt i64 {b}, %b0')}")
        whole = w(f"or i1 {w(f'xor i1 {summed}, true')}, {w(f'icmp eq i64 {b}, {final_batch}')}")
        whole = w(f"and i1 {whole}, {epilogue[0]}")  # C's sums end with this batch
        res = w.gep(t, epilogue[6], w(f"mul i64 {b}, {res_step}"))

        def block(pc: str) -> None:
            depth = k if v.windows else w.min(str(v.kc), w(f"sub i64 {k}, {pc}"))
            b_block = w.gep(t, bb, w(f"mul i64 {pc}, {b1}"))
            b_step = w(f"select i1 {whole_b}, i64 {k}, i64 {depth}")
            a_step = w(f"select i1 {whole_a}, i64 {k}, i64 {depth}")
            load = w(f"or i1 {w(f'icmp sgt i64 {pc}, 0')}, {later_batch}")
            load = w(f"or i1 {load}, %first")  # into what C held (accumulating)
            last = w(f"and i1 {whole}, {w(f'icmp eq i64 {w.add(pc, depth)}, {k}')}")

            def chunk(jc: str) -> None:  # columns [jc, j1): their block of B packed, then used
                j1 = w.min(w(f"add i64 {jc}, {nc}"), "%n1")
                w.when(pack_b_here, lambda: w.do(
                    f"call void @{name}.pack_b(ptr {bb}, ptr {bp}, i64 {pc}, i64 {depth}, "
                    f"i64 {jc}, i64 {j1}, i64 {b1}, i64 {b2})"))
                # B packed whole: panel jr / NR of [n/NR][k][NR], from this block's first k
                b_whole = w.gep(t, bb, w.add(w(f"mul i64 {jc}, {k}"), w(f"mul i64 {pc}, {v.nr}")))
                b_here = w(f"select i1 {whole_b}, ptr {b_whole}, ptr {bp}")
                # A's block is packed again for a later chunk only if it has been replaced
                again = w(f"or i1 {w(f'icmp eq i64 {jc}, %n0')}, {several_blocks}")
                pack_a_here = w(f"and i1 {own_a}, {again}")

                def rows(ic: str) -> None:
                    height = w.min(mc, w(f"sub i64 %m1, {ic}"))
                    w.when(pack_a_here, lambda: w.do(
                        f"call void {tiles['pack_a']}(ptr {a}, ptr {ap}, i64 {ic}, i64 {height}, "
                        f"i64 {pc}, i64 {depth}, i64 {m}, i64 {a1}, i64 {a2}, "
                        f"ptr @{v.symbol}.transpose)"))
                    in_place = w.gep(t, a, w(f"mul i64 {ic}, {a1}") if v.windows else
                                     w.add(w(f"mul i64 {ic}, {a1}"), pc))  # (a_taps: the
                    # block's first k through the table)
                    # A packed whole: rows ic.. of [m/MR][k][MR], from this block's first k
                    a_whole = w.gep(t, a, w.add(w(f"mul i64 {ic}, {k}"),
                                                w(f"mul i64 {pc}, {mr}")))
                    a_packed = w(f"select i1 {whole_a}, ptr {a_whole}, ptr {ap}")
                    a_here = w(f"select i1 {direct}, ptr {in_place}, ptr {a_packed}")
                    _macro_kernel(w, v, tiles, mr, c_shape, (a_here, b_here, c), (ic, height),
                                  (jc, j1),
                                  depth, load, (last, *epilogue[1:6], res, epilogue[7]),
                                  (direct, a1),
                                  (in_place_b, b_block, b1), (a_step, b_step),
                                  whole_b, w.gep("i64", table, pc) if v.windows else None)

                w.loop("%m0", "%m1", mc, rows, "ic")

            w.loop("%n0", "%n1", nc, chunk, "jc")

        if v.windows:  # all of k at once: its tiles are stored transposed, which cost them
            w.when(w(f"icmp sgt i64 {k}, 0"), lambda: block("0"))  # 3-14% per block of k
            # (plan.scratch_bytes: B's block as deep)
        else:
            w.loop("0", k, v.kc, block, "pc")

    w.loop("%b0", "%b1", 1, batch, "batch")
    return w.end()[:-1]  # the module's last function: no blank line after it
