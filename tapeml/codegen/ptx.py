"""PTX for NVIDIA GPUs: the kernels of a gpu.module (gpu_to_nvvm.py's llvm dialect) through
xDSL's convert_module and llvmlite's NVPTX backend (nvptx64-nvidia-cuda, sm_80 or sm_90).

    kernels      each marked `ptx_kernel` (PTX .entry), every pointer argument noalias (distinct
                 buffers, as on the CPU)
    shared       each kernel.shared placeholder becomes an addrspace(3) array, read through a
                 generic pointer (LLVM's address-space inference makes the accesses ld.shared)
    math         exp, log, tanh and sigmoid are arithmetic (transcendentals.py); pow (and the
                 math dialect's exp/log/tanh, in a module lowered with libm=true) call
                 libdevice (the CUDA toolkit's nvvm/libdevice/libdevice.10.bc), linked in and
                 internalized so O3 keeps only what is called

LLVM's NVPTX backend aborts the whole process on an intrinsic it cannot lower (llvm.exp.f32,
llvm.tanh.f32, ...). So before LLVM sees the module, every call in it is checked against what
is known to lower; anything else is a PTXError, never a dead process.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import llvmlite.binding as llvm_binding
from xdsl.backend.llvm.convert import convert_module
from xdsl.context import Context
from xdsl.dialects import gpu
from xdsl.utils.target import Target as XTarget

from tapeml.codegen import llvm_worker
from tapeml.errors import PTXError
from tapeml.transforms.gpu_to_nvvm import LIBDEVICE, SHARED_PREFIX, kernels_to_llvm

TRIPLE = "nvptx64-nvidia-cuda"
DATA_LAYOUT = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
ARCHES = ("sm_80", "sm_90")
_PTX_VERSION = "+ptx80"  # PTX ISA 8.0: CUDA 12.0 and newer drivers load it

LOWERS_ON_NVPTX = re.compile(r"llvm\.nvvm\.read\.ptx\.sreg\.\w+\.[xyz]|llvm\.nvvm\.barrier0|"
                     r"llvm\.(sqrt|fabs|floor|ceil|roundeven|maximum|minimum|maxnum|minnum|fma)"
                     r"\.f(32|64)|"
                     r"llvm\.fptosi\.sat\.i(32|64)\.f(32|64)|"
                     rf"__nv_({'|'.join(LIBDEVICE.values())})f?")
"""Callees known to lower on NVPTX (the process-killing ones are not among them)."""


@functools.cache
def libdevice_path() -> Path | None:
    """The CUDA toolkit's libdevice: $TAPEML_LIBDEVICE, else under $CUDA_HOME / $CUDA_PATH,
    /usr/local/cuda*, or beside ptxas; None when there is none."""
    if os.environ.get("TAPEML_LIBDEVICE"):
        return Path(os.environ["TAPEML_LIBDEVICE"])
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda",
             *sorted(map(str, Path("/usr/local").glob("cuda-*")), reverse=True)]
    if (ptxas := shutil.which("ptxas")) is not None:
        roots.append(str(Path(ptxas).resolve().parent.parent))
    for root in filter(None, roots):
        path = Path(root) / "nvvm" / "libdevice" / "libdevice.10.bc"
        if path.is_file():
            return path
    return None


def llvm_ir(kernels: gpu.ModuleOp | Sequence[gpu.ModuleOp]) -> tuple[str, list[str]]:
    """The kernels of one or more gpu.modules as LLVM IR text for NVPTX, and their names. A
    kernel whose block size is known says so (`maxntid`: ptxas then keeps its registers within
    what that many threads may use)."""
    modules = [kernels] if isinstance(kernels, gpu.ModuleOp) else list(kernels)
    device, blocks = kernels_to_llvm(modules)
    ir_module = convert_module(device, fallback_target_triple=TRIPLE)
    ir_module.data_layout = DATA_LAYOUT
    for function in ir_module.functions:
        if function.name in blocks:
            function.calling_convention = "ptx_kernel"
            for arg in function.args:
                arg.add_attribute("noalias")
    annotations = [(name, f"maxntid{axis}", size) for name, block in blocks.items() if block
                   for axis, size in zip("xyz", block, strict=True)]
    text = _shared_buffers(str(ir_module))
    if annotations:
        text += "\n!nvvm.annotations = !{" + ", ".join(
            f"!{i}" for i in range(len(annotations))) + "}\n" + "".join(
            f'!{i} = !{{ptr @"{name}", !"{key}", i32 {value}}}\n'
            for i, (name, key, value) in enumerate(annotations))
    return text, list(blocks)


_ELEMENT = {"f32": "float", "f64": "double"}


def _shared_buffers(text: str) -> str:
    """Each kernel.shared placeholder's declaration becomes an array in shared memory, each call
    to it the array's generic address."""
    declared = re.compile(rf'^declare ptr @"?({SHARED_PREFIX}(\d+)x(f32|f64)_\d+)"?\(\)$',
                          re.MULTILINE)
    for name, size, element in declared.findall(text):
        text = re.sub(rf'^declare ptr @"?{name}"?\(\)$',
                      f'@"{name}" = internal addrspace(3) global [{size} x '
                      f'{_ELEMENT[element]}] undef, align 16', text, flags=re.MULTILINE)
        text = re.sub(rf'(%\S+) = call (?:ccc )?ptr @"?{name}"?\(\)',
                      rf'\1 = addrspacecast ptr addrspace(3) @"{name}" to ptr', text)
    return text


