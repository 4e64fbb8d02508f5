"""The IREE backend: the program written as StableHLO (tapeml/stablehlo/), compiled by IREE's
compiler for this CPU (llvm-cpu, the host's features; f64 kept f64) and run by IREE's runtime
(the local-task driver). A reading of the same program by an industrial compiler: tests check
the StableHLO tapeml writes against the interpreter through it, and users can compare.

Needs the `iree` extra (`pip install tapeml[iree]`: iree-base-compiler, iree-base-runtime).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tapeml.codegen import disk_cache
from tapeml.codegen.arguments import Argument, checked, signature
from tapeml.codegen.cpu import machine_key
from tapeml.codegen.stages import Stages, run_pipeline
from tapeml.errors import IREEError
from tapeml.profile import record
from tapeml.stablehlo import emit
from tapeml.transforms.fuse import FusePass
from tapeml.transforms.pipelines import Step

COMPILE_FLAGS = ["--iree-llvmcpu-target-cpu=host", "--iree-input-demote-f64-to-f32=false",
                 "--iree-global-opt-use-im2col-for-convs"]
"""IREE demotes f64 to f32 unless told not to; tape's f64 is f64. Its convolutions as im2col
and a product: W4's step (bench/iree_steps.py) 124 -> 49 ms on one thread, where its direct
NCHW convolution took 60 ms for W4's second layer alone (tapeml's CPU backend: 2 ms)."""


def _iree() -> tuple[Any, Any]:
    try:
        import iree.compiler as compiler
        import iree.runtime as runtime
    except ImportError:
        raise ImportError("backend='iree' needs IREE's compiler and runtime: "
                          "pip install 'tapeml[iree]'") from None
    return compiler, runtime


_CONFIG: list[Any] = []


def _config(runtime: Any) -> Any:
    """One runtime configuration (one task pool) for the process; TAPEML_NUM_THREADS, when
    set, bounds its threads as it bounds tapeml's own."""
    if not _CONFIG:
        threads = os.environ.get("TAPEML_NUM_THREADS")
        if threads:
            runtime.flags.parse_flags(f"--task_topology_max_group_count={int(threads)}")
        _CONFIG.append(runtime.Config("local-task"))
    return _CONFIG[0]


@dataclass
class IREECompiled:
    name: str
    inputs: list[Argument]
    function: Any
    context: Any
    stages: dict[str, str] = field(default_factory=dict)
    origin: str = "compiled"
    """Where IREE's module came from: "compiled" or "disk cache"."""

    def __call__(self, *leaves: Any) -> tuple[Any, ...]:
        """Every argument checked as the other backends check theirs, then run by IREE."""
        if len(leaves) != len(self.inputs):
            raise TypeError(f"@{self.name} takes {len(self.inputs)} arrays, got {len(leaves)}")
        arrays = [checked(leaf, arg, self.name) for leaf, arg in zip(leaves, self.inputs,
                                                                     strict=True)]
        results = self.function(*arrays)
        if not isinstance(results, tuple | list):
            results = (results,)
        return tuple(np.asarray(r.to_host()) if hasattr(r, "to_host") else np.asarray(r)
                     for r in results)


class IREEBackend:
    name = "iree"

    def __init__(self, fuse: bool = True) -> None:
        self.fuse = fuse

    def compile(self, module: ModuleOp, stages: bool = False, owned: bool = False
                ) -> IREECompiled:
        compiler, runtime = _iree()
        name, inputs, _ = signature(module)
        kept = Stages(stages)
        steps = [Step(FusePass(), "fused tape")] if self.fuse else []
        fused, _ = run_pipeline(module, steps, kept, in_place=owned)
        started = time.perf_counter()
        text = emit(fused)
        record("StableHLO", text.count("\n") + 1, started, "(lines)")
        kept.keep("stablehlo", lambda: text)
        started = time.perf_counter()
        vmfb, origin = _compiled(compiler, text)
        record("IREE compile" if origin == "compiled" else "disk cache: hit", None, started,
               f"{len(vmfb):,} bytes of IREE module")
        started = time.perf_counter()
        context = runtime.SystemContext(config=_config(runtime))
        loaded = runtime.VmModule.copy_buffer(context.instance, vmfb)
        context.add_vm_module(loaded)
        record("IREE runtime: loaded", None, started)
        return IREECompiled(name, inputs, context.modules[loaded.name]["main"], context,
                            kept.texts, origin)


def _compiled(compiler: Any, text: str) -> tuple[bytes, str]:
    """IREE's module for `text` and where it came from: the disk cache (tapeml's, keyed by
    the text, the flags, IREE's version and this CPU), else IREE's compiler (then stored)."""
    cache = disk_cache.default()
    key = disk_cache.key("iree", text, *COMPILE_FLAGS, version("iree-base-compiler"),
                         *machine_key()) if cache is not None else ""
    payload = cache.get(key) if cache is not None else None
    if payload is not None:
        return payload, "disk cache"
    try:
        vmfb = bytes(compiler.compile_str(text, target_backends=["llvm-cpu"],
                                          input_type="stablehlo", extra_args=COMPILE_FLAGS))
    except compiler.CompilerToolError as error:
        errors = [line.strip() for line in str(error).splitlines() if "error:" in line]
        raise IREEError("iree-compile could not compile the StableHLO tapeml wrote for this "
                        "program (tapeml.trace(f, ...).as_stablehlo() writes it; the cpu "
                        "backend runs the program): " + "; ".join(errors[:2] or [str(error)])
                        ) from None
    if cache is not None:
        cache.put(key, vmfb)
    return vmfb, "compiled"
