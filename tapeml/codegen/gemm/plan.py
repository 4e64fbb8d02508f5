"""What is generated once per kernel and what each call passes it: a `Variant` (what changes
the code: the element type, the register tile, and whether each operand's inner stride is 1)
names one shape-generic kernel; a call's `plan` (its sizes, strides, and how its
work is shared out over threads, as `partition` decides it) is a table of i64 the kernel reads
at run time.

The plan's fields, in order (`FIELDS`), then `parts` rows of the parts table (6 each: batches,
rows and columns of C, as `partition.Part`):

    batch m n k        the product's sizes
    a0 a1 a2           A's strides (batch, row, column); b0 b1 b2: B's
    c0                 C's batch stride (0: every batch adds into one C)
    accumulate         1: C += A @ B
    threads            how many threads the call is shared by (the pool's)
    shared             1: every thread packs part of each block of B, then takes rows of C
    groups             groups of batches summed apart (partition.batch_groups)
    parts              rows of the parts table
    part_bytes         one part's slice of the scratch
    a_offset           where A's packed block starts in a slice (after B's)
    sums               where the groups' own sums start in the scratch
    total              the scratch's bytes, a multiple of 64
    direct_a           1: the micro-kernel reads A in place, not packed (`direct_a`)
    direct_b           1: ... and B (`direct_b`)
    packed_a           1: A is passed packed already, whole (`packed_a`): the caller packed
                       a constant A once
    packed_b           1: ... and B
    nc                 columns of C per chunk: each block of B is packed and used a chunk at a
                       time (`chunk_columns`)
    bias               the epilogue's bias (GemmSpec.bias): 0 none, 1 one per row of C, 2 one
                       per column; the call's fourth buffer
    relu               1: the epilogue ends in relu
    epilogue           0: none; 1: each tile applies it as it stores its last block of k (the
                       last batch's, where batches sum into one C); 2: applied to the whole of
                       C at the end (the groups' sums are added first)
    residual           1: the epilogue adds a residual (C's shape, its blocks m * n apart)
    transposed         1: C (and the residual) stored transposed (GemmSpec.c_transposed)
    mr                 the register tile's rows (the variant's: its tiles' module)
    mc                 rows of A packed at once (Variant.mc)

A product whose A's columns are windows (GemmSpec.a_taps) calls a kernel of its own
(`Variant.windows`): its tiles read A in place through the caller's table (`.tile.direct`:
column k at A + rows[k], row i at + i), all of k in one block (the driver): A always direct,
never packed, B never shared.
"""

from __future__ import annotations

from dataclasses import dataclass

from tapeml.codegen.gemm.partition import batch_groups, partition, shares_b
from tapeml.codegen.gemm.target import KC, Target, tiles
from tapeml.dialects.kernel import GemmSpec

FIELDS = ("batch", "m", "n", "k", "a0", "a1", "a2", "b0", "b1", "b2", "c0", "accumulate",
          "threads", "shared", "groups", "parts", "part_bytes", "a_offset", "sums", "total",
          "direct_a", "direct_b", "packed_a", "packed_b", "nc", "bias", "relu", "epilogue",
          "residual", "transposed", "mr", "mc")
INDEX = {name: i for i, name in enumerate(FIELDS)}


