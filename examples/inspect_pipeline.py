"""Print every stage of tapeml's CPU pipeline for one tiny function, the way one reads a compiler.

    .venv/bin/python examples/inspect_pipeline.py [--stage NAME]

The function is f(x, w) = sum(tanh(x @ w)) on a 2x3 and a 3x4 array. Its stages:

    traced             tapeml.trace: the tape program of f
    differentiated     tape-differentiate, as tapeml.value_and_grad(f, argnums=(0, 1)) runs it:
                       f's ops, then the ops of its gradient
    fused              tape-fuse: elementwise chains become tape.fused groups
    loops              tape-to-loops: scf loops over flat memref buffers
    outlined           outline-parallel-loops: the parallel loops worth threads, as functions
                       the thread pool splits (none here: f is tiny, or one thread)
    arena              plan-arena: every intermediate a view of one arena, placed by live range
    llvm-dialect       convert-scf-to-cf, convert-loops-to-llvm (LLVM folds and dedups later)
    llvm-ir            the llvm dialect as LLVM IR text
    optimized-llvm-ir  after LLVM O2 for this CPU
    assembly           this CPU's machine code

Every stage after `traced` comes from one compilation:
`tapeml.jit(tapeml.value_and_grad(f, argnums=(0, 1))).lower(x, w)`. The GPU's stages are
`tapeml-opt FILE -p tape-to-gpu` and `-t ptx` (see examples/README.md), or `.lower()` of
`jit(f, backend="cuda", arch="sm_90")`.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

import numpy as np

import tapeml

# our name -> (the key of the stage in Jitted.lower's dict, what made it)
STAGES = {
    "traced": ("tape", "tapeml.trace(f, x, w)"),
    "differentiated": ("tape", "tape-differentiate"),
    "fused": ("fused tape", "tape-fuse"),
    "loops": ("loops", "tape-to-loops"),
    "outlined": ("outlined loops", "outline-parallel-loops"),
    "arena": ("arena", "plan-arena"),
    "llvm-dialect": ("llvm dialect", "convert-scf-to-cf,convert-loops-to-llvm"),
    "llvm-ir": ("llvm ir", "xDSL's convert_module"),
    "optimized-llvm-ir": ("optimized llvm ir", "LLVM O2"),
    "assembly": ("assembly", "LLVM's code generator for this CPU"),
}
TEXT_STAGES = {"llvm-ir", "optimized-llvm-ir", "assembly"}  # counted in lines, not ops

# the start of an operation in MLIR's custom or generic form: `%a, %b = dialect.op`, `dialect.op`
OP = re.compile(r'^\s*(?:%[^=\s]+(?:,\s*%[^=\s]+)*\s*=\s*)?"?([a-z_]\w*)\.[\w.]+', re.MULTILINE)


def f(x, w):
    return tapeml.sum(tapeml.tanh(x @ w))


def stages() -> dict[str, str]:
    """Every stage's text, by our name."""
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    w = np.linspace(-0.5, 0.5, 12, dtype=np.float32).reshape(3, 4)
    lowered = tapeml.jit(tapeml.value_and_grad(f, argnums=(0, 1))).lower(x, w)
    missing = {key for name, (key, _) in STAGES.items() if name != "traced"} - set(lowered)
    if missing:
        raise RuntimeError(f"tapeml.jit(...).lower() gave the stages {list(lowered)}, "
                           f"not {sorted(missing)}")
    texts = {"traced": str(tapeml.trace(f, x, w))}
    texts.update({name: lowered[key] for name, (key, _) in STAGES.items() if name != "traced"})
    return texts


def size(name: str, text: str) -> str:
    """'N lines' for LLVM IR and assembly; 'N ops (per dialect)' for the MLIR stages."""
    if name in TEXT_STAGES:
        return f"{len(text.splitlines())} lines"
    dialects = Counter(OP.findall(text))
    per_dialect = ", ".join(f"{d} {n}" for d, n in dialects.most_common())
    return f"{sum(dialects.values())} ops ({per_dialect})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", choices=list(STAGES), help="print only this stage")
    args = parser.parse_args(argv)
    texts = stages()
    names = [args.stage] if args.stage else list(STAGES)
    for i, name in enumerate(names):
        text = texts[name].rstrip("\n")
        header = f"==== {name}: {STAGES[name][1]} - {size(name, text)} "
        print(("\n" if i else "") + header + "=" * max(4, 100 - len(header)))
        print(text)


if __name__ == "__main__":
    main()
