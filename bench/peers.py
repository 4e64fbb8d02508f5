"""W1-W4 for every system: tapeml, numpy, jax.jit and torch (eager), each computing the same
result from the same inputs, timed side by side in one process told to use THREADS threads.

    python bench/peers.py WORKLOAD THREADS ROUNDS     # JSON: every system's median

WORKLOAD is W1 (tanh(a*b+c), 4M f32), W2-512 / W2-1024 (square matmul), W3 (the MLP step) or
W4 (the CNN step); the steps are bench/run.py's, the loss and the gradient of every parameter.
Every system's result is checked against numpy's first. bench/run.py runs this file in a fresh
process per (workload, thread count), pinned to that many cores; jax and torch are measured
where installed (`make bench` installs them).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def threads_environment(threads: int) -> dict[str, str]:
    """What tells each library to use `threads` threads (torch is told with set_num_threads);
    they read it at import."""
    n = str(threads)  # XLA: one thread, or the cores of its affinity mask (pinned to n)
    xla = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \
        if threads == 1 else "--xla_cpu_multi_thread_eigen=true"
    return {"OPENBLAS_NUM_THREADS": n, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
            "TAPEML_NUM_THREADS": n, "XLA_FLAGS": xla}


def have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def systems() -> list[str]:
    return ["tapeml", "numpy"] + [s for s in ("jax", "torch") if have(s)]


# ----------------------------------------------------------------------------------------------
# The workloads: (inputs, each system's call); every call returns numpy arrays to compare


def _w1() -> dict[str, Callable[[], Any]]:
    import numpy as np

    import tapeml
    from tapeml import ops

    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(4 << 20).astype(np.float32) for _ in range(3))
    f = tapeml.jit(lambda a, b, c: ops.tanh(a * b + c))
    calls = {"tapeml": lambda: f(a, b, c), "numpy": lambda: np.tanh(a * b + c)}
    if have("jax"):
        import jax
        import jax.numpy as jnp

        g = jax.jit(lambda a, b, c: jnp.tanh(a * b + c))
        ja, jb, jc = jax.device_put((a, b, c))
        calls["jax"] = lambda: g(ja, jb, jc).block_until_ready()
    if have("torch"):
        import torch

        ta, tb, tc = (torch.from_numpy(v) for v in (a, b, c))
        calls["torch"] = lambda: torch.tanh(ta * tb + tc)
    return calls


def _w2(n: int) -> dict[str, Callable[[], Any]]:
    import numpy as np

    import tapeml

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    f = tapeml.jit(lambda a, b: a @ b)
    calls = {"tapeml": lambda: f(a, b), "numpy": lambda: a @ b}
    if have("jax"):
        import jax
        import jax.numpy as jnp

        g = jax.jit(jnp.matmul)
        ja, jb = jax.device_put((a, b))
        calls["jax"] = lambda: g(ja, jb).block_until_ready()
    if have("torch"):
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        calls["torch"] = lambda: ta @ tb
    return calls


def _step_calls(workload: str) -> dict[str, Callable[[], Any]]:
    """W3's or W4's step: (loss, the gradients in tapeml's leaf order) from every system."""
    import run

    import tapeml
    from tapeml.tracing.pytree import flatten

    name = {"W3": "mlp", "W4": "cnn"}[workload]
    loss, params, x, y = getattr(run, f"_{name}")()
    step = tapeml.jit(tapeml.value_and_grad(loss))
    numpy_step = run._numpy_mlp_step if name == "mlp" else run._numpy_cnn_step
    calls = {"tapeml": lambda: flatten(step(params, x, y)[1])[0],
             "numpy": lambda: list(numpy_step(params, x, y))}  # W1, b1, W2, ...: leaf order
    if have("jax"):
        import jax

        g = jax.jit(jax.value_and_grad(run._jax_loss(name)))
        args = jax.device_put((params, x, y))
        calls["jax"] = lambda: flatten(jax.block_until_ready(g(*args))[1])[0]
    if have("torch"):
        calls["torch"] = _torch_step(name, params, x, y)
    return calls


def _torch_step(name: str, params: dict, x: Any, y: Any, device: str = "cpu"
                ) -> Callable[[], list]:
    """The same step in torch eager: forward, then torch.autograd.grad of every parameter;
    numpy gradients on the CPU, the device's tensors (synchronized) on "cuda"."""
    import torch
    import torch.nn.functional as F

    from tapeml.tracing.pytree import flatten, unflatten

    leaves, tree = flatten(params)
    tensors = [torch.from_numpy(leaf.copy()).to(device).requires_grad_() for leaf in leaves]
    p = unflatten(tree, tensors)
    tx, ty = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)

    def linear(q, h):
        return h @ q["W"] + q["b"]

    def forward():
        if name == "mlp":
            h = torch.relu(linear(p["lin2"], torch.tanh(linear(p["lin1"], tx))))
            return linear(p["lin3"], h)
        h = tx
        for layer in ("c1", "c2"):
            h = F.max_pool2d(torch.relu(F.conv2d(h, p[layer]["W"], p[layer]["b"], padding=1)),
                             2)
        return linear(p["out"], h.reshape(h.shape[0], -1))

    def call():
        value = -(ty * forward().log_softmax(-1)).sum(-1).mean()
        grads = torch.autograd.grad(value, tensors)
        if device == "cpu":
            return [g.numpy() for g in grads]
        torch.cuda.synchronize()
        return list(grads)

    return call


