"""tapeml beside numpy (and torch / JAX where installed), measured in one run, medians.

    .venv/bin/python bench/run.py [--quick] [--only W1,W2,...]

The workloads are ../shared/reference/workloads.md's (W1 elementwise chain, W2 matmul, W3 MLP
training step, W4 CNN training step, W5 first-call latency, W6 per-call latency, W7 GPT
training step), E, eager ops on small arrays, and C, how the GPT step's compile grows with
depth and what a new batch size costs; each checks tapeml's result against numpy's first.

W1-W4 run beside every peer (numpy, jax.jit, torch eager; bench/peers.py) at one thread and at
two: each (workload, thread count) in a fresh worker pinned to that many cores and told that
many threads, every system timed there in alternating blocks; the row's ratio is the best
peer's time over tapeml's. Run the rest pinned to one core for single-thread figures:
`OPENBLAS_NUM_THREADS=1 TAPEML_NUM_THREADS=1 taskset -c 0 .venv/bin/python bench/run.py`.
`--threads` compares tapeml's one thread with all of them (W2 n=1024 and W4, in alternating
blocks of calls in one process).

W7 (bench/gpt_step.py) runs one thread by itself: each (variant, layers) in a fresh worker
process told so (OPENBLAS_NUM_THREADS, TAPEML_NUM_THREADS, XLA_FLAGS, torch.set_num_threads),
beside jax.jit and torch when installed (`make bench` installs them: the `bench` extra). It takes
minutes: tapeml compiles each step once, in its worker, and that first call is W7's first-call
figure; each peer's first call is taken in a fresh process of its own, and so is tapeml's
warm start (the first call again, from the disk cache the worker filled).

Every compile of a run is cold: the run sets TAPEML_CACHE_DIR to a new folder, its own, and W5
gives each cold first call another.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import tapeml
from tapeml import nn, ops

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import numpy_cnn  # noqa: E402  (the plain numpy CNN step, shared with `make demo`)


def median_time(fn: Callable[[], object], repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def row(name: str, unit: str, ours: float, numpy_: float, higher_is_better: bool = False) -> None:
    ratio = (ours / numpy_) if higher_is_better else (numpy_ / ours)
    print(f"{name:<34}{ours:>12.3f} {unit:<8}{numpy_:>12.3f} {unit:<8}{ratio:>8.2f}x")


def _mlp():
    rng = np.random.default_rng(0)
    params = {f"lin{i + 1}": nn.linear_init(rng, m, n)
              for i, (m, n) in enumerate([(784, 512), (512, 512), (512, 10)])}
    x = rng.standard_normal((256, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 256)]

    def loss(p, x, y):
        h1 = ops.tanh(nn.linear(p["lin1"], x))
        h2 = ops.relu(nn.linear(p["lin2"], h1))
        return nn.softmax_cross_entropy(nn.linear(p["lin3"], h2), y)

    return loss, params, x, y


def _numpy_mlp_step(p, x, y):
    h1 = np.tanh(x @ p["lin1"]["W"] + p["lin1"]["b"])
    h2 = np.maximum(h1 @ p["lin2"]["W"] + p["lin2"]["b"], 0)
    z = h2 @ p["lin3"]["W"] + p["lin3"]["b"]
    e = np.exp(z - z.max(1, keepdims=True))
    prob = e / e.sum(1, keepdims=True)
    dz = (prob - y) / len(x)
    dh2 = dz @ p["lin3"]["W"].T * (h2 > 0)
    dh1 = dh2 @ p["lin2"]["W"].T * (1 - h1 * h1)
    return (x.T @ dh1, dh1.sum(0), h1.T @ dh2, dh2.sum(0), h2.T @ dz, dz.sum(0))


def first_call(workload: str, cache: str | None = None) -> float:
    """Seconds from jit to the first result of W3's ("mlp") or W4's ("cnn") step in a fresh
    process (imports excluded, as W5 defines it: tapeml's CPU backend and `jit` and
    `value_and_grad` too, which `import tapeml` loads on first use, as jax_first_call's jax is
    imported and its backend made before its clock starts); with the disk cache in `cache`
    (default: a new, empty one: a cold compile). This process's environment is passed on."""
    import os
    import subprocess
    import tempfile

    code = (f"import sys, time; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            "import run, tapeml, tapeml.codegen.cpu; "
            "jit, vg = tapeml.jit, tapeml.value_and_grad; "
            f"loss, params, x, y = run._{workload}(); start = time.perf_counter(); "
            "jit(vg(loss))(params, x, y); "
            "print(time.perf_counter() - start)")
    env = {**os.environ, "TAPEML_CACHE": "1",
           "TAPEML_CACHE_DIR": cache or tempfile.mkdtemp(prefix="tapeml-bench-cold-")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env)
    return float(out.stdout.split()[-1])


