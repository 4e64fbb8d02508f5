"""The GPT step's first call in this (fresh) process, stage by stage (tapeml.profile()): the
compile-time figures of issue 18 (cold with an empty TAPEML_CACHE_DIR, warm with a filled one).

    TAPEML_CACHE_DIR=$(mktemp -d) TAPEML_NUM_THREADS=1 taskset -c 0 \\
        .venv/bin/python bench/gpt_first_call.py LAYERS [ids|onehot] [BATCH]

Run it twice with the same folder: the first is cold, the second loads from the disk cache.
With BATCH, the same step at that batch size is then called in the same process: the first
call of a new batch size (what it shares with the first compile is shared).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpt_step  # noqa: E402  (puts examples/ on the path too)

import tapeml  # noqa: E402
import tapeml.codegen.cpu  # noqa: E402, F401  (imports are excluded: the backend `jit` loads)


def main(layers: int, variant: str, batches: list[int]) -> None:
    step = gpt_step.tapeml_step(variant)
    for i, batch in enumerate(batches):
        _, params, tokens, targets = gpt_step.make(variant, layers, batch=batch)
        start = time.perf_counter()
        with tapeml.profile() as stages:
            step(params, tokens, targets)
        origin = list(step.cache.values())[-1][1].origin
        what = "first call" if i == 0 else f"then batch {batch}"
        print(f"{what} {time.perf_counter() - start:.2f} s ({origin})")
        for s in stages:
            count = "" if s.ops is None else s.ops
            print(f"  {s.name:<28}{count:>9} {s.seconds:7.2f} s  {s.detail[:80]}")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "ids",
         [gpt_step.BATCH, *map(int, sys.argv[3:4])])
