"""tapeml's CUDA backend beside its CPU backend and numpy, on a machine with an NVIDIA GPU.

    python bench/gpu.py [--quick]

Workloads: the elementwise chain tanh(a*b+c) over 4M f32, matmul at n=1024 and 4096, and the
CNN training step of bench/run.py (W4). The GPU figures keep the inputs on the device
(DeviceArray) and include one synchronization per call; each result is checked against numpy
(or the CPU backend) first. Prints a table: milliseconds per call, and each backend's speed
relative to numpy.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import _cnn, median_time  # noqa: E402

import tapeml  # noqa: E402
from tapeml import ops  # noqa: E402
from tapeml.codegen import cuda_driver  # noqa: E402
from tapeml.tracing.pytree import tree_map  # noqa: E402


def on_device(tree):
    return tree_map(cuda_driver.DeviceArray.from_numpy, tree)


def table_row(name: str, numpy_ms: float, cpu_ms: float, gpu_ms: float) -> None:
    print(f"{name:<28}{numpy_ms:>10.3f}{cpu_ms:>10.3f}{gpu_ms:>10.3f}"
          f"{numpy_ms / cpu_ms:>10.2f}x{numpy_ms / gpu_ms:>10.2f}x")


def elementwise(repeat: int) -> None:
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(4 << 20).astype(np.float32) for _ in range(3))
    f = lambda a, b, c: ops.tanh(a * b + c)  # noqa: E731
    cpu, gpu = tapeml.jit(f), tapeml.jit(f, backend="cuda")
    da, db, dc = on_device((a, b, c))
    np.testing.assert_allclose(gpu(da, db, dc).numpy(), np.tanh(a * b + c), rtol=1e-5, atol=1e-6)
    table_row("tanh(a*b+c), 4M f32", median_time(lambda: np.tanh(a * b + c), repeat) * 1e3,
              median_time(lambda: cpu(a, b, c), repeat) * 1e3,
              median_time(lambda: gpu(da, db, dc), repeat) * 1e3)


def matmul(repeat: int, sizes: list[int]) -> None:
    rng = np.random.default_rng(0)
    for n in sizes:
        a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        cpu, gpu = tapeml.jit(lambda a, b: a @ b), tapeml.jit(lambda a, b: a @ b, backend="cuda")
        da, db = on_device((a, b))
        np.testing.assert_allclose(gpu(da, db).numpy(), a @ b, rtol=1e-3, atol=1e-2)
        reps = max(1, repeat // (4 if n > 2048 else 1))
        table_row(f"matmul n={n}", median_time(lambda a=a, b=b: a @ b, reps) * 1e3,
                  median_time(lambda a=a, b=b, cpu=cpu: cpu(a, b), reps) * 1e3,
                  median_time(lambda da=da, db=db, gpu=gpu: gpu(da, db), reps) * 1e3)


def cnn(repeat: int) -> None:
    from run import _numpy_cnn_step

    loss, params, x, y = _cnn()
    cpu = tapeml.jit(tapeml.value_and_grad(loss))
    gpu = tapeml.jit(tapeml.value_and_grad(loss), backend="cuda")
    dparams, dx, dy = on_device((params, x, y))
    value, _ = cpu(params, x, y)
    got, _ = gpu(dparams, dx, dy)
    np.testing.assert_allclose(got.numpy(), value, rtol=1e-4)
    table_row("CNN training step (W4)",
              median_time(lambda: _numpy_cnn_step(params, x, y), repeat) * 1e3,
              median_time(lambda: cpu(params, x, y), repeat) * 1e3,
              median_time(lambda: gpu(dparams, dx, dy), repeat) * 1e3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    context = cuda_driver.context()
    print(f"GPU: {context.name}, compute capability {context.compute_capability}")
    repeat = 5 if args.quick else 20
    print(f"{'workload':<28}{'numpy ms':>10}{'cpu ms':>10}{'cuda ms':>10}"
          f"{'cpu':>11}{'cuda':>11}")
    started = time.perf_counter()
    elementwise(repeat)
    matmul(repeat, [1024, 4096])
    cnn(repeat)
    print(f"(benchmark took {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