def _jax_loss(workload: str) -> Callable:
    """W3's or W4's loss written for jax (the same layers as _mlp's and _cnn's)."""
    import jax
    import jax.numpy as jnp

    def linear(p, x):
        return x @ p["W"] + p["b"]

    def cross_entropy(z, y):
        return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(z, axis=-1), axis=-1))

    def conv_relu_pool(p, x):
        h = jax.lax.conv_general_dilated(x, p["W"], (1, 1), ((1, 1), (1, 1)))
        h = jax.nn.relu(h + p["b"][None, :, None, None])
        return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                     "VALID")

    def mlp(p, x, y):
        h = jax.nn.relu(linear(p["lin2"], jnp.tanh(linear(p["lin1"], x))))
        return cross_entropy(linear(p["lin3"], h), y)

    def cnn(p, x, y):
        h = conv_relu_pool(p["c2"], conv_relu_pool(p["c1"], x))
        return cross_entropy(linear(p["out"], h.reshape(h.shape[0], -1)), y)

    return {"mlp": mlp, "cnn": cnn}[workload]


def jax_first_call(workload: str) -> float | None:
    """Seconds from jax.jit to the first result of the same step in a fresh process (imports
    and moving the arrays to jax excluded); None without jax."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("jax") is None:
        return None
    code = (f"import sys, time; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            "import run, jax, jax.numpy; "
            f"_, params, x, y = run._{workload}(); loss = run._jax_loss({workload!r}); "
            "args = jax.device_put((params, x, y)); jax.block_until_ready(args); "
            "start = time.perf_counter(); "
            "jax.block_until_ready(jax.jit(jax.value_and_grad(loss))(*args)); "
            "print(time.perf_counter() - start)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return float(out.stdout.split()[-1])


def kernels_only(workload: str) -> str:
    """A new disk cache holding `workload`'s GEMM kernels (and the thread pool) but not its
    program: what a machine has once any program has compiled the kernels (they are
    shape-generic, built once per machine and tapeml version). Filled by `lower()` in a
    process of its own, which compiles the program but stores only the kernels."""
    import os
    import subprocess
    import tempfile

    cache = tempfile.mkdtemp(prefix="tapeml-bench-kernels-")
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"import run, tapeml; loss, params, x, y = run._{workload}(); "
            "tapeml.jit(tapeml.value_and_grad(loss)).lower(params, x, y)")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                   env={**os.environ, "TAPEML_CACHE": "1", "TAPEML_CACHE_DIR": cache})
    return cache


def w5(workload: str, runs: int) -> None:
    """W5: the first call of `workload`'s step in fresh processes: cold (an empty disk cache),
    a new program on a machine whose GEMM kernels are built (its kernels alone in the cache:
    `kernels_only`) and jax.jit's first call where jax is installed, one of each in turn,
    medians of `runs`; then warm (the cache the first cold run filled)."""
    import tempfile

    filled = tempfile.mkdtemp(prefix="tapeml-bench-warm-")
    colds, built, jax_runs = [], [], []
    for i in range(runs):  # interleaved, so that a slow minute of the machine hits every column
        colds.append(first_call(workload, filled if i == 0 else None))
        built.append(first_call(workload, kernels_only(workload)))
        jax_runs.append(jax_first_call(workload))
    warm = first_call(workload, filled)
    name = {"mlp": "W3", "cnn": "W4"}[workload]
    cold, program = statistics.median(colds), statistics.median(built)
    jax_s = None if None in jax_runs else statistics.median(jax_runs)
    peer = "" if jax_s is None else f"; jax.jit {jax_s:.3f} s ({jax_s / cold:.2f}x)"
    print(f"{f'W5 first call of {name}, fresh process':<34}{cold:>12.3f} s "
          f"(median of {runs}); from the disk cache {warm:.3f} s{peer}")
    peer = "" if jax_s is None else f" ({jax_s / program:.2f}x jax.jit's)"
    print(f"{'  ... its kernels built already':<34}{program:>12.3f} s{peer}")


def _cnn():
    rng = np.random.default_rng(0)
    params = {"c1": nn.conv2d_init(rng, 1, 16, 3), "c2": nn.conv2d_init(rng, 16, 32, 3),
              "out": nn.linear_init(rng, 32 * 7 * 7, 10)}
    x = rng.standard_normal((64, 1, 28, 28)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]

    def loss(p, x, y):
        h = nn.max_pool2d(ops.relu(nn.conv2d(x, p["c1"]["W"], p["c1"]["b"], padding=1)), 2)
        h = nn.max_pool2d(ops.relu(nn.conv2d(h, p["c2"]["W"], p["c2"]["b"], padding=1)), 2)
        return nn.softmax_cross_entropy(nn.linear(p["out"], ops.reshape(h, (h.shape[0], -1))), y)

    return loss, params, x, y


def _numpy_cnn_step(p, x, y):
    """The same step written plainly with numpy (examples/numpy_cnn.py): the six gradients."""
    g = numpy_cnn.value_and_grad(p, x, y)[1]
    return (g["c1"]["W"], g["c1"]["b"], g["c2"]["W"], g["c2"]["b"], g["out"]["W"], g["out"]["b"])


def peers(workloads: list[str], rounds: int) -> None:
    """W1-W4 beside every peer (bench/peers.py), at one thread and at two where there are two
    cores: each (workload, thread count) in a fresh worker pinned to that many cores, every
    system timed there in alternating blocks; the best peer is the fastest of numpy, jax.jit
    and torch on that row."""
    import json
    import os
    import subprocess

    cores = sorted(os.sched_getaffinity(0))
    counts = [1, 2] if len(cores) >= 2 else [1]
    names = ["numpy", *[s for s in ("jax", "torch") if importlib.util.find_spec(s)]]
    print(f"{'workload':<22}{'threads':>8}{'tapeml':>11}" + "".join(f"{n:>11}" for n in names)
          + f"{'best peer':>12}{'ratio':>8}   (ratio: best peer's time / tapeml's; >1: "
          "tapeml faster)")
    for workload in workloads:
        for threads in counts:
            out = subprocess.run(
                [sys.executable, str(Path(__file__).parent / "peers.py"), workload,
                 str(threads), str(rounds)], capture_output=True, text=True,
                preexec_fn=lambda n=threads: os.sched_setaffinity(0, cores[:n]))
            if out.returncode:
                raise RuntimeError(f"bench/peers.py {workload} {threads} failed:\n{out.stderr}")
            seconds = json.loads(out.stdout.splitlines()[-1])["seconds"]
            gflop = {"W2-512": 2 * 512**3 / 1e9, "W2-1024": 2 * 1024**3 / 1e9}.get(workload)
            best = min(names, key=lambda n: seconds[n])
            shown = {n: (gflop / t if gflop else t * 1e3) for n, t in seconds.items()}
            unit = "GFLOP/s" if gflop else "ms"
            print(f"{workload + ' [' + unit + ']':<22}{threads:>8}{shown['tapeml']:>11.2f}"
                  + "".join(f"{shown[n]:>11.2f}" for n in names)
                  + f"{best:>12}{seconds[best] / seconds['tapeml']:>8.2f}")


def _worker(*args: str, cores: list[int] | None = None, cache: str | None = None) -> object:
    """bench/gpt_step.py ARGS in a process of its own (pinned to `cores` if given; with its
    disk cache in `cache` if given)."""
    import json
    import os
    import subprocess

    pin = None if cores is None else (lambda: os.sched_setaffinity(0, cores))
    env = os.environ if cache is None else {**os.environ, "TAPEML_CACHE_DIR": cache}
    out = subprocess.run([sys.executable, str(Path(__file__).parent / "gpt_step.py"), *args],
                         capture_output=True, text=True, preexec_fn=pin, env=env)
    if out.returncode:
        raise RuntimeError(f"bench/gpt_step.py {' '.join(args)} failed:\n{out.stderr}")
    return json.loads(out.stdout.splitlines()[-1])


def peers_row(name: str, unit: str, ours: float, peers: dict[str, float]) -> None:
    """tapeml's figure, then each peer's with its ratio (>1: tapeml faster)."""
    text = "".join(f"{theirs:>11.3f} ({theirs / ours:.2f}x)" for theirs in peers.values())
    print(f"{name:<34}{ours:>12.3f} {unit:<3}{text}")


def w7(rounds: int, layer_counts: list[int], stages: bool) -> None:
    """The GPT step (bench/gpt_step.py), both variants: steady medians, every system in one
    worker pinned to one core; first calls, each system in a fresh process; then, where there
    are two cores, the one-hot variant's steady medians on two threads (pinned to two)."""
    import os
    import tempfile

    import gpt_step

    cores = sorted(os.sched_getaffinity(0))
    peers = gpt_step.systems("ids")[1:]
    print(f"{'W7 GPT step, 1 thread':<34}{'tapeml':>16}" +
          "".join(f"{p + ' (ratio)':>21}" for p in peers))
    for variant in ("ids", "onehot"):
        for layers in layer_counts:
            cache = tempfile.mkdtemp(prefix="tapeml-bench-w7-")  # cold: no kernel either
            got = _worker("steady", variant, str(layers), str(rounds), cores=cores[:1],
                          cache=cache)
            label = f"W7 {layers} layers, {variant}"
            steady = got["steady_ms"]
            peers_row(f"{label}: step", "ms", steady["tapeml"], {p: steady[p] for p in peers})
            firsts = {p: _worker("first", p, variant, str(layers)) for p in peers}
            peers_row(f"{label}: first call", "s", got["tapeml_first_s"], firsts)
            warm = _worker("first", "tapeml", variant, str(layers), cache=cache)  # filled
            print(f"{f'{label}: from the disk cache':<34}{warm:>12.3f} s")
            worst = max(got["loss_rel_diff"].values())
            print(f"{'':<34}loss {got['loss']['tapeml']:.6f} everywhere (relative spread "
                  f"{worst:.1e}); gradients agree with numpy's")
            if stages:
                for name, count, seconds, detail in got["stages"]:
                    count = "" if count is None else f"{count:>7,} ops"
                    print(f"{'':<38}{name:<24}{count:>11} {seconds:>8.2f} s   {detail}"[:140])
    if len(cores) < 2:
        return
    for layers in layer_counts:
        got = _worker("steady", "onehot", str(layers), str(rounds), "2", cores=cores[:2])
        steady = got["steady_ms"]
        peers_row(f"W7 {layers} layers, onehot, 2 threads", "ms", steady["tapeml"],
                  {p: steady[p] for p in peers})


