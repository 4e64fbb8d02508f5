"""The IREE backend: the program written as StableHLO (tapeml/stablehlo/), compiled by IREE's
compiler for this CPU (llvm-cpu, the host's features; f64 kept f64) and run by IREE's runtime
(the local-task driver). A reading of the same program by an industrial compiler: tests check
the StableHLO tapeml writes against the interpreter through it, and users can compare.

Needs the `iree` extra (`pip install tapeml[iree]`: iree-base-compiler, iree-base-runtime).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

import numpy as np
from numpy.lib.array_utils import byte_bounds
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

COMPILE_FLAGS = ["--iree-llvmcpu-target-cpu=host", "--iree-input-demote-f64-to-f32=false"]
"""IREE demotes f64 to f32 unless told not to; tape's f64 is f64."""

IM2COL = "--iree-global-opt-use-im2col-for-convs"
"""Convolutions as im2col and a product: W4's step (bench/iree_steps.py) 124 -> 49 ms on one
thread, where IREE's direct NCHW convolution took 60 ms for W4's second layer alone (tapeml's
CPU backend: 2 ms). Given to every program but one with a depthwise convolution (`_flags`)."""

MODULE = "tapeml_program"
"""The name of every program's IREE module. IREE's runtime keeps a context's modules by name,
beside its own (hal, ...): one named after the traced function collides with them (a function
called `hal` could not be loaded)."""

_CONVOLUTION = re.compile(
    r"stablehlo\.convolution\(.* dim_numbers = \[([\w, ]+)\]x\[[\w, ]+\]->\[([\w, ]+)\],"
    r".* feature_group_count = (\d+) : i64\} : \(tensor<([\dx]+)x\w+>, [^)]*\) -> "
    r"tensor<([\dx]+)x\w+>")
"""A convolution as tapeml/stablehlo/writer.py writes it: the input's and the result's
dimension letters, the feature group count, the input's and the result's shapes."""


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
        if results is None:  # a function of no results
            return ()
        if not isinstance(results, tuple | list):
            results = (results,)
        return _unshared([np.asarray(r.to_host()) if hasattr(r, "to_host") else np.asarray(r)
                          for r in results])


def _unshared(arrays: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """`arrays`, where two share memory one of them copied: IREE returns one buffer for results
    that are one value (or two equal computations it merged), where every backend returns
    fresh arrays, one per result. One sweep over their byte ranges, lowest first."""
    end = 0  # of the kept arrays' bytes so far
    for i in sorted(range(len(arrays)), key=lambda i: byte_bounds(arrays[i])):
        start, stop = byte_bounds(arrays[i])
        if start < end:  # inside a kept array's bytes
            arrays[i] = arrays[i].copy()
        else:
            end = max(end, stop)
    return tuple(arrays)


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
        text = emit(fused, module_name=MODULE)
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
        return IREECompiled(name, inputs, context.modules[MODULE]["main"], context,
                            kept.texts, origin)


def _depthwise(text: str) -> bool:
    """Whether `text` holds a depthwise convolution: as many groups as input features and as
    output features, more than one (IREE 3.13's im2col of one of several images fails
    to compile: "'linalg.batch_matvec' op inferred input/output operand #1 has shape's
    dimension #0 to be 8, but found 4"; the convolution compiles and runs right without it)."""
    for line in text.splitlines():
        match = _CONVOLUTION.search(line) if "stablehlo.convolution(" in line else None
        if match is None:
            continue
        lhs_dims, out_dims, groups, lhs, out = match.groups()
        feature = [int(lhs.split("x")[lhs_dims.split(", ").index("f")]),
                   int(out.split("x")[out_dims.split(", ").index("f")])]
        if int(groups) > 1 and feature == [int(groups)] * 2:
            return True
    return False


def _flags(text: str) -> list[str]:
    """iree-compile's flags for `text`: COMPILE_FLAGS, and IM2COL but for a program with a
    depthwise convolution (its other convolutions go without: one flag covers the program)."""
    return COMPILE_FLAGS if _depthwise(text) else [*COMPILE_FLAGS, IM2COL]


def _compiled(compiler: Any, text: str) -> tuple[bytes, str]:
    """IREE's module for `text` and where it came from: the disk cache (tapeml's, keyed by
    the text, the flags, IREE's version and this CPU), else IREE's compiler (then stored)."""
    cache = disk_cache.default()
    flags = _flags(text)
    key = disk_cache.key("iree", text, *flags, version("iree-base-compiler"),
                         *machine_key()) if cache is not None else ""
    payload = cache.get(key) if cache is not None else None
    if payload is not None:
        return payload, "disk cache"
    try:
        vmfb = bytes(compiler.compile_str(text, target_backends=["llvm-cpu"],
                                          input_type="stablehlo", extra_args=flags))
    except compiler.CompilerToolError as error:
        errors = [line.strip() for line in str(error).splitlines() if "error:" in line]
        raise IREEError("iree-compile could not compile the StableHLO tapeml wrote for this "
                        "program (tapeml.trace(f, ...).as_stablehlo() writes it; the cpu "
                        "backend runs the program): " + "; ".join(errors[:2] or [str(error)])
                        ) from None
    if cache is not None:
        cache.put(key, vmfb)
    return vmfb, "compiled"
