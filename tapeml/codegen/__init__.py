"""Backends: a tape module in, a callable over flat arrays out.

    backend.compile(module) -> Compiled     # Compiled(*leaves) -> tuple of output arrays
    backend.compile(module, stages=True)    # also every stage as text: Compiled.stages
    backend.compile(module, owned=True)     # the module given away: changed in place

The module holds a tape function (a traced Program's `.module`, or one parsed from a file);
its arguments and results, with their names, are the compiled function's
(tapeml/codegen/arguments.py). Backends know nothing of the front end.

`interp` runs the program on xDSL's interpreter (the reference); `cpu` compiles it through the
loop form and LLVM to machine code for this CPU; `cuda` to PTX for an NVIDIA GPU, run through
cuda-python (or, with emulate=True, its GPU form on the interpreter); `iree` writes it as
StableHLO and runs it through IREE's compiler and runtime.
"""

from __future__ import annotations

from typing import Any, Protocol

from xdsl.dialects.builtin import ModuleOp


class Compiled(Protocol):
    stages: dict[str, str]
    """Each stage of the compilation as text, in order (tape, fused tape, ...); empty unless
    compiled with `stages=True` (printing them costs a fifth of a large program's compile)."""

    def __call__(self, *leaves: Any) -> tuple[Any, ...]: ...


class Backend(Protocol):
    name: str

    def compile(self, module: ModuleOp, stages: bool = False, owned: bool = False
                ) -> Compiled:
        """`owned`: the caller gives `module` away (it reads it no more: jit's traced
        programs), so the pipeline may change it in place instead of a copy (a copy of the
        8-layer GPT step's was 33 ms); otherwise the module stays as it was."""
        ...


def get_backend(name: str, **options: Any) -> Backend:
    """A backend by name; options go to its constructor (cpu: fuse=, libm=; cuda: fuse=,
    emulate=, arch=; iree: fuse=)."""
    if name == "interp":
        from tapeml.codegen.interp import InterpBackend

        if options:
            raise TypeError(f"the interp backend takes no options, got {sorted(options)}")
        return InterpBackend()
    if name == "cpu":
        from tapeml.codegen.cpu import CPUBackend

        return CPUBackend(**options)
    if name == "cuda":
        from tapeml.codegen.cuda import CUDABackend

        return CUDABackend(**options)
    if name == "iree":
        from tapeml.codegen.iree import IREEBackend

        return IREEBackend(**options)
    raise ValueError(f"unknown backend {name!r} (backends: interp, cpu, cuda, iree)")