DEPTHS = (2, 4, 8)
"""The GPT step's depths C compares (issue 18: a 4- and an 8-layer first call at most 1.3x and
1.6x the 2-layer one's)."""


def compile_scaling(rounds: int) -> None:
    """C: issue 18's compile-time ratios in one run, one core. The GPT step's (ids) cold
    first call at 2, 4 and 8 layers, each in a fresh process with an empty disk cache, the
    depths in turn (`rounds` of each, medians), and each depth's ratio to the 2-layer one's;
    then a new batch size, 8 after 16, in one process (`rounds` processes, medians): its
    first call's share of the first compile's."""
    import os
    import tempfile

    core = sorted(os.sched_getaffinity(0))[:1]
    cold = {layers: [] for layers in DEPTHS}
    for _ in range(rounds):
        for layers in DEPTHS:
            cache = tempfile.mkdtemp(prefix="tapeml-bench-depth-")
            cold[layers].append(_worker("first", "tapeml", "ids", str(layers), cores=core,
                                        cache=cache))
    base = statistics.median(cold[DEPTHS[0]])
    for layers in DEPTHS:
        median = statistics.median(cold[layers])
        print(f"{f'C GPT {layers} layers, first call':<34}{median:>12.3f} s "
              f"({median / base:.2f}x the {DEPTHS[0]}-layer one; "
              f"{min(cold[layers]):.3f}-{max(cold[layers]):.3f} s)")
    for how in ("", "generic"):  # jit as it is; with batch_argnums
        pairs = [_worker("rebatch", "ids", str(DEPTHS[0]), "8", *[how] * bool(how),
                         cores=core, cache=tempfile.mkdtemp(prefix="tapeml-bench-batch-"))
                 for _ in range(rounds)]
        first, then = (statistics.median(p[i] for p in pairs) for i in (0, 1))
        label = (f"C GPT {DEPTHS[0]} layers, batch 8 after 16" if not how else
                 "  ... jitted with batch_argnums")
        print(f"{label:<34}{then:>12.3f} s ({then / first:.2f} of its first call, "
              f"{first:.3f} s; {then / base:.2f} of the cold one above)")


