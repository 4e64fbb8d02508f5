"""What a GEMM kernel costs to compile, module by module and function by function: the
kernel W3's products call (f32, or f64 with `f64`) on this machine, its modules' LLVM IR
compiled as the CPU backend compiles them (their passes, then the object code), in this
process, one after another.

    python bench/kernel_compile.py [f32|f64] [ROUNDS] [--functions] [--save DIR | --against DIR]

prints each module's median time over ROUNDS (default 10); `--functions` each function's
share (the module compiled with only that function defined, the others available_externally,
less the module with none: what dropping it would save, roughly). `--save DIR` writes the
modules' texts there; `--against DIR` compiles those texts (an older checkout's, saved
with --save) and this checkout's alternately, round by round, and prints both medians: a
change's cost measured in one process, where the machine's swings between runs cancel out
(bench/HISTORY.md, the GEMM kernel's compile, function by function). Pin it to one core
(`taskset -c 0`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import llvmlite.binding as llvm_binding  # noqa: E402

from tapeml.codegen import llvm_worker  # noqa: E402
from tapeml.codegen.cpu import kernel_modules  # noqa: E402
from tapeml.codegen.gemm import Target, variant  # noqa: E402
from tapeml.dialects.kernel import GemmSpec  # noqa: E402


def modules(dtype: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(prefix, text, passes) of each module of the kernel W3's first product calls (its
    store into a C stored transposed too)."""
    spec = GemmSpec(dtype, 1, 256, 512, 784, (0, 784, 1), (0, 512, 1), 0, False)
    v = variant(spec, Target.host())
    return [(m.prefix, m.text(), m.passes) for m in kernel_modules(v, transposed=True)]


def seconds(text: str, passes: tuple[str, ...], only: list[str] | None = None) -> float:
    started = time.perf_counter()
    llvm_worker.object_code(text, passes, only)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dtype", nargs="?", default="f32", choices=["f32", "f64"])
    parser.add_argument("rounds", nargs="?", type=int, default=10)
    parser.add_argument("--functions", action="store_true")
    parser.add_argument("--save", type=Path)
    parser.add_argument("--against", type=Path)
    args = parser.parse_args()
    ours = modules(args.dtype)
    llvm_worker.target_machine()  # (LLVM's targets initialized before the clock)
    if args.save:
        args.save.mkdir(parents=True, exist_ok=True)
        for prefix, text, _ in ours:
            (args.save / f"{prefix}.ll").write_text(text)
    theirs = []
    if args.against:
        theirs = [(prefix, (args.against / f"{prefix}.ll").read_text(), passes)
                  for prefix, _, passes in ours if (args.against / f"{prefix}.ll").exists()]
    times: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for label, kernel in (("this checkout", ours), ("--against", theirs)):
            for prefix, text, passes in kernel:
                times.setdefault(f"{label}: {prefix}", []).append(seconds(text, passes))
            if kernel:
                times.setdefault(f"{label}: all", []).append(
                    sum(times[f"{label}: {prefix}"][-1] for prefix, _, _ in kernel))
    for name, values in times.items():
        print(f"{statistics.median(values) * 1e3:8.1f} ms  {name}")
    if not args.functions:
        return
    for prefix, text, passes in ours:
        defined = [f.name for f in llvm_binding.parse_assembly(text).functions
                   if not f.is_declaration]
        none = statistics.median(seconds(text, passes, []) for _ in range(3))
        print(f"{prefix} (with no function defined: {none * 1e3:.1f} ms)")
        for name in defined:
            alone = statistics.median(seconds(text, passes, [name]) for _ in range(3))
            print(f"  {(alone - none) * 1e3:7.1f} ms  {name}")


if __name__ == "__main__":
    main()
