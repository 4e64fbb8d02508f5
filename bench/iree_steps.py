"""The same programs through tapeml's CPU backend and through IREE (`backend="iree"`: the
StableHLO tapeml writes, compiled by IREE for this CPU), on one thread: W3's and W4's training
steps (loss and gradients), and the GPT step (2 layers, integer tokens). Medians of alternating
blocks, the results checked against each other first, and each backend's first call (with an
empty disk cache).

    .venv/bin/python bench/iree_steps.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TAPEML_NUM_THREADS", "1")  # both backends read it (IREE: its task pool)
os.environ["TAPEML_CACHE_DIR"] = tempfile.mkdtemp(prefix="tapeml-bench-iree-")  # cold firsts
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "examples")]

import gpt_step  # noqa: E402
import numpy as np  # noqa: E402
import run  # noqa: E402

import tapeml  # noqa: E402
from tapeml.tracing.pytree import flatten  # noqa: E402


def programs() -> dict[str, tuple]:
    """name -> (function, arguments)."""
    found = {}
    for name, make in (("W3 MLP step", run._mlp), ("W4 CNN step", run._cnn)):
        loss, params, x, y = make()
        found[name] = (tapeml.value_and_grad(loss), (params, x, y))
    _, params, tokens, targets = gpt_step.make("ids", 2)
    found["GPT step, 2 layers"] = (tapeml.value_and_grad(gpt_step.tapeml_loss("ids")),
                                   (params, tokens, targets))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'one thread':<22}{'tapeml cpu':>12}{'tapeml iree':>13}{'iree / cpu':>12}"
          f"{'first call: cpu':>18}{'iree':>8}")
    for name, (fn, arguments) in programs().items():
        compiled, firsts = {}, {}
        for backend in ("cpu", "iree"):
            started = time.perf_counter()
            compiled[backend] = tapeml.jit(fn, backend=backend)
            result = compiled[backend](*arguments)
            firsts[backend] = time.perf_counter() - started
            compiled[backend].result = [np.asarray(v) for v in flatten(result)[0]]
        for a, b in zip(compiled["cpu"].result, compiled["iree"].result, strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-4 * float(np.abs(a).max()))
        times = {backend: [] for backend in compiled}
        for _ in range(args.rounds):
            for backend, step in compiled.items():
                for _ in range(3):
                    started = time.perf_counter()
                    step(*arguments)
                    times[backend].append(time.perf_counter() - started)
        cpu, iree = (statistics.median(times[b]) * 1e3 for b in ("cpu", "iree"))
        print(f"{name:<22}{cpu:>9.2f} ms{iree:>10.2f} ms{iree / cpu:>11.2f}x"
              f"{firsts['cpu']:>16.2f} s{firsts['iree']:>6.2f} s")


if __name__ == "__main__":
    main()