def w6(repeat: int) -> None:
    f = tapeml.jit(lambda x: x * 2.0 + 1.0)
    x = np.ones(16, np.float32)
    row("W6 per-call, 16 elements", "us", median_time(lambda: f(x), repeat * 50) * 1e6,
        median_time(lambda: x * 2.0 + 1.0, repeat * 50) * 1e6)
    # the same with pytrees, as a training step is called: a dict of parameters and two
    # arrays in, a number and the parameters' tree out (8 arrays in, 7 out), beside numpy's
    # own ops and, where installed, jax.jit's call and torch's eager ops

    def tree_step(p, x, y):
        return (x * y).sum(), {k: {n: a * 2.0 for n, a in d.items()} for k, d in p.items()}

    rng = np.random.default_rng(0)
    params = {f"lin{i}": {n: rng.standard_normal(16).astype(np.float32) for n in ("W", "b")}
              for i in range(3)}
    jitted = tapeml.jit(tree_step)
    row("W6 pytree call, 8 in, 7 out", "us",
        median_time(lambda: jitted(params, x, x), repeat * 50) * 1e6,
        median_time(lambda: tree_step(params, x, x), repeat * 50) * 1e6)
    others = []
    if importlib.util.find_spec("jax") is not None:
        import jax

        step = jax.jit(tree_step)
        others.append(f"jax.jit {median_time(lambda: step(params, x, x), repeat * 20) * 1e6:.1f}")
    if importlib.util.find_spec("torch") is not None:
        import torch

        tp = {k: {n: torch.from_numpy(a) for n, a in d.items()} for k, d in params.items()}
        tx = torch.from_numpy(x)
        others.append(f"torch eager "
                      f"{median_time(lambda: tree_step(tp, tx, tx), repeat * 50) * 1e6:.1f}")
    if others:
        print(f"{'  ... the same call':<34}" + ", ".join(others) + " us")


