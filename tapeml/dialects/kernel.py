"""The `kernel` dialect: calls into the kernels the backends generate, on flat buffers, and the
GPU kernels' shared memory.

    kernel.gemm %a, %b, %c {batch = 1 : i64, m = 64 : i64, n = 32 : i64, k = 16 : i64,
                            a_strides = array<i64: 0, 16, 1>, b_strides = array<i64: 0, 32, 1>,
                            c_batch_stride = 2048 : i64, accumulate = false}
        : memref<1024xf32>, memref<512xf32>, memref<2048xf32>

computes, for every b < batch, C[b] = A[b] @ B[b] (or C[b] += with `accumulate`), where
A[b][i, p] = a[b*a0 + i*a1 + p*a2], B[b][p, j] = b[b*b0 + p*b1 + j*b2], and C[b] is the
contiguous m x n block of c at b * c_batch_stride (0: every batch adds into the same block;
more than m * n: the blocks lie apart, each image's part of a concat's buffer). With
`c_transposed`, C[b] is stored transposed: element (i, j) at c[b * c_batch_stride + j*m + i],
an n x m block (a convolution's product with its pixels as rows, written in the image's
channel-major layout; the residual's blocks likewise).
Strides let a transposed operand be read in place. With `a_taps = array<i64: t0, t1, ...>`
(T of them), A's columns are a convolution's taps over an image: column p = c * T + t of A[b]
starts at a0*b + c*a2 + t_t (its elements, the rows i, a1 = 1 apart), so A[b][i, p] is tap t
of channel c at position i of a zero-padded image read in place (no im2col matrix; the
product with the pixels as C's rows, tape-to-loops{window_convs}, the CPU's). A's buffer then
holds A_TAPS_SLACK elements past the furthest the product reads. An epilogue may
follow the sum, on every
element of C once it holds its whole sum:

    kernel.gemm %w, %x, %y, %bias, %r {..., bias = "rows", residual, relu = true}
        : ..., memref<64xf32>, memref<12544xf32>

C[b][i, j] = relu((sum + bias[i]) + R[b][i, j]) (`bias = "rows"`: one number per row of C, a
convolution's output channel; `"columns"`: bias[j], a dense layer's x @ W + b; `residual`:
R, a buffer of C's shape, its blocks m * n apart: a ResNet block's shortcut), relu(x) =
maximum(x, +0) (NaN stays NaN, -0 becomes +0); each step may be absent (the buffers are
those present, in that order). `tape-to-loops{gemm_epilogues}` (the CPU's) folds an
elementwise op that only adds a bias and a residual to a product, or takes its relu, into
the product this way. `tape-to-loops` emits it for tape.matmul;
`convert-loops-to-llvm` turns it into a call to the generated kernel (tapeml/codegen/gemm/),
whose name spells these parameters and whose declaration carries them as an attribute
(`kernel.gemm = {...}`: the backend links each kernel from it); the interpreter runs it with
numpy. On the GPU, `convert-loops-to-gpu` launches a tiled kernel for it instead
(tapeml/transforms/gemm_gpu.py).

    kernel.parallel_for @f_part0(%x, %y) {iterations = 64 : i64} : memref<64xf32>, memref<64xf32>

calls `@f_part0(%x, %y, %start, %end)` on contiguous ranges [start, end) that cover
[0, iterations) exactly once, in any order or at once (the CPU backend's thread pool splits it;
the interpreter makes one call over the whole range). `outline-parallel-loops` emits it for a
parallel loop worth the threads. With `count %n` (an index), the range is [0, %n) instead:
loop-bounds-as-arguments makes an op function's count its argument (`iterations` stays the
count it was outlined for).

    kernel.parallel_for @f_part0(%x, %y) count %n {iterations = 64 : i64} : memref<64xf32>, ...

    kernel.mark {index = 3 : i64}

marks where the program's time is counted from now on: against entry `index` of the table of
a profiled run (tape-to-loops{profile=true} puts one before each tape op's loops, and -1,
nothing, at the end; the CPU backend's `Jitted.profile` reads the table). It computes nothing.

    %image = kernel.view %x[%offset] : memref<4704xf32> -> memref<2352xf32>

is the part of a flat buffer from element %offset on, as a buffer of its own (its result's
size; the one who makes it keeps offset + size within the buffer): what a loop over images
hands a kernel.gemm or a parallel loop as the images it is at (tape-to-loops{image_group}'s
convolutions). It copies nothing; writes through it are writes to the buffer.

    %tile = kernel.shared : memref<256xf32>

is a buffer in a GPU kernel's shared memory: one per thread block, read and written by all of
its threads (between gpu.barrier's), alive while the kernel runs. It appears only in a gpu.func.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from xdsl.dialects.builtin import (
    BoolAttr,
    DenseArrayBase,
    DictionaryAttr,
    IndexType,
    IntegerAttr,
    MemRefType,
    StringAttr,
    SymbolRefAttr,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    ParsePropInAttrDict,
    attr_def,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    prop_def,
    result_def,
    var_operand_def,
)
from xdsl.utils.exceptions import VerifyException


@dataclass(frozen=True)
class GemmSpec:
    """What a kernel.gemm computes (see tapeml/codegen/gemm/), as its attributes hold it; its
    `symbol` names the generated function that computes it."""

    dtype: str  # "f32" or "f64"
    batch: int
    m: int
    n: int
    k: int
    a: tuple[int, int, int]  # strides of A's batch, row (i) and column (p)
    b: tuple[int, int, int]  # strides of B's batch, row (p) and column (j)
    c0: int  # stride of C's batch: m * n or more, or 0 to sum every batch into one C
    accumulate: bool  # add to C's contents instead of overwriting them
    a_constant: str = ""
    """The global A is (a constant of the program: a model's weights, the same numbers at
    every call, so a backend may rearrange it once and keep that), or "". Not kernel.gemm's
    to say: the lowering to a call sees where A comes from (`convert-loops-to-llvm`). Part of
    the symbol: a call of another constant is another function, with its own."""
    b_constant: str = ""
    """... and B."""
    bias: str = ""
    """The epilogue's bias (the dialect doc): "" (none), "rows" (bias[i]) or "columns"
    (bias[j]), the call's fourth buffer."""
    relu: bool = False
    """The epilogue ends in relu."""
    residual: bool = False
    """The epilogue adds a residual: a buffer of C's shape (blocks m * n apart), after the
    bias, the call's last buffer."""
    c_transposed: bool = False
    """C[b] (and the residual's blocks) stored transposed: (i, j) at j * m + i."""
    a_taps: tuple[int, ...] = ()
    """Where each of a window's taps starts in a channel: A's columns are windows (the dialect
    doc), A[b][i, p] at b * a0 + i * a1 + `a_column(p)`; or () for p * a2."""

    def a_column(self, p: int) -> int:
        """Where column p of A[0] starts: p * a2, or its channel's tap (`a_taps`)."""
        if not self.a_taps:
            return p * self.a[2]
        return p // len(self.a_taps) * self.a[2] + self.a_taps[p % len(self.a_taps)]

    def a_last_column(self) -> int:
        """Where A[0]'s furthest column starts (k > 0)."""
        if not self.a_taps:
            return self.a_column(self.k - 1)
        return (self.k // len(self.a_taps) - 1) * self.a[2] + max(self.a_taps)

    @property
    def bias_length(self) -> int:
        """The bias's elements: one per row of C or per column."""
        return {"": 0, "rows": self.m, "columns": self.n}[self.bias]

    @property
    def symbol(self) -> str:
        a, b = "x".join(map(str, self.a)), "x".join(map(str, self.b))
        kept = "".join(f"_c{operand}_{_symbol_part(name)}" for operand, name in
                       (("a", self.a_constant), ("b", self.b_constant)) if name)
        epilogue = (f"_bias{self.bias}" * bool(self.bias) + "_res" * self.residual
                    + "_relu" * self.relu)
        if self.a_taps:  # (many taps: a digest of them)
            taps = "x".join(map(str, self.a_taps))
            a += "_t" + (taps if len(self.a_taps) <= 9 else
                         "h" + hashlib.sha256(taps.encode()).hexdigest()[:16])
        return (f"tapeml_gemm_{self.dtype}_b{self.batch}_m{self.m}_n{self.n}_k{self.k}"
                f"_a{a}_b{b}_c{self.c0}{'t' * self.c_transposed}_"
                f"{'acc' if self.accumulate else 'set'}{epilogue}{kept}")

    def attributes(self) -> dict[str, Attribute]:
        """The spec as kernel.gemm's attributes (the element type is the buffers'; the
        epilogue's only where there is one)."""
        epilogue: dict[str, Attribute] = {}
        if self.bias:
            epilogue["bias"] = StringAttr(self.bias)
        if self.residual:
            epilogue["residual"] = BoolAttr.from_bool(True)
        if self.relu:
            epilogue["relu"] = BoolAttr.from_bool(True)
        if self.a_taps:
            epilogue["a_taps"] = DenseArrayBase.from_list(i64, self.a_taps)
        if self.c_transposed:
            epilogue["c_transposed"] = BoolAttr.from_bool(True)
        return {"batch": _i64(self.batch), "m": _i64(self.m), "n": _i64(self.n),
                "k": _i64(self.k), "a_strides": DenseArrayBase.from_list(i64, self.a),
                "b_strides": DenseArrayBase.from_list(i64, self.b),
                "c_batch_stride": _i64(self.c0),
                "accumulate": BoolAttr.from_bool(self.accumulate), **epilogue}

    @staticmethod
    def from_attributes(dtype: str, attributes: Mapping[str, Attribute]) -> GemmSpec:
        def integer(name: str) -> int:
            return attributes[name].value.data  # type: ignore[attr-defined]

        def strides(name: str) -> tuple[int, int, int]:
            return tuple(attributes[name].get_values())  # type: ignore[attr-defined,return-value]

        def constant(name: str) -> str:
            value = attributes.get(name)
            return value.data if isinstance(value, StringAttr) else ""

        relu, residual = attributes.get("relu"), attributes.get("residual")
        taps, transposed = attributes.get("a_taps"), attributes.get("c_transposed")
        return GemmSpec(dtype=dtype, batch=integer("batch"), m=integer("m"), n=integer("n"),
                        k=integer("k"), a=strides("a_strides"), b=strides("b_strides"),
                        c0=integer("c_batch_stride"),
                        accumulate=bool(attributes["accumulate"].value.data),  # type: ignore
                        a_constant=constant("a_constant"), b_constant=constant("b_constant"),
                        bias=constant("bias"),
                        relu=isinstance(relu, IntegerAttr) and bool(relu.value.data),
                        residual=isinstance(residual, IntegerAttr) and bool(residual.value.data),
                        a_taps=tuple(taps.get_values())  # type: ignore[union-attr]
                        if isinstance(taps, DenseArrayBase) else (),
                        c_transposed=isinstance(transposed, IntegerAttr)
                        and bool(transposed.value.data))

    def declaration_attribute(self) -> DictionaryAttr:
        """What convert-loops-to-llvm puts on the kernel's declaration (`kernel.gemm`), so that
        the backend links the kernel from its spec, not from its name."""
        constant = {name: StringAttr(getattr(self, name))
                    for name in ("a_constant", "b_constant") if getattr(self, name)}
        return DictionaryAttr({"dtype": StringAttr(self.dtype), **self.attributes(),
                               **constant})


A_TAPS_SLACK = 16
"""With `a_taps`, a kernel may read this many elements of A past the furthest the product
uses (the CPU's micro-kernel reads an edge tile's rows whole, at constant offsets, and drops
those past the product's last row), so A's buffer must hold them."""


def _symbol_part(name: str) -> str:
    """A global's name as part of a symbol: itself if it is letters, digits, _ and ., else a
    digest of it (distinct names stay distinct)."""
    if re.fullmatch(r"[A-Za-z0-9_.]+", name):
        return name
    return "h" + hashlib.sha256(name.encode()).hexdigest()[:16]


def declared_kernels(module: Operation) -> dict[str, GemmSpec]:
    """The generated kernels `module`'s top-level declarations ask for, by symbol: each one's
    spec from its `kernel.gemm` attribute (GemmSpec.declaration_attribute)."""
    kernels = {}
    for op in module.regions[0].block.ops:
        attribute = op.attributes.get(DECLARATION_ATTR)
        if isinstance(attribute, DictionaryAttr):
            spec = GemmSpec.from_attributes(attribute.data["dtype"].data, attribute.data)
            kernels[spec.symbol] = spec
    return kernels


DECLARATION_ATTR = "kernel.gemm"


@functools.cache
def _i64(value: int) -> IntegerAttr:
    return IntegerAttr(value, i64)


@irdl_op_definition
class GemmOp(IRDLOperation):
    name = "kernel.gemm"

    a = operand_def(MemRefType)
    b = operand_def(MemRefType)
    c = operand_def(MemRefType)
    extra = var_operand_def(MemRefType)  # the epilogue's bias, then residual, where present
    batch = attr_def(IntegerAttr)
    m = attr_def(IntegerAttr)
    n = attr_def(IntegerAttr)
    k = attr_def(IntegerAttr)
    a_strides = attr_def(DenseArrayBase)
    b_strides = attr_def(DenseArrayBase)
    c_batch_stride = attr_def(IntegerAttr)
    accumulate = attr_def(BoolAttr)

    assembly_format = ("$a `,` $b `,` $c (`,` $extra^)? attr-dict `:` type($a) `,` type($b) "
                       "`,` type($c) (`,` type($extra)^)?")

    def __init__(self, a: SSAValue, b: SSAValue, c: SSAValue, spec: GemmSpec,
                 bias: SSAValue | None = None, residual: SSAValue | None = None) -> None:
        # Operation's constructor, as `create` calls it: IRDL's checked each of the spec's
        # attributes as it built the op (100 us of each; verify_ checks the op whole)
        Operation.__init__(self, operands=[a, b, c, *(x for x in (bias, residual)
                                                     if x is not None)],
                           attributes=spec.attributes())

    @property
    def spec(self) -> GemmSpec:
        element = self.c.type.get_element_type()
        return GemmSpec.from_attributes("f32" if element.bitwidth == 32 else "f64",
                                        self.attributes)

    def verify_(self) -> None:
        types = [v.type for v in (self.a, self.b, self.c, *self.extra)]
        if len({t.get_element_type() for t in types}) != 1 or types[0].get_element_type(
        ).bitwidth not in (32, 64) or any(t.get_shape().__len__() != 1 for t in types):
            raise VerifyException(f"kernel.gemm takes flat f32 or f64 buffers of one "
                                  f"element type, got {', '.join(map(str, types))}")
        bias = self.attributes.get("bias")
        kind = bias.data if isinstance(bias, StringAttr) else ""
        if kind not in ("", "rows", "columns"):
            raise VerifyException(f'kernel.gemm: bias must be "rows" or "columns", got "{kind}"')
        s = self.spec
        if len(self.extra) != bool(kind) + s.residual:
            raise VerifyException(f"kernel.gemm: {len(self.extra)} epilogue buffers, "
                                  f"{bool(kind) + s.residual} named (bias, residual)")
        for name in ("a_strides", "b_strides"):
            if len(getattr(self, name).get_values()) != 3:
                raise VerifyException(f"kernel.gemm: {name} must have 3 entries (batch, row, "
                                      "column)")
        if min(s.batch, s.m, s.n, s.k, *s.a, *s.b, s.c0, *s.a_taps) < 0:
            raise VerifyException("kernel.gemm: sizes and strides must be non-negative")
        if s.a_taps and s.k % len(s.a_taps):
            raise VerifyException(f"kernel.gemm: {len(s.a_taps)} taps (a_taps) must divide "
                                  f"k = {s.k}")
        if s.a_taps and s.a[1] != 1:
            raise VerifyException(f"kernel.gemm: a window's elements are contiguous "
                                  f"(a_strides[1] = 1), got {s.a[1]}")
        if s.batch and s.m and s.n and 0 < s.c0 < s.m * s.n:
            raise VerifyException(f"kernel.gemm: c_batch_stride must be 0 or at least m*n = "
                                  f"{s.m * s.n} (the blocks of C must not overlap), got {s.c0}")
        if s.batch and s.m and s.n and s.k:
            reads = {"a": (s.a, (s.m, s.k), types[0]), "b": (s.b, (s.k, s.n), types[1])}
            for operand, (steps, (rows, columns), t) in reads.items():
                last = steps[0] * (s.batch - 1) + steps[1] * (rows - 1) + (
                    s.a_last_column() + A_TAPS_SLACK * bool(s.a_taps) if operand == "a"
                    else steps[2] * (columns - 1))
                if last >= t.get_shape()[0]:
                    raise VerifyException(f"kernel.gemm: {operand} is read up to element {last}, "
                                          f"past its {t.get_shape()[0]} elements")
        if s.bias and types[3].get_shape()[0] < s.bias_length:
            raise VerifyException(f"kernel.gemm: the bias holds {types[3].get_shape()[0]} "
                                  f"elements, one per {s.bias[:-1]} of C is {s.bias_length}")
        whole = (s.batch if s.c0 else 1) * s.m * s.n
        if s.residual and types[-1].get_shape()[0] < whole:
            raise VerifyException(f"kernel.gemm: the residual holds {types[-1].get_shape()[0]} "
                                  f"elements, C's blocks {whole}")
        c_needed = (s.m * s.n if s.c0 == 0 else (s.batch - 1) * s.c0 + s.m * s.n) \
            if s.batch and s.m and s.n else 0
        if types[2].get_shape()[0] < c_needed:
            raise VerifyException(f"kernel.gemm: c holds {types[2].get_shape()[0]} elements, "
                                  f"{c_needed} are written")


@irdl_op_definition
class ParallelForOp(IRDLOperation):
    name = "kernel.parallel_for"

    buffers = var_operand_def(MemRefType)
    count = opt_operand_def(IndexType)
    callee = prop_def(SymbolRefAttr)
    iterations = prop_def(IntegerAttr)

    assembly_format = ("$callee `(` $buffers `)` (`count` $count^)? attr-dict `:` "
                       "type($buffers)")
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())

    def __init__(self, callee: str, buffers: list[SSAValue], iterations: int,
                 count: SSAValue | None = None) -> None:
        super().__init__(operands=[buffers, [] if count is None else [count]], properties={
            "callee": SymbolRefAttr(callee), "iterations": IntegerAttr(iterations, i64)})

    def verify_(self) -> None:
        if self.iterations.value.data < 0:
            raise VerifyException("kernel.parallel_for: iterations must be non-negative")


