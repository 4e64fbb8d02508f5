"""The CUDA backend: tape -> tape-fuse -> tape-to-loops -> convert-loops-to-gpu -> PTX for the
GPU's architecture (ptx.py) -> cuda-python's driver API (cuda_driver.py).

The PTX is compiled for the GPU's architecture (or the one given: then no GPU is needed until
the first call, so `jit(f, backend="cuda", arch="sm_90").lower(x)` shows the PTX anywhere) and
loaded on the first call. The host function that convert-loops-to-gpu
leaves is read once into a schedule: launches with their grids and buffers, and the device
buffers of its intermediates, placed by their live ranges in one arena (allocated on the first
call and reused) so the GPU holds at most the live ones, as the CPU's plan does. Constant
arrays are copied to the device once.

A call checks every argument's shape and dtype (and that no device array was freed) before it
copies any. Arguments may be numpy arrays (copied to
the device) or DeviceArrays (used where they are: parameters stay on the GPU between steps);
results are DeviceArrays (`.numpy()` copies one back).

`emulate=True` runs the same GPU form on xDSL's interpreter (tapeml/interpreters/gpu.py)
instead: no GPU needed, numpy in and out, slow; how the tests check the kernels everywhere.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.dialects import arith, func, gpu, memref
from xdsl.dialects.builtin import ModuleOp

from tapeml.codegen import cuda_driver
from tapeml.codegen.arguments import Argument, checked, signature
from tapeml.codegen.ptx import ARCHES, compile_ptx
from tapeml.codegen.stages import Stages, run_pipeline
from tapeml.dialects.tape.types import dtype_of
from tapeml.interpreters import interpret
from tapeml.profile import record
from tapeml.transforms.arena import FirstFit, element_bytes
from tapeml.transforms.gemm_gpu import GEMM_TILE
from tapeml.transforms.pipelines import gpu_pipeline
from tapeml.transforms.to_gpu import MAX_GEMM_TILE
from tapeml.transforms.to_loops import LoweringError

_ALIGN = 256  # bytes: every buffer in the arena starts on a 256-byte boundary, as cuMemAlloc's


def arch_for(capability: tuple[int, int]) -> str:
    """The PTX target for a GPU of compute `capability`: sm_90 for 9.x and newer, else sm_80."""
    if capability < (8, 0):
        raise cuda_driver.GPUUnavailableError(
            f"backend='cuda' needs a GPU of compute capability 8.0 or newer (sm_80), this one "
            f"is {capability[0]}.{capability[1]}")
    return "sm_90" if capability >= (9, 0) else "sm_80"


@dataclass
class Launch:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    slots: list[int]


@dataclass
class Schedule:
    """The host function as data: its launches in order, each naming its buffers by slot."""

    launches: list[Launch]
    slots: int
    arguments: int
    """Slots 0 .. arguments-1 are the function's inputs, then its outputs."""
    arena: dict[int, int]
    """Intermediate slot -> byte offset in the arena."""
    arena_bytes: int
    constants: dict[int, np.ndarray]
    """Constant slot -> its value (copied to the device once)."""