def eager(repeat: int) -> None:
    """E: ops called outside any trace on 16 elements (4 x 4, f32) beside numpy's own call
    for the same op (issue 18: at most 3x)."""
    x = np.arange(16, dtype=np.float32).reshape(4, 4) / 7
    y = x[::-1].copy()

    def numpy_softmax(a):
        e = np.exp(a - a.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    cases = [("add", lambda: ops.add(x, y), lambda: np.add(x, y)),
             ("multiply by a float", lambda: ops.multiply(x, 0.5), lambda: x * np.float32(0.5)),
             ("tanh", lambda: ops.tanh(x), lambda: np.tanh(x)),
             ("greater", lambda: ops.greater(x, y), lambda: np.greater(x, y)),
             ("sum", lambda: ops.sum(x), lambda: np.sum(x)),
             ("matmul", lambda: ops.matmul(x, y), lambda: np.matmul(x, y)),
             ("x[1:3]", lambda: ops.getitem(x, slice(1, 3)), lambda: x[1:3]),
             ("softmax", lambda: ops.softmax(x), lambda: numpy_softmax(x)),
             ("maximum (IEEE zeros)", lambda: ops.maximum(x, y), lambda: np.maximum(x, y))]
    for name, ours, theirs in cases:
        np.testing.assert_allclose(ours(), theirs(), rtol=1e-6, err_msg=name)
        row(f"E eager {name}", "us", median_time(ours, repeat * 200) * 1e6,
            median_time(theirs, repeat * 200) * 1e6)


def threads(repeat: int) -> None:
    """One thread against all of them (TAPEML_NUM_THREADS, else the affinity mask), both
    compiled in this process and called in alternating blocks of 8 calls, so both see the same
    machine. (Alternating single calls would time the workers' wake from sleep every call, as
    the 1-thread call outlasts their spin; a training loop calls one step back to back.)"""
    import os

    from tapeml.codegen.gemm import host_threads

    loss, params, x, y = _cnn()
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((1024, 1024)).astype(np.float32) for _ in range(2))
    cases = [("W2 matmul n=1024", lambda a, b: a @ b, (a, b)),
             ("W4 CNN training step", tapeml.value_and_grad(loss), (params, x, y))]
    many = os.environ.get("TAPEML_NUM_THREADS")
    count = int(many) if many else host_threads()
    print(f"{'workload':<34}{'1 thread':>12}{f'{count} threads':>12}{'speedup':>9}")
    for name, fn, args in cases:
        os.environ["TAPEML_NUM_THREADS"] = "1"
        one = tapeml.jit(fn)
        one(*args)  # compiled now, for the thread count set now
        os.environ["TAPEML_NUM_THREADS"] = str(count)
        all_ = tapeml.jit(fn)
        all_(*args)
        times: dict[int, list[float]] = {1: [], count: []}
        for _ in range(repeat):  # blocks of calls, as a training loop makes them
            for n, f in ((1, one), (count, all_)):
                for _ in range(8):
                    start = time.perf_counter()
                    f(*args)
                    times[n].append(time.perf_counter() - start)
        first, most = (statistics.median(times[n]) * 1e3 for n in (1, count))
        print(f"{name:<34}{first:>9.3f} ms{most:>9.3f} ms{first / most:>8.2f}x")
    if many is None:
        del os.environ["TAPEML_NUM_THREADS"]
    else:
        os.environ["TAPEML_NUM_THREADS"] = many


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller sizes")
    parser.add_argument("--only", default="W1,W2,W3,W4,W5,C,W6,E,W7",
                        help="comma-separated workload ids")
    parser.add_argument("--stages", action="store_true",
                        help="W7: also print the stages of tapeml's first call")
    parser.add_argument("--threads", action="store_true",
                        help="only W2 n=1024 and W4 on one thread against all, interleaved")
    args = parser.parse_args()
    import os
    import tempfile

    # every compile of this run, and of its workers, cold: a disk cache of this run's own
    os.environ["TAPEML_CACHE_DIR"] = tempfile.mkdtemp(prefix="tapeml-bench-")
    repeat = 3 if args.quick else 10
    if args.threads:
        threads(repeat)
        return
    only = set(args.only.split(","))
    known = {"W1", "W2", "W3", "W4", "W5", "C", "W6", "E", "W7"}
    if only - known:
        parser.error(f"--only: unknown workload {', '.join(sorted(only - known))} (known: "
                     f"{', '.join(sorted(known))})")
    chosen = [w for w in ("W1", "W2", "W3", "W4") if w in only]
    if chosen:
        workloads = [w for c in chosen for w in (["W2-512", "W2-1024"] if c == "W2" else [c])]
        peers(workloads, 3 if args.quick else 8)
    if "W5" in only:  # (a first call here swings by 10% from one process to the next, jax's
        # too: W3's medians of three read 0.98-0.99x jax's in runs whose nine read 1.05x)
        w5("mlp", 3 if args.quick else 9)
        w5("cnn", 1 if args.quick else 5)
    if "C" in only:
        compile_scaling(1 if args.quick else 3)
    if only & {"W6", "E"}:
        print(f"{'workload':<34}{'tapeml-cpu':>21}{'numpy':>21}{'ratio':>9}")
        print(f"{'':<34}{'':>21}{'':>21}{'(>1: tapeml faster)':>9}")
    if "W6" in only:
        w6(repeat)
    if "E" in only:
        eager(repeat)
    if "W7" in only:
        w7(3 if args.quick else 8, [2] if args.quick else [2, 4], args.stages)


if __name__ == "__main__":
    main()