def workload_calls(workload: str) -> tuple[dict[str, Callable[[], Any]], float | None]:
    """Every system's call of `workload`, and its GFLOP per call (W2), else None."""
    if workload == "W1":
        return _w1(), None
    if workload.startswith("W2-"):
        n = int(workload[3:])
        return _w2(n), 2 * n**3 / 1e9
    return _step_calls(workload), None


def check(results: dict[str, Any]) -> None:
    """Every system's arrays within 1e-3 of numpy's, relative to each array's largest."""
    import numpy as np

    expected = results["numpy"]
    expected = expected if isinstance(expected, list) else [expected]
    for name, got in results.items():
        got = got if isinstance(got, list) else [got]
        assert len(got) == len(expected), name
        for g, e in zip(got, expected, strict=True):
            g, e = np.asarray(g), np.asarray(e)
            scale = float(np.abs(e).max()) or 1.0
            err = float(np.abs(g - e).max()) / scale
            assert err <= 1e-3, f"{name}'s result is off by {err:.2e} of numpy's largest"


def measure(workload: str, threads: int, rounds: int, calls: int = 5) -> dict:
    """Every system's median seconds from `rounds` alternating blocks of `calls` calls each,
    after its result is checked and two warm-up calls. With more than one thread, each block
    starts after a pause and two calls not timed, and is three times as long: the worker
    threads of the system before (OpenMP's, OpenBLAS's, XLA's) spin a while after their last
    call, on the cores the next system needs, and a system's own threads, asleep after the
    pause, take a call or two to wake (tapeml's W3 step on two threads took 6.8 ms here in
    short blocks, 3.8 ms alone)."""
    if have("torch"):
        import torch

        torch.set_num_threads(threads)
    run_of, gflop = workload_calls(workload)
    check({name: fn() for name, fn in run_of.items()})
    for fn in run_of.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in run_of}
    if threads > 1:
        calls *= 3
    for _ in range(rounds):
        for name, fn in run_of.items():
            if threads > 1:
                time.sleep(0.3)
                fn(), fn()
            for _ in range(calls):
                started = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - started)
    return {"workload": workload, "threads": threads, "gflop": gflop,
            "seconds": {name: statistics.median(t) for name, t in times.items()}}


WORKLOADS = ("W1", "W2-512", "W2-1024", "W3", "W4")

if __name__ == "__main__":
    if (len(sys.argv) != 4 or sys.argv[1] not in WORKLOADS or not sys.argv[2].isdigit()
            or not sys.argv[3].isdigit() or int(sys.argv[2]) < 1 or int(sys.argv[3]) < 1):
        raise SystemExit(f"{__doc__}\nWORKLOAD is one of {', '.join(WORKLOADS)}; THREADS and "
                         "ROUNDS are positive integers.")
    wanted = threads_environment(int(sys.argv[2]))
    if any(os.environ.get(k) != v for k, v in wanted.items()):  # read at import: run again
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]],
                  {**os.environ, **wanted})
    print(json.dumps(measure(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