def schedule(f: func.FuncOp) -> Schedule:
    """Read the host function `f` (after convert-loops-to-gpu)."""
    block = f.body.block
    slot: dict[Any, int] = {arg: i for i, arg in enumerate(block.args)}
    launches: list[Launch] = []
    placement = FirstFit(_ALIGN)
    arena: dict[int, int] = {}
    constants: dict[int, np.ndarray] = {}
    globals_ = {op.sym_name.data: op for op in f.parent_op().walk()
                if isinstance(op, memref.GlobalOp)}
    for op in block.ops:
        if isinstance(op, arith.ConstantOp | func.ReturnOp):
            continue
        if isinstance(op, gpu.AllocOp):
            kind = op.result.type
            slot[op.result] = len(slot)
            arena[slot[op.result]] = placement.place(
                slot[op.result], kind.get_shape()[0] * element_bytes(kind.get_element_type()))
        elif isinstance(op, gpu.DeallocOp):
            placement.free(slot[op.buffer])
        elif isinstance(op, memref.GetGlobalOp):
            slot[op.memref] = len(slot)
            constants[slot[op.memref]] = _global_value(globals_[op.name_.root_reference.data])
        elif isinstance(op, gpu.LaunchFuncOp):
            sizes = [_index(v) for v in op.operands[:6]]
            launches.append(Launch(op.kernel.nested_references.data[0].data,
                                   tuple(sizes[:3]), tuple(sizes[3:]),
                                   [slot[v] for v in op.kernelOperands]))
        else:
            raise LoweringError(f"backend='cuda': the host function holds {op.name}, which "
                                "only the GPU form's launches, allocations and constants may")
    return Schedule(launches, len(slot), len(block.args), arena, placement.size, constants)


def _index(value: Any) -> int:
    owner = value.owner
    if not isinstance(owner, arith.ConstantOp):
        raise LoweringError("backend='cuda': launch sizes must be constants")
    return owner.value.value.data


def _global_value(op: memref.GlobalOp) -> np.ndarray:
    """A constant's elements in its own dtype (an i32 index table read as f32 was garbage)."""
    return np.asarray(op.initial_value.get_values(), dtype=dtype_of(op.type)).reshape(-1)


@dataclass
class CUDAProgram:
    """A program compiled for the GPU: call it with the program's flat arguments."""

    name: str
    inputs: list[Argument]
    outputs: list[Argument]
    plan: Schedule
    ptx: str
    stages: dict[str, str] = field(default_factory=dict)
    _context: Any = None
    _module: Any = None  # the loaded PTX: kept alive as long as its functions are
    _functions: dict[str, Any] = field(default_factory=dict)
    _arena: Any = None
    _constants: dict[int, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, *leaves: Any) -> tuple[cuda_driver.DeviceArray, ...]:
        if len(leaves) != len(self.inputs):
            raise TypeError(f"@{self.name} takes {len(self.inputs)} arrays, got {len(leaves)}")
        checked_leaves = [_checked_leaf(leaf, arg, self.name) for leaf, arg in
                          zip(leaves, self.inputs, strict=True)]  # all, before any copy
        arrays = [leaf if isinstance(leaf, cuda_driver.DeviceArray) else
                  cuda_driver.DeviceArray.from_numpy(leaf) for leaf in checked_leaves]
        outputs = [cuda_driver.DeviceArray.empty(a.shape, a.dtype) for a in self.outputs]
        with self._lock:  # one arena: calls run one after another
            if self._arena is None:  # the first call loads the PTX (a GPU is needed from here)
                self._context = cuda_driver.context()
                self._module = self._context.load(self.ptx)
                self._functions = {launch.kernel: self._module.function(launch.kernel)
                                   for launch in self.plan.launches}
                self._arena = self._context.alloc(self.plan.arena_bytes)
                for i, value in self.plan.constants.items():
                    self._constants[i] = cuda_driver.DeviceArray.from_numpy(value)
            pointers = [a.buffer.pointer for a in (*arrays, *outputs)]
            pointers += [0] * (self.plan.slots - len(pointers))
            for i, offset in self.plan.arena.items():
                pointers[i] = self._arena.pointer + offset
            for i, array in self._constants.items():
                pointers[i] = array.buffer.pointer
            for launch in self.plan.launches:
                self._functions[launch.kernel].launch(launch.grid, launch.block,
                                                      [pointers[i] for i in launch.slots])
            self._context.synchronize()
        return tuple(outputs)