@dataclass(frozen=True)
class Variant:
    """One shape-generic kernel: what its code depends on, in two modules compiled apart.
    The kernel (`symbol`: the entry point, the loop nest, B's packing, the epilogue) does not
    depend on MR; its tiles (`tiles`: the micro-kernels, their stores, A's packing) do, and
    the caller passes them to the kernel (the addresses in `%extra`, MR in the plan), so a
    program whose products take two tile heights compiles one kernel and two sets of tiles
    (the second height cost W4's, the GPT step's and squeezenet's first calls a whole kernel,
    0.22 s on one core). Packing an operand along its
    rows or, a transposed operand, down its columns, whichever has the smaller stride: the
    kernel holds both walks and takes one per call by the strides, so a matmul and its
    transposes in the backward pass share a kernel. `a_unit`, `b_unit`: that operand's inner
    stride (the one along the walk) is 1, written as a constant."""

    dtype: str
    lanes: int
    mr: int
    nr: int
    a_unit: bool
    b_unit: bool
    windows: bool = False
    """A's columns are windows (GemmSpec.a_taps): its `.tile.direct` reads A in place through
    the caller's table of columns, the only micro-kernel it holds; a kernel of its own, so a
    program without such a product compiles none of it."""
    kc: int = KC
    """The depth of a packed block of k (Target.kc: the host's, one per process)."""

    @property
    def symbol(self) -> str:
        """The kernel's entry point (and its module's prefix): all but MR and A's stride."""
        b = 1 if self.b_unit else "s"
        return f"tapeml_gemm_{self.dtype}_n{self.nr}_l{self.lanes}_b{b}{'_w' * self.windows}"

    @property
    def tiles(self) -> str:
        """The prefix of the tiles' module (TILES: the functions the caller passes on)."""
        a = 1 if self.a_unit else "s"
        return (f"tapeml_gemm_{self.dtype}_{self.mr}x{self.nr}_l{self.lanes}_a{a}"
                f"{'_w' * self.windows}.tiles")

    @property
    def mc(self) -> int:
        """Rows of A packed at once: a whole number of tiles, about 140 rows."""
        return self.mr * max(1, 140 // self.mr)

    @property
    def element(self) -> tuple[str, int]:
        """The element's LLVM type and its bytes."""
        return ("float", 4) if self.dtype == "f32" else ("double", 8)


def along_rows(row: int, column: int) -> bool:
    """Packing walks an operand with these strides along its rows (else down its columns):
    the kernel's choice at run time (routines.py), made the same way."""
    return column <= row


def _unit(row: int, column: int) -> bool:
    """The inner stride of the walk `along_rows` picks is 1."""
    return (column if along_rows(row, column) else row) == 1


def variant(spec: GemmSpec, target: Target) -> Variant:
    lanes, mr, nr = tiles(spec, target)
    return Variant(spec.dtype, lanes, mr, nr, _unit(*spec.a[1:]), _unit(*spec.b[1:]),
                   bool(spec.a_taps), target.kc)


def scratch_bytes(spec: GemmSpec, v: Variant) -> tuple[int, int]:
    """Bytes of one part's packing buffers: B's block ([n/NR][kc][NR]), then A's; each a
    multiple of 64."""
    kc = max(spec.k, 1) if spec.a_taps else min(v.kc, max(spec.k, 1))  # (driver: one block)
    size = v.element[1]
    b_bytes = -(-spec.n // v.nr) * v.nr * kc * size
    a_bytes = 0 if spec.a_taps else v.mc * kc * size
    return -(-b_bytes // 64) * 64, -(-a_bytes // 64) * 64


DIRECT_A_COLUMNS = 128
"""A product at most this many columns wide, with A's rows contiguous along k, reads A in place
(`direct_a`): packing A pays for itself over n / NR panels of B, and over four or fewer it cost
a quarter of the time (a 1024 x 512 x 128 product: 0.95-1.05 ms packed)."""


ALIASED_ROWS = 4096
"""Rows of A this many bytes apart (or a multiple) fall in the same L1 sets: a tile's MR rows
read in place evict each other. A 512 x k x 49 product: 84 GFLOP/s read in place at k = 512,
2304 or 4608, 37 at k = 1024 to 4096 (rows 4, 8, 12, 16 KB apart), 52 packed (Zen 4, one core)."""


def direct_a(spec: GemmSpec, v: Variant, shared: bool) -> bool:
    """The micro-kernel reads A where it is (row i of a tile at A + i * a1, k along the row):
    a narrow product (n <= DIRECT_A_COLUMNS) whose A runs along k with stride 1, unless the
    threads share one packed B (their rows jobs pack A on their stacks) or A's rows alias
    (ALIASED_ROWS); always where A's columns are windows (a_taps: never packed)."""
    return bool(spec.a_taps) or (
        not shared and spec.n <= DIRECT_A_COLUMNS and v.a_unit
        and along_rows(spec.a[1], spec.a[2]) and (spec.a[1] * v.element[1]) % ALIASED_ROWS != 0)


DIRECT_B_BYTES = 32 << 10
"""A B of at most this many bytes (in each batch), its rows contiguous and whole panels wide,
is read in place where A is too (`direct_b`): it stays in L1 however its rows lie, and packing
it cost about what the product did (attention's batched 64 x 64 x 32 products)."""


def direct_b(spec: GemmSpec, v: Variant, shared: bool) -> bool:
    """The micro-kernel reads B where it is (its row k at B + k * b1), unpacked, where B's rows
    run along n with stride 1 and its columns are whole NR-wide panels (no edge panel to
    pad), and either A is read in place too and B is small (DIRECT_B_BYTES: `.tile` where
    %direct), or A is packed (`.tile`), each part packs its own B (not `shared`), B is no
    constant its caller packs once (`packed_b`), and B's rows are not a multiple of
    ALIASED_ROWS bytes apart. Each panel's rows then come into L2 as its first tile reads
    them and stay there for the others, with no pass over B to pack it first: W3's step
    2.5-3.5% faster (one thread; 3.8% on two), the GPT step 1.3%, W2 at n = 512 2%, timed in
    one process against the packed plan. B's rows 4 KB apart (n = 1024 in f32) would share
    a sixty-fourth of L2's sets, and that product ran 3-5% slower so: packed."""
    if not (spec.n % v.nr == 0 and v.b_unit and along_rows(spec.b[1], spec.b[2])):
        return False
    if direct_a(spec, v, shared):
        return spec.k * spec.n * v.element[1] <= DIRECT_B_BYTES
    constant = bool(spec.b_constant) and spec.b[0] == 0
    return (not shared and not constant
            and (spec.b[1] * v.element[1]) % ALIASED_ROWS != 0)


def packed_a(spec: GemmSpec, v: Variant, shared: bool) -> bool:
    """A constant A (GemmSpec.a_constant: the same for every batch) that the kernel would pack
    at every call is packed once, whole, by its caller (`packed_bytes`'s layout), and the
    kernel reads its panels from there: a model's weights, which a call packed block by block
    (every batch again where A is more than one block), and a pack is a read and a write of
    every weight. Not where the threads share one packed B (their rows jobs pack A)."""
    return (bool(spec.a_constant) and spec.a[0] == 0 and not shared
            and not direct_a(spec, v, shared) and 0 not in (spec.m, spec.n, spec.k, spec.batch))


def packed_b(spec: GemmSpec, v: Variant, shared: bool) -> bool:
    """`packed_a`, for B: a layer's weights on the right (x @ W); never read in place
    (`direct_b`) unless small and A is too."""
    return (bool(spec.b_constant) and spec.b[0] == 0 and not shared
            and not direct_b(spec, v, shared) and 0 not in (spec.m, spec.n, spec.k, spec.batch))


def packed_bytes(spec: GemmSpec, v: Variant) -> tuple[int, int]:
    """Bytes of the whole of A packed ([m/MR][k][MR]: what `.pack_a` writes for all rows and
    all of k, so block (pc, ic)'s panel of rows ir is at ic * k + pc * MR + ir * k) and of B
    ([n/NR][k][NR]), each a multiple of 64."""
    size = v.element[1]
    a = -(-spec.m // v.mr) * v.mr * spec.k * size
    b = -(-spec.n // v.nr) * v.nr * spec.k * size
    return -(-a // 64) * 64, -(-b // 64) * 64


CHUNK_COLUMNS = 256
"""Columns of C whose block of B (KC x CHUNK_COLUMNS, 256 KB in f32) is packed and used at once
where that costs A no second packing (`chunk_columns`)."""


def chunk_columns(spec: GemmSpec, v: Variant, shared: bool, packed: bool) -> int:
    """Columns per chunk of a part's loop nest (plan's `nc`). A product whose A is packed once
    per block of k anyway (its rows one block, A read in place, or packed whole by the caller)
    packs B and uses it CHUNK_COLUMNS columns at a time, so the packed block stays in L2: a
    convolution's few output channels over many positions packed the whole block of B (a
    ResNet stem's 7 MB) and read it back from memory. Otherwise all of n at once (A's blocks
    would be packed again per chunk)."""
    panels = -(-max(spec.n, 1) // v.nr) * v.nr
    once = (spec.m <= v.mc or direct_a(spec, v, shared)
            or (packed and packed_a(spec, v, shared)))
    return min(max(CHUNK_COLUMNS // v.nr, 1) * v.nr, panels) if once else panels


def plan(spec: GemmSpec, target: Target, packed: bool = False) -> list[int]:
    """The table `spec`'s calls pass the kernel (the module doc), for `target`'s threads;
    `packed`: for the calls that pass the operands `packed_a` and `packed_b` choose packed."""
    v = variant(spec, target)
    threads = target.threads
    shared = shares_b(spec, v.mr, threads) and not spec.a_taps  # (A read in place)
    parts = [] if shared else partition(spec, v.mr, v.nr, threads)
    groups = batch_groups(spec)
    b_bytes, a_bytes = scratch_bytes(spec, v)
    part_bytes = b_bytes + a_bytes
    sums = part_bytes * len(parts)  # where groups 1.. put their sums, after the packing slices
    total = b_bytes if shared else sums + (groups - 1) * spec.m * spec.n * v.element[1]
    total = -(-total // 64) * 64  # aligned_alloc's size: a multiple of the alignment (C11)
    if 0 in (spec.m, spec.n, spec.batch, spec.k):
        total = 0  # nothing to pack: C is left as it is, or zeroed
    values = {"batch": spec.batch, "m": spec.m, "n": spec.n, "k": spec.k,
              "a0": spec.a[0], "a1": spec.a[1], "a2": spec.a[2],
              "b0": spec.b[0], "b1": spec.b[1], "b2": spec.b[2], "c0": spec.c0,
              "accumulate": int(spec.accumulate), "threads": threads, "shared": int(shared),
              "groups": groups, "parts": len(parts), "part_bytes": part_bytes,
              "a_offset": b_bytes, "sums": sums, "total": total,
              "direct_a": int(direct_a(spec, v, shared)),
              "direct_b": int(direct_b(spec, v, shared)),
              "packed_a": int(packed and packed_a(spec, v, shared)),
              "packed_b": int(packed and packed_b(spec, v, shared)),
              "nc": chunk_columns(spec, v, shared, packed),
              "bias": {"": 0, "rows": 1, "columns": 2}[spec.bias], "relu": int(spec.relu),
              "epilogue": 0 if not (spec.bias or spec.relu or spec.residual)
              else 1 if groups == 1 else 2, "residual": int(spec.residual),
              "transposed": int(spec.c_transposed), "mr": v.mr, "mc": v.mc}
    return [values[name] for name in FIELDS] + [x for part in parts for x in part]
