"""tapeml's CUDA backend beside torch and jax.jit on the same GPU (where installed), its CPU
backend and numpy, on a machine with an NVIDIA GPU.

    python bench/gpu.py [--quick]

Workloads: the elementwise chain tanh(a*b+c) over 4M f32, matmul at n=1024 and 4096, and the
CNN training step of bench/run.py (W4: the loss and every parameter's gradient). On the GPU
every system keeps its inputs on the device and its results there, with one synchronization
per call; f32 stays f32 (torch's TF32 for matmuls and cuDNN convolutions is off, jax.jit's
matmul precision is "highest"), as tapeml computes. Each result is checked against numpy (or
the CPU backend) first. Prints milliseconds per call and the ratio best GPU peer / tapeml's
CUDA time (above 1: tapeml faster).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import _torch_step  # noqa: E402
from run import _cnn, _jax_loss, median_time  # noqa: E402

import tapeml  # noqa: E402
from tapeml import ops  # noqa: E402
from tapeml.codegen import cuda_driver  # noqa: E402
from tapeml.tracing.pytree import flatten, tree_map  # noqa: E402

COLUMNS = ["numpy", "cpu", "cuda", "torch", "jax"]
"""numpy and tapeml's CPU backend on the host; tapeml's CUDA backend, torch and jax.jit on the
GPU."""


def _torch() -> Any:
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def _jax() -> Any:
    if importlib.util.find_spec("jax") is None:
        return None
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # the GPU is shared
    import jax

    if jax.default_backend() != "gpu":
        return None
    jax.config.update("jax_default_matmul_precision", "highest")
    return jax


def on_device(tree):
    return tree_map(cuda_driver.DeviceArray.from_numpy, tree)


def table_row(name: str, calls: dict[str, Callable[[], Any]], repeat: int) -> None:
    ms = {k: median_time(f, repeat) * 1e3 for k, f in calls.items()}
    peers = [ms[k] for k in ("torch", "jax") if k in ms]
    ratio = f"{min(peers) / ms['cuda']:>9.2f}x" if peers else f"{'':>10}"
    print(f"{name:<26}" + "".join(f"{ms[k]:>10.3f}" if k in ms else f"{'-':>10}"
                                  for k in COLUMNS) + ratio)


def elementwise(repeat: int, torch: Any, jax: Any) -> None:
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(4 << 20).astype(np.float32) for _ in range(3))
    f = lambda a, b, c: ops.tanh(a * b + c)  # noqa: E731
    cpu, gpu = tapeml.jit(f), tapeml.jit(f, backend="cuda")
    da, db, dc = on_device((a, b, c))
    np.testing.assert_allclose(gpu(da, db, dc).numpy(), np.tanh(a * b + c), rtol=1e-5, atol=1e-6)
    calls = {"numpy": lambda: np.tanh(a * b + c), "cpu": lambda: cpu(a, b, c),
             "cuda": lambda: gpu(da, db, dc)}
    if torch:
        ta, tb, tc = (torch.from_numpy(v).cuda() for v in (a, b, c))
        calls["torch"] = lambda: (torch.tanh(ta * tb + tc), torch.cuda.synchronize())
    if jax:
        g = jax.jit(lambda a, b, c: jax.numpy.tanh(a * b + c))
        ja, jb, jc = jax.device_put((a, b, c))
        calls["jax"] = lambda: g(ja, jb, jc).block_until_ready()
    table_row("tanh(a*b+c), 4M f32", calls, repeat)


def matmul(repeat: int, sizes: list[int], torch: Any, jax: Any) -> None:
    rng = np.random.default_rng(0)
    for n in sizes:
        a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        cpu, gpu = tapeml.jit(lambda a, b: a @ b), tapeml.jit(lambda a, b: a @ b, backend="cuda")
        da, db = on_device((a, b))
        np.testing.assert_allclose(gpu(da, db).numpy(), a @ b, rtol=1e-3, atol=1e-2)
        calls = {"numpy": lambda a=a, b=b: a @ b, "cpu": lambda a=a, b=b, f=cpu: f(a, b),
                 "cuda": lambda da=da, db=db, f=gpu: f(da, db)}
        if torch:
            ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
            calls["torch"] = lambda ta=ta, tb=tb: (ta @ tb, torch.cuda.synchronize())
        if jax:
            g = jax.jit(jax.numpy.matmul)
            ja, jb = jax.device_put((a, b))
            np.testing.assert_allclose(np.asarray(g(ja, jb)), a @ b, rtol=1e-3, atol=1e-2)
            calls["jax"] = lambda ja=ja, jb=jb, g=g: g(ja, jb).block_until_ready()
        table_row(f"matmul n={n}", calls, max(1, repeat // (4 if n > 2048 else 1)))


def cnn(repeat: int, torch: Any, jax: Any) -> None:
    from run import _numpy_cnn_step

    loss, params, x, y = _cnn()
    cpu = tapeml.jit(tapeml.value_and_grad(loss))
    gpu = tapeml.jit(tapeml.value_and_grad(loss), backend="cuda")
    dparams, dx, dy = on_device((params, x, y))
    value, grads = cpu(params, x, y)
    got, _ = gpu(dparams, dx, dy)
    np.testing.assert_allclose(got.numpy(), value, rtol=1e-4)
    calls = {"numpy": lambda: _numpy_cnn_step(params, x, y), "cpu": lambda: cpu(params, x, y),
             "cuda": lambda: gpu(dparams, dx, dy)}
    if torch:
        step = _torch_step("cnn", params, x, y, device="cuda")
        for g, e in zip(step(), flatten(grads)[0], strict=True):
            np.testing.assert_allclose(g.cpu().numpy(), e, rtol=1e-3, atol=1e-4)
        calls["torch"] = step
    if jax:
        g = jax.jit(jax.value_and_grad(_jax_loss("cnn")))
        args = jax.device_put((params, x, y))
        np.testing.assert_allclose(float(g(*args)[0]), value, rtol=1e-4)
        calls["jax"] = lambda: jax.block_until_ready(g(*args))
    table_row("CNN training step (W4)", calls, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    context = cuda_driver.context()
    print(f"GPU: {context.name}, compute capability {context.compute_capability}")
    torch, jax = _torch(), _jax()
    repeat = 5 if args.quick else 20
    print(f"{'workload (ms per call)':<26}" + "".join(f"{k:>10}" for k in COLUMNS)
          + f"{'peer/cuda':>10}")
    started = time.perf_counter()
    elementwise(repeat, torch, jax)
    matmul(repeat, [1024, 4096], torch, jax)
    cnn(repeat, torch, jax)
    print(f"(benchmark took {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
