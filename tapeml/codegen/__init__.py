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

import inspect
from typing import Any, Protocol

import numpy as np
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
        from tapeml.codegen.cpu import CPUBackend as backend
    elif name == "cuda":
        from tapeml.codegen.cuda import CUDABackend as backend
    elif name == "iree":
        from tapeml.codegen.iree import IREEBackend as backend
    else:
        raise ValueError(f"unknown backend {name!r} (backends: interp, cpu, cuda, iree)")
    known = [n for n, p in inspect.signature(backend).parameters.items()
             if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"the {name} backend has no option{'s' * (len(unknown) > 1)} "
                        f"{', '.join(unknown)} (its options: {', '.join(known)})")
    for flag in ("fuse", "libm", "emulate"):
        if flag in options and not (isinstance(options[flag], bool | np.bool_)
                                    or options[flag] in (0, 1)):
            raise TypeError(f"the {name} backend's {flag} must be True or False, got "
                            f"{options[flag]!r}")
    return backend(**options)