def _callees(text: str) -> set[str]:
    return set(re.findall(r'\bcall [^@\n]*@"?([\w.$]+)"?\(', text))


def _check_calls(text: str) -> bool:
    """Raise PTXError for a call NVPTX may not lower; whether libdevice is needed."""
    unknown = sorted(c for c in _callees(text) if not LOWERS_ON_NVPTX.fullmatch(c))
    if unknown:
        raise PTXError(f"PTX: no GPU lowering for {', '.join(unknown)}")
    return any(c.startswith("__nv_") for c in _callees(text))


def target_machine(arch: str) -> Any:
    if arch not in ARCHES:
        raise PTXError(f"PTX: arch must be one of {', '.join(ARCHES)}, got {arch!r}")
    llvm_binding.initialize_all_targets()
    llvm_binding.initialize_all_asmprinters()
    return llvm_binding.Target.from_triple(TRIPLE).create_target_machine(
        cpu=arch, features=_PTX_VERSION, opt=3)


@dataclass
class PTXModule:
    ptx: str
    kernels: list[str]
    llvm_ir: str


def compile_ptx(kernels: gpu.ModuleOp | Sequence[gpu.ModuleOp], arch: str = "sm_90"
                ) -> PTXModule:
    """PTX for every kernel of one or more gpu.modules, optimized at O3 for `arch`."""
    from tapeml.codegen.cpu import LLVM_LOCK

    text, names = llvm_ir(kernels)
    needs_libdevice = _check_calls(text)
    library = libdevice_path() if needs_libdevice else None
    if needs_libdevice and library is None:
        raise PTXError("PTX: pow (and libm-style exp/log/tanh) needs the CUDA toolkit's libdevice "
                       "(nvvm/libdevice/libdevice.10.bc): set CUDA_HOME or TAPEML_LIBDEVICE")
    with LLVM_LOCK:
        machine = target_machine(arch)
        parsed = llvm_binding.parse_assembly(text)
        parsed.verify()
        if library is not None:
            try:
                linked = llvm_binding.parse_bitcode(library.read_bytes())
            except (OSError, RuntimeError) as error:
                raise PTXError(f"PTX: cannot read libdevice from {library}: {error}") from None
            linked.triple, linked.data_layout = TRIPLE, DATA_LAYOUT
            parsed.link_in(linked)
            for function in parsed.functions:  # O3 then drops what no kernel calls
                if function.name not in names and not function.is_declaration:
                    function.linkage = "internal"
            for variable in parsed.global_variables:
                if not variable.is_declaration:
                    variable.linkage = "internal"
        passes = llvm_binding.create_pass_builder(
            machine, llvm_binding.create_pipeline_tuning_options(speed_level=3))
        with llvm_worker.unrolling(partial=True, runtime=True):
            passes.getModulePassManager().run(parsed, passes)
        return PTXModule(llvm_worker.emit(machine, parsed, assembly=True), names, text)


@dataclass(frozen=True)
class PTXTarget(XTarget):
    """`-t ptx`: the PTX of every gpu.module's kernels (after convert-loops-to-gpu), for sm_90."""

    name = "ptx"

    def emit(self, ctx: Context, module: Any, output: IO[str]) -> None:
        found = [op for op in module.walk() if isinstance(op, gpu.ModuleOp)]
        if not found:
            raise PTXError("-t ptx: no gpu.module to compile (lower first, e.g. -p tape-to-gpu)")
        names = ", ".join(f"@{kernels.sym_name.data}" for kernels in found)
        output.write(f"// the kernels of {names}\n")  # one PTX module: ptxas takes it whole
        output.write(compile_ptx(found).ptx)
