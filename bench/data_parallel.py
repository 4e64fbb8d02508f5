"""The demo's CNN training step (gradient on the rank's shard, all-reduce, Adam) on the same
global batch three ways: 2 MPI ranks x 1 thread, 1 rank x 1 thread, 1 rank x 2 threads; ms per
step, each one's throughput beside one rank on one thread, and what the all-reduce costs.

    .venv/bin/python bench/data_parallel.py [--steps 200] [--batches 32,256,1024]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "data_parallel.py"
MPIEXEC = Path(sys.executable).with_name("mpiexec")
LINE = re.compile(r"ranks (\d+) threads (\d+) batch (\d+): ([\d.]+) ms per step, "
                  r"all-reduce ([\d.]+) ms")


def measure(ranks: int, threads: int, batch: int, steps: int) -> tuple[float, float]:
    command = [sys.executable, str(EXAMPLE), "--time", str(steps), "--batch", str(batch)]
    if ranks > 1:
        command = [str(MPIEXEC), "-n", str(ranks), *command]
    env = dict(os.environ, TAPEML_NUM_THREADS=str(threads))
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=True).stdout
    found = LINE.search(out)
    if found is None:
        raise RuntimeError(f"no timing in the output of {' '.join(command)}:\n{out}")
    return float(found[4]), float(found[5])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batches", default="32,256,1024")
    args = parser.parse_args()
    print("| global batch | 2 ranks x 1 thread | 1 rank x 1 thread | 1 rank x 2 threads | "
          "2 ranks / 1x1 | 2 ranks / 1x2 | all-reduce (2 ranks) |")
    print("|---|---|---|---|---|---|---|")
    for batch in map(int, args.batches.split(",")):
        two, reduce = measure(2, 1, batch, args.steps)
        one, _ = measure(1, 1, batch, args.steps)
        threads, _ = measure(1, 2, batch, args.steps)
        print(f"| {batch} | {two:.2f} ms | {one:.2f} ms | {threads:.2f} ms | "
              f"{one / two:.2f}x | {threads / two:.2f}x | {reduce:.3f} ms |")


if __name__ == "__main__":
    main()
