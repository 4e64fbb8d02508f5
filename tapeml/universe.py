"""What tapeml adds to xDSL's tools: its dialect, passes and targets, by name, loaded lazily.

Published as the `xdsl.universe` entry point `tapeml`, so stock `xdsl-opt` and `xdsl-run` see
them too; `tapeml-opt` registers them itself as well.
"""

from collections.abc import Callable

from xdsl.ir import Dialect
from xdsl.passes import ModulePass
from xdsl.universe import Universe
from xdsl.utils.frontend import Frontend
from xdsl.utils.target import Target


def _tape_dialect() -> Dialect:
    from tapeml.dialects.tape import Tape

    return Tape


def _kernel_dialect() -> Dialect:
    from tapeml.dialects.kernel import Kernel

    return Kernel


def _differentiate() -> type[ModulePass]:
    from tapeml.transforms.differentiate import DifferentiatePass

    return DifferentiatePass


def _fuse() -> type[ModulePass]:
    from tapeml.transforms.fuse import FusePass

    return FusePass


def _to_loops() -> type[ModulePass]:
    from tapeml.transforms.to_loops import ToLoopsPass

    return ToLoopsPass


def _to_gpu() -> type[ModulePass]:
    from tapeml.transforms.to_gpu import ConvertLoopsToGPUPass

    return ConvertLoopsToGPUPass


def _tape_to_gpu() -> type[ModulePass]:
    from tapeml.transforms.pipelines import TapeToGPUPass

    return TapeToGPUPass


def _outline_parallel() -> type[ModulePass]:
    from tapeml.transforms.outline_parallel import OutlineParallelLoopsPass

    return OutlineParallelLoopsPass


def _plan_arena() -> type[ModulePass]:
    from tapeml.transforms.arena import PlanArenaPass

    return PlanArenaPass


def _bound_arguments() -> type[ModulePass]:
    from tapeml.transforms.bound_arguments import LoopBoundsAsArgumentsPass

    return LoopBoundsAsArgumentsPass


def _merge_nests() -> type[ModulePass]:
    from tapeml.transforms.merge_nests import MergeLoopNestsPass

    return MergeLoopNestsPass


def _to_llvm() -> type[ModulePass]:
    from tapeml.transforms.to_llvm import ConvertLoopsToLLVMPass

    return ConvertLoopsToLLVMPass


def _tape_to_llvm() -> type[ModulePass]:
    from tapeml.transforms.pipelines import TapeToLLVMPass

    return TapeToLLVMPass


def _host_asm() -> type[Target]:
    from tapeml.codegen.cpu import HostAsmTarget

    return HostAsmTarget


DIALECTS: dict[str, Callable[[], Dialect]] = {"tape": _tape_dialect, "kernel": _kernel_dialect}
PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "tape-differentiate": _differentiate,
    "tape-fuse": _fuse,
    "tape-to-loops": _to_loops,
    "convert-loops-to-gpu": _to_gpu,
    "outline-parallel-loops": _outline_parallel,
    "plan-arena": _plan_arena,
    "loop-bounds-as-arguments": _bound_arguments,
    "merge-loop-nests": _merge_nests,
    "convert-loops-to-llvm": _to_llvm,
    "tape-to-llvm": _tape_to_llvm,
    "tape-to-gpu": _tape_to_gpu,
}


def scf_to_cf() -> type[ModulePass]:
    """tapeml-opt's `convert-scf-to-cf`, in place of xDSL's: it also lowers scf.parallel, as
    MLIR's does (not published in the universe, where a second pass of a name is an error)."""
    from tapeml.transforms.scf_to_cf import ConvertScfToCfPass

    return ConvertScfToCfPass


def llvm_ir() -> type[Target]:
    """tapeml-opt's `-t llvm`, in place of xDSL's: it also links in the generated kernels
    (not published in the universe, where a second `llvm` target is an error)."""
    from tapeml.codegen.cpu import LLVMIRTarget

    return LLVMIRTarget


def _ptx() -> type[Target]:
    from tapeml.codegen.ptx import PTXTarget

    return PTXTarget


def _stablehlo() -> type[Target]:
    from tapeml.stablehlo.target import StableHLOTarget

    return StableHLOTarget


TARGETS: dict[str, Callable[[], type[Target]]] = {"host-asm": _host_asm, "ptx": _ptx,
                                                  "stablehlo": _stablehlo}


def _onnx() -> type[Frontend]:
    from tapeml.onnx.frontend import OnnxFrontend

    return OnnxFrontend


FRONTENDS: dict[str, Callable[[], type[Frontend]]] = {"onnx": _onnx}

TAPEML_UNIVERSE = Universe(all_dialects=DIALECTS, all_passes=PASSES, all_targets=TARGETS,
                           all_frontends=FRONTENDS)