@irdl_op_definition
class MarkOp(IRDLOperation):
    name = "kernel.mark"

    index = prop_def(IntegerAttr)

    assembly_format = "attr-dict"
    irdl_options = (ParsePropInAttrDict(),)

    def __init__(self, index: int) -> None:
        super().__init__(properties={"index": IntegerAttr(index, i64)})


@irdl_op_definition
class ViewOp(IRDLOperation):
    name = "kernel.view"

    source = operand_def(MemRefType)
    offset = operand_def(IndexType)
    result = result_def(MemRefType)

    assembly_format = "$source `[` $offset `]` attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue, offset: SSAValue, kind: MemRefType) -> None:
        super().__init__(operands=[source, offset], result_types=[kind])

    def verify_(self) -> None:
        source, result = self.source.type, self.result.type
        if (len(source.get_shape()) != 1 or len(result.get_shape()) != 1
                or source.get_element_type() != result.get_element_type()
                or result.get_shape()[0] > source.get_shape()[0]):
            raise VerifyException(f"kernel.view: a flat buffer of the source's element type and "
                                  f"at most its size, got {source} -> {result}")


@irdl_op_definition
class SharedOp(IRDLOperation):
    name = "kernel.shared"

    result = result_def(MemRefType)

    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, kind: MemRefType) -> None:
        super().__init__(result_types=[kind])

    def verify_(self) -> None:
        parent = self.parent_op()
        while parent is not None and parent.name != "gpu.func":
            parent = parent.parent_op()
        if parent is None:
            raise VerifyException("kernel.shared: shared memory exists only inside a gpu.func")
        if len(self.result.type.get_shape()) != 1:
            raise VerifyException("kernel.shared: a flat buffer (memref<N x T>)")


Kernel = Dialect("kernel", [GemmOp, MarkOp, ParallelForOp, SharedOp, ViewOp])
