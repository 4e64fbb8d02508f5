"""The pipelines, as data: the passes each backend runs on a tape module, with their options,
defined once. The CPU and CUDA backends run these lists (recording each step for
`tapeml.profile()` and keeping its text for `jit(...).lower()`), and so do the `tape-to-llvm`
and `tape-to-gpu` passes of `tapeml-opt`: the CLI's output is what `jit` compiles.

Machine-dependent choices are options with fixed defaults (one thread), so `tapeml-opt` prints
the same module on every machine; the CPU backend passes the host's thread count.

A tapeml pass's `run(module)` does its `apply` and returns what it did (its `str` is the
profile's detail; the CPU backend reads the arena's size from plan-arena's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.transforms.canonicalize import CanonicalizePass
from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination

from tapeml.transforms.arena import PlanArenaPass
from tapeml.transforms.bound_arguments import LoopBoundsAsArgumentsPass
from tapeml.transforms.fuse import FusePass
from tapeml.transforms.gemm_gpu import GEMM_TILE
from tapeml.transforms.merge_nests import MergeLoopNestsPass
from tapeml.transforms.outline_parallel import OutlineParallelLoopsPass
from tapeml.transforms.scf_to_cf import ConvertScfToCfPass
from tapeml.transforms.to_gpu import BLOCK, ConvertLoopsToGPUPass
from tapeml.transforms.to_llvm import ConvertLoopsToLLVMPass
from tapeml.transforms.to_loops import LoweringError, ToLoopsPass


class Step(NamedTuple):
    pass_: ModulePass
    stage: str | None = None
    """The name the module's text after this pass is kept under (`Compiled.stages`)."""


def cpu_pipeline(fuse: bool = True, libm: bool = False, threads: int = 1, tidy: bool = False,
                 profile: bool = False, weight_runs: bool = True, any_batch: bool = False
                 ) -> list[Step]:
    """tape -> the llvm dialect, for the CPU: `threads` > 1 outlines the parallel loops worth
    it for the thread pool; `tidy` runs canonicalize and cse after convert-scf-to-cf, for a
    reader (LLVM does that work again, so the backend does not); `profile` marks each tape
    op's loops for a profiled run (tape-to-loops'); `any_batch`, loops for every batch size
    (tape-to-loops')."""
    return [
        *([Step(FusePass(), "fused tape")] if fuse else []),
        Step(ToLoopsPass(libm=libm, row_reductions=True, share=True, profile=profile,
                         weight_runs=weight_runs, image_group=max(threads, 1),
                         concat_in_place=True, gemm_epilogues=True, window_convs=True,
                         pixel_rows=True, any_batch=any_batch),
             "loops"),
        *([Step(OutlineParallelLoopsPass(any_batch=any_batch), "outlined loops")]
          if threads > 1 else []),
        Step(PlanArenaPass(), "arena"),
        *([] if any_batch else [Step(LoopBoundsAsArgumentsPass())]),
        Step(MergeLoopNestsPass(every=any_batch)),
        Step(ConvertScfToCfPass()),
        *([Step(CanonicalizePass()), Step(CommonSubexpressionElimination())] if tidy else []),
        Step(ConvertLoopsToLLVMPass(threads=threads), "llvm dialect"),
    ]


def gpu_pipeline(fuse: bool = True, block: int = BLOCK, gemm_tile: int = GEMM_TILE
                 ) -> list[Step]:
    """tape -> the GPU form (a host function launching gpu.module kernels), for CUDA: exp,
    log, tanh and sigmoid as arithmetic, one thread per reduction output."""
    return [
        *([Step(FusePass(), "fused tape")] if fuse else []),
        Step(ToLoopsPass(), "loops"),
        Step(ConvertLoopsToGPUPass(block=block, gemm_tile=gemm_tile), "gpu"),
    ]


def apply_pipeline(steps: list[Step], ctx: Context, module: ModuleOp) -> None:
    for step in steps:
        step.pass_.apply(ctx, module)


@dataclass(frozen=True)
class TapeToLLVMPass(ModulePass):
    """The whole way from tape to the llvm dialect: the CPU backend's pipeline (cpu_pipeline:
    tape-fuse, tape-to-loops{row_reductions, share, image_group, concat_in_place,
    gemm_epilogues, window_convs, pixel_rows},
    outline-parallel-loops when threads > 1, plan-arena, loop-bounds-as-arguments,
    merge-loop-nests, convert-scf-to-cf, convert-loops-to-llvm).
    `-t llvm` then prints LLVM IR."""

    name = "tape-to-llvm"

    fuse: bool = True
    """Run tape-fuse first."""
    libm: bool = False
    """Call libm for exp, log, tanh, sigmoid and f32 erf (default: vectorizable arithmetic)."""
    threads: int = 1
    """Threads the thread pool shares each outlined loop among (jit: the host's)."""
    tidy: bool = False
    """canonicalize and cse after convert-scf-to-cf, for a reader (the backend leaves that
    work to LLVM)."""
    weight_runs: bool = True
    """tape-to-loops' (jit: the host's choice, Target.weight_runs)."""
    any_batch: bool = False
    """Loops for every batch size (jit's batch_argnums): tape-to-loops{any_batch},
    outline-parallel-loops{any_batch}, merge-loop-nests{every}, and no
    loop-bounds-as-arguments."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not isinstance(self.threads, int) or self.threads < 1:
            raise LoweringError(f"tape-to-llvm: threads must be 1 or more, got {self.threads}")
        apply_pipeline(cpu_pipeline(self.fuse, self.libm, self.threads, self.tidy,
                                    weight_runs=self.weight_runs, any_batch=self.any_batch),
                       ctx, op)


@dataclass(frozen=True)
class TapeToGPUPass(ModulePass):
    """The whole way from tape to the GPU form: the CUDA backend's pipeline (gpu_pipeline:
    tape-fuse, tape-to-loops, convert-loops-to-gpu). `-t ptx` then prints the kernels' PTX."""

    name = "tape-to-gpu"

    fuse: bool = True
    """Run tape-fuse first."""
    block: int = BLOCK
    """Threads per block of a parallel-loop kernel."""
    gemm_tile: int = GEMM_TILE
    """The GEMM kernels' tile (see convert-loops-to-gpu)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        apply_pipeline(gpu_pipeline(self.fuse, self.block, self.gemm_tile), ctx, op)
