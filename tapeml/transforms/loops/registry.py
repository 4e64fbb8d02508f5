"""The lowering of each tape op, found by its class: `LOWERINGS[type(op)]`. Each family's
module (elementwise, layout, reductions, contractions, convolutions, windows) registers its ops
with `@lowering(...)`; tape-to-loops calls them, and a test fails for any op without one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from tapeml.dialects.registry import OpTable
from tapeml.transforms.loops.buffers import PlanReport
from tapeml.transforms.loops.emitter import Emitter
from tapeml.transforms.loops.epilogues import Epilogue


@dataclass
class Context:
    """What a lowering may need besides its op and buffers."""

    module: ModuleOp
    """Where constants become memref.globals."""
    report: PlanReport
    """The buffer plan's report: a lowering's scratch buffers go in it."""
    views: dict[SSAValue, list[int]]
    """Transposes read in place by the matmuls: result -> its strides in the input buffer."""
    row_reductions: bool
    """The CPU's reductions (see lower_reduction) and max pools (see lower_pool)."""
    constant_name: Callable[[], str]
    """A fresh name for a memref.global."""
    weight_runs: bool = True
    """A wide convolution weight gradient as products over runs of images (see
    lower_conv2d_gemm), not a product per image."""
    image_group: int = 0
    """A large convolution's im2col this many images at a time, their product after it, in a
    loop over the images (see lower_conv2d_gemm; 0: all at once; the CPU's: its threads)."""
    window_convs: bool = False
    """A stride-1 convolution of few output channels as a product over its zero-padded input's
    windows read in place (kernel.gemm's a_taps; see lower_conv2d_gemm), not over an im2col
    matrix (the CPU's)."""
    pixel_rows: bool = False
    """A forward convolution whose product pads fewer tiles with the pixels as C's rows as
    that product, stored transposed (see lower_conv2d_gemm; the CPU's)."""
    any_batch: bool = False
    """The loops of a program compiled for every batch size (jit's batch_argnums,
    tapeml/codegen/batch_generic.py): no choice of structure by a size a batch changes, where
    the lowering can do without one (a reduction's remainder loop is written even where it
    runs no trip; the rows of a sum over the batch are not grouped by their count)."""
    epilogue: Epilogue | None = None
    """Set for a product (conv2d, matmul) lowered in place of the op that folds into it
    (epilogues.py): its kernel.gemm's epilogue, the bias a buffer."""
    out_images: int = 0
    """Set for a convolution writing its part of a concat's buffer at batch > 1: the elements
    from one image of `out` to the next (0: one image right after another)."""


Lowering = Callable[[Emitter, Operation, list[SSAValue], SSAValue, Context], SSAValue | None]
"""lower(e, op, ins, out, cx) writes op's result into `out` (a fresh buffer, or the caller's)
from `ins` (its operands' buffers); it returns the buffer that holds the result when that is
not `out` (a constant read from a global, a reshape's operand), else None."""

LOWERINGS: OpTable[Lowering] = OpTable("loops")
lowering = LOWERINGS.register
