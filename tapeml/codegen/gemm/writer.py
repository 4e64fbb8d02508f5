"""`Writer`: LLVM IR text with fresh value names, the current block's label (for phis),
counted loops and the function's end; what every function of a GEMM kernel is written with.
`WIDE`: the function attributes they all carry; `COLD`: those of the functions run once per
call or per part, not per tile."""

from __future__ import annotations

WIDE = '"prefer-vector-width"="512"'  # the host tunings prefer 256 bits; packing loops want 512

COLD = "optnone noinline"
"""A kernel's functions that run once per call, per part or per block, not per tile or per
element (its entry, the pool's jobs, the loop nest over blocks and tiles, the packing
routines' choice of walk, the prepacks): LLVM leaves them as written and compiles them at
O0 (fast instruction selection and register allocation). Of W3's kernel (its two modules,
0.28 s on one Zen 4 core) that took 35-50 ms off, and W2 (n = 128 and 512), W3 and W4 ran the
same at one and two threads (the kernels alternated call by call in one process): their
time is in the tiles and the packing loops, which stay optimized, as do `.edge` and
`.epilogue` (every tile of a C stored transposed goes through them)."""


SCALAR_LOOP = "!scalar.loop"
"""Where a loop's latch names its loop metadata, until `loop_metadata` numbers it: a loop not
to be vectorized or unrolled: the packing loops, which LLVM otherwise multiplies into
hundreds of instructions (a runtime-checked vector loop per row of a panel) that compile
slowly and ran no faster."""

PAIRED_LOOP = "!paired.loop"
"""... and a loop LLVM unrolls by two: the packed micro-kernel's loop over k (`.tile`). Its
loop of one k (2 + MR loads, 2 * MR FMAs, a prefetch, 5 instructions of counting: 50 for 14
cycles of FMAs) ran at 85% of the FMA units' peak, as if issue-bound; by two, 5% faster (a
14 x 32 tile, A and B from L1 or L2, the two loops called alternately in one process on an
AVX-512 Xeon); by three or four, 1-2%. W2 3-5% faster (n = 512 and 1024), ResNet-50 1-2%;
the tiles' module compiles 4 ms slower."""


_PROPERTIES = {SCALAR_LOOP: ('!{!"llvm.loop.vectorize.enable", i1 false}',
                             '!{!"llvm.loop.unroll.disable"}'),
               PAIRED_LOOP: ('!{!"llvm.loop.unroll.count", i32 2}',)}


def loop_metadata(text: str) -> str:
    """`text` (a module) with each SCALAR_LOOP and PAIRED_LOOP a loop of its own."""
    total = sum(text.count(mark) for mark in _PROPERTIES)
    loops: list[str] = []
    properties: list[str] = []
    for mark, theirs in _PROPERTIES.items():
        if mark not in text:
            continue
        names = ", ".join(f"!{total + len(properties) + i}" for i in range(len(theirs)))
        properties += [f"!{total + len(properties) + i} = {p}" for i, p in enumerate(theirs)]
        while mark in text:
            text = text.replace(mark, f"!{len(loops)}", 1)
            loops.append(f"!{len(loops)} = distinct !{{!{len(loops)}, {names}}}")
    return text + "".join(f"{line}\n" for line in loops + properties)


class Writer:
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

    def end(self) -> list[str]:
        """`ret void` and the closing brace: the function's lines, then a blank one."""
        self.do("ret void")
        self.lines.append("}")
        return [*self.lines, ""]

    def loop(self, start: str, end: str, step: int, body, hint: str = "i",
             scalar: bool = False, paired: bool = False) -> None:
        """for iv in range(start, end, step): body(iv) -- i64 values, end exclusive; `scalar`:
        LLVM is asked not to vectorize or unroll it (SCALAR_LOOP, which `loop_metadata`
        numbers); `paired`: to unroll it by two (PAIRED_LOOP)."""
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
        mark = SCALAR_LOOP if scalar else PAIRED_LOOP if paired else ""
        self.do(f"br label {head}" + (f", !llvm.loop {mark}" if mark else ""))
        self.label(done)

    def when(self, condition: str, body) -> None:
        """if condition: body() -- an i1 value."""
        then, done = self.fresh("then"), self.fresh("fi")
        self.do(f"br i1 {condition}, label {then}, label {done}")
        self.label(then)
        body()
        self.do(f"br label {done}")
        self.label(done)

    def choose(self, condition: str, then, otherwise) -> None:
        """if condition: then() else: otherwise() -- an i1 value."""
        yes, no, done = self.fresh("yes"), self.fresh("no"), self.fresh("fi")
        self.do(f"br i1 {condition}, label {yes}, label {no}")
        self.label(yes)
        then()
        self.do(f"br label {done}")
        self.label(no)
        otherwise()
        self.do(f"br label {done}")
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
