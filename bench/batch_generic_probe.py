"""What batch-generic loops would cost, measured before building them: the GPT step with each of
its loop bounds that is a multiple of the batch computed at run time (the batch loaded from a
global at each function's entry, times the bound's multiple), the rest of the program as tapeml
writes it. An experiment on the LLVM IR text (the CPU backend's `llvm_ir_text`, wrapped), not a
feature: it over-counts (a feature size that happens to be a multiple of the batch is made a
run-time value too) and leaves every other batch-dependent integer (arena offsets, GEMM plans,
the thread pool's parts) a constant.

    python bench/batch_generic_probe.py MODE BATCH [LAYERS]    # MODE: generic or as-is

prints the loops made run-time, the first call, the steady step (median of 40, one thread as
the environment says) and the LLVM stages' times and instruction count. Run both modes in
alternating fresh processes, one core (bench/HISTORY.md has the figures).
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpt_step  # noqa: E402

import tapeml  # noqa: E402
from tapeml.codegen import cpu  # noqa: E402

BOUND = re.compile(r'icmp slt i64 (%"[^"]+"), (\d+)$')


def generic(text: str, batch: int, counts: list[int]) -> str:
    """`text` with each loop bound that is a positive multiple of `batch` made `batch * c` at
    run time; counts[0] such bounds, counts[1] the others."""
    out: list[str] = []
    lines = text.split("\n")
    for n, line in enumerate(lines):
        if n and lines[n - 1] == "{":  # a definition's entry block: the batch, loaded
            out += [line, '  %"batch" = load i64, ptr @"tapeml.batch"']
            continue
        found = BOUND.search(line)
        if found and int(found.group(2)) % batch == 0 and int(found.group(2)) >= batch:
            counts[0] += 1
            name = f'%"bound{counts[0]}"'
            out.append(f'  {name} = mul i64 %"batch", {int(found.group(2)) // batch}')
            line = line[:found.start(2)] + name
        elif found:
            counts[1] += 1
        out.append(line)
    head = out[:3]  # (the module id and the target lines come first)
    return "\n".join([*head, f'@"tapeml.batch" = global i64 {batch}', *out[3:]])


def main(mode: str, batch: int, layers: int) -> None:
    counts = [0, 0]
    written = cpu.llvm_ir_text

    def wrapped(*args, **kwargs) -> str:
        text = written(*args, **kwargs)
        made = generic(text, batch, counts)  # (counted either way)
        return made if mode == "generic" else text

    cpu.llvm_ir_text = wrapped
    _, params, tokens, targets = gpt_step.make("ids", layers, batch=batch)
    step = gpt_step.tapeml_step("ids")
    with tapeml.profile() as stages:
        start = time.perf_counter()
        loss = step(params, tokens, targets)[0]
        first = time.perf_counter() - start
    for _ in range(5):
        step(params, tokens, targets)
    times = []
    for _ in range(40):
        start = time.perf_counter()
        step(params, tokens, targets)
        times.append(time.perf_counter() - start)
    llvm = "; ".join(f"{s.name} {s.seconds * 1e3:.0f} ms"
                     + (f" ({s.ops} instructions)" if s.ops else "")
                     for s in stages if s.name in ("LLVM O2", "machine code (MCJIT)"))
    print(f"{mode} batch {batch}, {layers} layers: {counts[0]} loop bounds are multiples of the "
          f"batch, {counts[1]} not; first call {first:.2f} s, step "
          f"{statistics.median(times) * 1e3:.2f} ms (loss {float(loss):.6f}); {llvm}")

if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("generic", "as-is"):
        sys.exit(__doc__)
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 2)