def _checked_leaf(value: Any, arg: Argument, name: str) -> cuda_driver.DeviceArray | np.ndarray:
    """A DeviceArray of `arg`'s shape and dtype, or a numpy array checked as the CPU's."""
    if isinstance(value, cuda_driver.DeviceArray):
        if value.buffer.freed:
            raise ValueError(f"@{name}: argument `{arg.name}` is a freed device array")
        if value.dtype != arg.dtype:
            raise TypeError(f"@{name}: argument `{arg.name}` must be {arg.dtype}, got "
                            f"{value.dtype}")
        if value.shape != arg.shape:
            raise ValueError(f"@{name}: argument `{arg.name}` must have shape {arg.shape}, got "
                             f"{value.shape}")
        return value
    return checked(value, arg, name)


@dataclass
class Emulated:
    """The GPU form on xDSL's interpreter: numpy in, numpy out."""

    name: str
    module: ModuleOp
    inputs: list[Argument]
    outputs: list[Argument]
    stages: dict[str, str] = field(default_factory=dict)

    def __call__(self, *leaves: Any) -> tuple[np.ndarray, ...]:
        if len(leaves) != len(self.inputs):
            raise TypeError(f"@{self.name} takes {len(self.inputs)} arrays, got {len(leaves)}")
        buffers = [_writable(checked(leaf, arg, self.name)).reshape(-1) for leaf, arg in
                   zip(leaves, self.inputs, strict=True)]
        outputs = [np.zeros(a.shape, a.dtype) for a in self.outputs]
        interpret(self.module, self.name, *buffers, *(o.reshape(-1) for o in outputs))
        return tuple(outputs)


def _writable(array: np.ndarray) -> np.ndarray:
    """`array`, or a copy where it is read-only: the interpreter takes every memref as an
    array it may write (the program only reads its inputs)."""
    return array if array.flags.writeable else array.copy()


class CUDABackend:
    name = "cuda"

    def __init__(self, fuse: bool = True, emulate: bool = False, arch: str | None = None,
                 gemm_tile: int = GEMM_TILE) -> None:
        """`arch`: sm_80 or sm_90 (default: the GPU's); `gemm_tile`: the GEMM kernels' tile
        (tile x tile threads per block; a small one makes emulation fast)."""
        if arch is not None and arch not in ARCHES:
            raise ValueError(f"backend='cuda': arch must be one of {', '.join(ARCHES)}, "
                             f"got {arch!r}")
        if not isinstance(gemm_tile, int) or not 1 <= gemm_tile <= MAX_GEMM_TILE:
            raise ValueError(f"backend='cuda': gemm_tile must be an int from 1 to "
                             f"{MAX_GEMM_TILE}, got {gemm_tile!r}")
        self.fuse, self.emulate, self.arch, self.gemm_tile = fuse, emulate, arch, gemm_tile

    def compile(self, module: ModuleOp, stages: bool = False, owned: bool = False
                ) -> CUDAProgram | Emulated:
        """`module`'s tape function (tapeml/codegen/arguments.py) as PTX kernels and their
        schedule, or (emulate) its GPU form on the interpreter."""
        # the GPU's architecture, unless given: no GPU is then a clear error, said first
        context = None if self.emulate or self.arch else cuda_driver.context()
        kept = Stages(stages)
        name, inputs, outputs = signature(module)
        module, _ = run_pipeline(module, gpu_pipeline(self.fuse, gemm_tile=self.gemm_tile),
                                 kept, in_place=owned)
        f = next(op for op in module.ops if isinstance(op, func.FuncOp))
        if self.emulate:
            return Emulated(name, module, inputs, outputs, kept.texts)
        kernels = next(op for op in module.ops if isinstance(op, gpu.ModuleOp))
        started = time.perf_counter()
        compiled = compile_ptx(kernels, self.arch or arch_for(context.compute_capability))
        kept.keep("llvm ir", lambda: compiled.llvm_ir)
        kept.keep("ptx", lambda: compiled.ptx)
        record("PTX (LLVM O3, NVPTX)", None, started, f"{len(compiled.kernels)} kernels")
        return CUDAProgram(name, inputs, outputs, schedule(f), compiled.ptx, kept.texts)
