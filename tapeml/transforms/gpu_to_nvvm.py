"""The kernels of a gpu.module (after `convert-loops-to-gpu`) as an llvm-dialect module for
NVIDIA GPUs: each gpu.func an llvm.func (the PTX backend marks it a kernel), through the same
conversions as the CPU's (convert-scf-to-cf, convert-loops-to-llvm), plus:

    gpu.thread_id / block_id / block_dim / grid_dim    the PTX special registers tid, ctaid,
                                                       ntid, nctaid (llvm.nvvm.read.ptx.sreg.*)
    gpu.barrier                                        llvm.nvvm.barrier0 (bar.sync 0)
    math.exp, log, tanh, powf, llvm.frem               libdevice's __nv_expf, __nv_logf, ...
                                                       (LLVM's NVPTX backend has no lowering for
                                                       the intrinsics and aborts the process)
    kernel.shared                                      a call to @__tapeml_shared_<N>x<T>_<i>,
                                                       which the PTX backend replaces by a
                                                       buffer in shared memory (addrspace 3)
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import func, gpu, llvm
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import ModuleOp, f32, i32, i64
from xdsl.ir import Operation
from xdsl.rewriter import Rewriter

from tapeml.dialects import kernel
from tapeml.transforms.scf_to_cf import loops_to_cf
from tapeml.transforms.to_llvm import PTR, Converted, Converter, convert_to_llvm, one_op
from tapeml.transforms.to_loops import LoweringError

_REGISTERS = {gpu.ThreadIdOp: "tid", gpu.BlockIdOp: "ctaid", gpu.BlockDimOp: "ntid",
              gpu.GridDimOp: "nctaid"}
LIBDEVICE = {xmath.ExpOp: "exp", xmath.LogOp: "log", xmath.TanhOp: "tanh", xmath.PowFOp: "pow",
             xmath.SinOp: "sin", xmath.CosOp: "cos", xmath.ErfOp: "erf", llvm.FRemOp: "fmod"}
"""The math ops the GPU computes with libdevice's __nv_<name>[f]; the others lower as on the CPU
(to_llvm.py's intrinsics, the ones NVPTX has: sqrt, maximum, minimum). llvm.frem (tape.fmod's
loops) is among them: NVPTX expands frem as x - trunc(x/y)*y, inexact, where __nv_fmod[f] is
C's exact fmod."""
SHARED_PREFIX = "__tapeml_shared_"


def libdevice_name(op: Operation) -> str:
    t = op.results[0].type
    return f"__nv_{LIBDEVICE[type(op)]}{'f' if t == f32 else ''}"


def gpu_converters(shared: dict[Operation, str]) -> dict[type[Operation], Converter]:
    """The conversions above, for convert_to_llvm; `shared`: each kernel.shared's placeholder
    (named before the buffer types become pointers)."""
    def register(op: Operation) -> Converted:
        name = f"llvm.nvvm.read.ptx.sreg.{_REGISTERS[type(op)]}.{op.dimension.data.value}"
        read = llvm.CallIntrinsicOp(name, [], [i32])
        extend = llvm.ZExtOp(read.results[0], i64)
        return [read, extend], extend.results

    def libdevice(op: Operation) -> Converted:
        return one_op(llvm.CallOp(libdevice_name(op), *op.operands,
                                return_type=op.results[0].type))

    return {**dict.fromkeys(_REGISTERS, register),
            gpu.BarrierOp: lambda op: ([llvm.CallIntrinsicOp("llvm.nvvm.barrier0", [], [])], []),
            kernel.SharedOp: lambda op: one_op(llvm.CallOp(shared[op], return_type=PTR)),
            **dict.fromkeys(LIBDEVICE, libdevice)}


def kernels_to_llvm(modules: Sequence[gpu.ModuleOp]
                    ) -> tuple[ModuleOp, dict[str, tuple[int, ...] | None]]:
    """One llvm-dialect module of the functions of `modules` (their names are distinct: each
    starts with its host function's), and each kernel's block size where it is known."""
    functions, names = [], {}
    for f in (op for kernels in modules for op in kernels.body.block.ops):
        if not isinstance(f, gpu.FuncOp):
            raise LoweringError(f"gpu-to-nvvm: a gpu.module holds gpu.func's, not {f.name}")
        body = f.body.clone()
        for op in list(body.walk()):
            if isinstance(op, gpu.ReturnOp):
                Rewriter.replace_op(op, func.ReturnOp())
        functions.append(func.FuncOp(f.sym_name.data, f.function_type, body))
        if f.kernel is not None:
            known = f.known_block_size
            names[f.sym_name.data] = tuple(known.get_values()) if known is not None else None
    device = ModuleOp(functions)
    loops_to_cf(device)
    shared = [op for op in device.walk() if isinstance(op, kernel.SharedOp)]
    names_of = {op: f"{SHARED_PREFIX}{op.result.type.get_shape()[0]}x"
                    f"{op.result.type.get_element_type()}_{i}" for i, op in enumerate(shared)}
    convert_to_llvm(device, gpu_converters(names_of), prefix="")  # the kernels keep their names
    declared: dict[str, llvm.LLVMFunctionType] = {}
    known = {op.sym_name.data for op in device.ops if isinstance(op, llvm.FuncOp)}
    for op in device.walk():
        if isinstance(op, llvm.CallOp):
            callee = op.callee.root_reference.data
            declared[callee] = llvm.LLVMFunctionType([a.type for a in op.args],
                                                     op.results[0].type if op.results else None)
    for name, fty in declared.items():
        if name in known:
            continue
        device.body.block.add_op(llvm.FuncOp(name, fty, linkage=llvm.LinkageAttr("external")))
    return device, names
