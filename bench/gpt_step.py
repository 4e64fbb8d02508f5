"""W7, the GPT training step, for every system: tapeml, plain numpy (numpy_gpt.py), jax.jit and
torch (eager), each computing the same loss and the gradient of every parameter.

Two variants of the same model (examples/gpt.py's, vocabulary 64):
  "ids"     integer tokens through an embedding gather, integer targets (what examples/gpt.py
            does; the gradient of the gather is a scatter-add, of the loss a take_along_axis);
  "onehot"  ../shared/reference/workloads.md's W7 exactly: one-hot tokens through a matmul
            embedding and one-hot targets, so every system runs the same dense program.

bench/run.py --only W7 runs this file as a worker in a fresh process per (variant, layers),
with every library told to use one thread:

    python bench/gpt_step.py steady VARIANT LAYERS ROUNDS [THREADS]
                                        # JSON: tapeml's first call, then every system's
                                        # median, interleaved (THREADS: 1 unless given)
    python bench/gpt_step.py first SYSTEM VARIANT LAYERS    # seconds to a peer's first result
    python bench/gpt_step.py rebatch VARIANT LAYERS BATCH   # tapeml's first call, then its
                                        # first call at another batch size, in one process
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
sys.path.insert(0, str(HERE.parent / "examples"))
sys.path.insert(0, str(HERE))

BATCH, CONTEXT, WIDTH, HEADS, VOCAB, MLP = 16, 64, 128, 4, 64, 4

from peers import threads_environment  # noqa: E402

ONE_THREAD = threads_environment(1)
"""The environment a worker runs in: one thread for numpy's BLAS, tapeml, XLA (torch is told
with torch.set_num_threads); `steady ... THREADS` runs in threads_environment(THREADS)."""


def have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# ----------------------------------------------------------------------------------------------
# The data, the same for every system


def make(variant: str, layers: int, seed: int = 0, batch: int = BATCH, context: int = CONTEXT,
         width: int = WIDTH, heads: int = HEADS, vocab: int = VOCAB) -> tuple[Any, dict, Any, Any]:
    """(cfg, params, tokens, targets) as numpy arrays: integer (batch, context) ids, or one-hot
    float32 (batch, context, vocab)."""
    import gpt
    import numpy as np

    cfg = gpt.Config(vocab=vocab, context=context, width=width, heads=heads, layers=layers,
                     mlp=MLP)
    rng = np.random.default_rng(seed)
    params = gpt.init(rng, cfg)
    tokens = rng.integers(0, vocab, (batch, context)).astype(np.int32)
    targets = rng.integers(0, vocab, (batch, context)).astype(np.int32)
    if variant == "onehot":
        eye = np.eye(vocab, dtype=np.float32)
        tokens, targets = eye[tokens], eye[targets]
    elif variant != "ids":
        raise ValueError(f"variant is 'ids' or 'onehot', got {variant!r}")
    return cfg, params, tokens, targets


# ----------------------------------------------------------------------------------------------
# tapeml


def tapeml_loss(variant: str, heads: int = HEADS) -> Callable:
    """loss(params, tokens, targets): examples/gpt.py's, or with the embedding a matmul."""
    import gpt

    import tapeml
    from tapeml import nn

    if variant == "ids":
        return lambda p, x, y: gpt.loss(p, x, y, heads)

    def forward(params, tokens):
        x = tapeml.matmul(tokens, params["tok"]["E"]) + params["pos"]["E"][:tokens.shape[1]]
        for i in range(sum(1 for k in params if k.startswith("block"))):
            block = params[f"block{i}"]
            x = x + gpt.attention(block, nn.layer_norm(block["ln1"], x), heads)
            h = nn.gelu(nn.linear(block["fc"], nn.layer_norm(block["ln2"], x)))
            x = x + nn.linear(block["out"], h)
        return nn.linear(params["head"], nn.layer_norm(params["ln_f"], x))

    return lambda p, x, y: nn.softmax_cross_entropy(forward(p, x), y)


def tapeml_step(variant: str, heads: int = HEADS) -> Callable:
    import tapeml

    return tapeml.jit(tapeml.value_and_grad(tapeml_loss(variant, heads)))


# ----------------------------------------------------------------------------------------------
# jax


def jax_step(variant: str, heads: int = HEADS) -> Callable:
    """jax.jit(jax.value_and_grad(loss)) over a pytree of jax arrays."""
    import jax
    import jax.numpy as jnp

    def layer_norm(p, x):
        centered = x - x.mean(-1, keepdims=True)
        var = (centered * centered).mean(-1, keepdims=True)
        return centered * (1 / jnp.sqrt(var + 1e-5)) * p["scale"] + p["bias"]

    def linear(p, x):
        return x @ p["W"] + p["b"]

    def attention(p, x):
        b, t, width = x.shape
        d = width // heads
        qkv = linear(p["qkv"], x)
        q, k, v = (qkv[..., i * width:(i + 1) * width].reshape(b, t, heads, d)
                   .transpose(0, 2, 1, 3) for i in range(3))
        scores = (q * (1 / d**0.5)) @ k.transpose(0, 1, 3, 2)
        keep = jnp.tril(jnp.ones((t, t), bool))
        scores = jnp.where(keep, scores, jnp.finfo(jnp.float32).min)
        a = jax.nn.softmax(scores, axis=-1) @ v
        return linear(p["proj"], a.transpose(0, 2, 1, 3).reshape(b, t, width))

    def loss(params, tokens, targets):
        tok, pos = params["tok"]["E"], params["pos"]["E"]
        t = tokens.shape[1]
        x = (tokens @ tok if variant == "onehot" else tok[tokens]) + pos[:t]
        for i in range(sum(1 for k in params if k.startswith("block"))):
            p = params[f"block{i}"]
            x = x + attention(p, layer_norm(p["ln1"], x))
            h = jax.nn.gelu(linear(p["fc"], layer_norm(p["ln2"], x)), approximate=False)
            x = x + linear(p["out"], h)
        log_p = jax.nn.log_softmax(linear(params["head"], layer_norm(params["ln_f"], x)), -1)
        if variant == "onehot":
            return -(targets * log_p).sum(-1).mean()
        return -jnp.take_along_axis(log_p, targets[..., None], -1).mean()

    step = jax.jit(jax.value_and_grad(loss))

    def call(params, tokens, targets):
        value, grads = step(params, tokens, targets)
        jax.block_until_ready(grads)
        return value, grads

    return call


def jax_args(params: dict, tokens: Any, targets: Any) -> tuple:
    import jax

    return jax.device_put((params, tokens, targets))


# ----------------------------------------------------------------------------------------------
# torch


def torch_step(variant: str, heads: int = HEADS) -> Callable:
    """Eager forward, then torch.autograd.grad of the loss for every parameter."""
    import torch
    import torch.nn.functional as F

    def linear(p, x):
        return x @ p["W"] + p["b"]

    def attention(p, x):
        b, t, width = x.shape
        d = width // heads
        qkv = linear(p["qkv"], x)
        q, k, v = (qkv[..., i * width:(i + 1) * width].reshape(b, t, heads, d)
                   .transpose(1, 2) for i in range(3))
        scores = (q * (1 / d**0.5)) @ k.transpose(-1, -2)
        keep = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, torch.finfo(torch.float32).min)
        a = scores.softmax(-1) @ v
        return linear(p["proj"], a.transpose(1, 2).reshape(b, t, width))

    def layer_norm(p, x):
        return F.layer_norm(x, (x.shape[-1],), p["scale"], p["bias"], 1e-5)

    def call(params, leaves, tokens, targets):
        tok, pos = params["tok"]["E"], params["pos"]["E"]
        t = tokens.shape[1]
        x = (tokens @ tok if variant == "onehot" else tok[tokens]) + pos[:t]
        for i in range(sum(1 for k in params if k.startswith("block"))):
            p = params[f"block{i}"]
            x = x + attention(p, layer_norm(p["ln1"], x))
            x = x + linear(p["out"], F.gelu(linear(p["fc"], layer_norm(p["ln2"], x))))
        logits = linear(params["head"], layer_norm(params["ln_f"], x))
        if variant == "onehot":
            value = -(targets * logits.log_softmax(-1)).sum(-1).mean()
        else:
            value = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return value.detach(), torch.autograd.grad(value, leaves)

    return call


def torch_args(params: dict, tokens: Any, targets: Any) -> tuple:
    """(params as leaf tensors that require grad, the list of them in tapeml's leaf order,
    tokens, targets); integer ids become int64 (torch indexes with those)."""
    import torch

    from tapeml.tracing.pytree import flatten, unflatten

    leaves, tree = flatten(params)
    tensors = [torch.from_numpy(leaf.copy()).requires_grad_() for leaf in leaves]
    tokens_t, targets_t = torch.from_numpy(tokens), torch.from_numpy(targets)
    if tokens.dtype.kind != "f":
        tokens_t, targets_t = tokens_t.long(), targets_t.long()
    return unflatten(tree, tensors), tensors, tokens_t, targets_t


# ----------------------------------------------------------------------------------------------
# Every system, callable the same way


def systems(variant: str) -> list[str]:
    return ["tapeml", "numpy"] + [s for s, m in (("jax", "jax"), ("torch", "torch")) if have(m)]


def bind(system: str, variant: str, params: dict, tokens: Any, targets: Any
         ) -> Callable[[], tuple[float, dict | None]]:
    """A call of `system`'s step on these arguments, returning (loss, grads) where grads has
    params' structure as numpy arrays (None for torch, whose gradients come as a list)."""
    if system == "tapeml":
        step = tapeml_step(variant)
        return lambda: step(params, tokens, targets)
    if system == "numpy":
        import numpy_gpt

        return lambda: numpy_gpt.value_and_grad(params, tokens, targets, HEADS)
    if system == "jax":
        step, args = jax_step(variant), jax_args(params, tokens, targets)
        return lambda: step(*args)
    if system == "torch":
        import torch

        torch.set_num_threads(int(os.environ.get("TAPEML_NUM_THREADS", "1")))
        step, args = torch_step(variant), torch_args(params, tokens, targets)
        return lambda: step(*args)
    raise ValueError(f"unknown system {system!r}")


def as_numpy_grads(system: str, result: tuple, params: dict) -> tuple[float, list]:
    """(loss, flat list of gradients in params' leaf order) from a system's result."""
    import numpy as np

    from tapeml.tracing.pytree import flatten

    value, grads = result
    if system == "torch":
        return float(value), [g.numpy() for g in grads]
    return float(value), [np.asarray(g) for g in flatten(grads)[0]]


def check(results: dict[str, tuple[float, list]], rtol_loss: float = 1e-5) -> dict:
    """Every system's loss within rtol_loss of numpy's, its gradients within 1e-4 (relative to
    each gradient's largest element); the relative loss differences."""
    import numpy as np

    loss0, grads0 = results["numpy"]
    report = {}
    for name, (value, grads) in results.items():
        rel = abs(value - loss0) / abs(loss0)
        assert rel <= rtol_loss, f"W7: {name}'s loss {value!r} is not numpy's {loss0!r}"
        assert len(grads) == len(grads0)
        for g, e in zip(grads, grads0, strict=True):
            scale = float(np.abs(e).max()) or 1.0
            err = float(np.abs(g - e).max()) / scale
            assert err <= 1e-4, f"W7: {name}'s gradient is off by {err:.2e} of its largest"
        report[name] = rel
    return report


# ----------------------------------------------------------------------------------------------
# The workers


def steady(variant: str, layers: int, rounds: int, calls: int = 3, threads: int = 1) -> dict:
    """tapeml's first call (this process is fresh; imports excluded), the losses and gradients
    checked across systems, then every system's median from `rounds` alternating blocks of
    `calls` calls each (on more than one thread, each block after a pause and a call not
    timed, as bench/peers.py's: the threads of the system before spin a while)."""
    _, params, tokens, targets = make(variant, layers)
    names = systems(variant)
    import importlib

    for module in ("jax.numpy", "torch.nn.functional", "numpy_gpt"):  # imports are excluded
        if have(module.split(".")[0]):
            importlib.import_module(module)
    import tapeml
    import tapeml.codegen.cpu  # noqa: F401  (imports are excluded: the backend `jit` loads)

    step = tapeml_step(variant)
    start = time.perf_counter()
    with tapeml.profile() as stages:
        first_result = step(params, tokens, targets)
    first = time.perf_counter() - start
    calls_of = {"tapeml": lambda: step(params, tokens, targets)}
    calls_of.update({n: bind(n, variant, params, tokens, targets) for n in names[1:]})
    results = {"tapeml": as_numpy_grads("tapeml", first_result, params)}
    results.update({n: as_numpy_grads(n, calls_of[n](), params) for n in names[1:]})
    differences = check(results)
    for fn in calls_of.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(rounds):
        for name in names:
            fn = calls_of[name]
            if threads > 1:
                time.sleep(0.3)
                fn()
            for _ in range(calls):
                started = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - started)
    return {"variant": variant, "layers": layers, "tapeml_first_s": first,
            "stages": [[s.name, s.ops, s.seconds, s.detail] for s in stages],
            "loss": {n: results[n][0] for n in names}, "loss_rel_diff": differences,
            "steady_ms": {n: statistics.median(times[n]) * 1e3 for n in names}}


def _import(system: str) -> None:
    """What `system` imports (excluded from a first call's clock)."""
    import importlib

    modules = {"numpy": ["numpy_gpt"], "jax": ["jax", "jax.numpy"],
               "torch": ["torch", "torch.nn.functional"],  # (tapeml's: what `import tapeml`
               "tapeml": ["tapeml.codegen.cpu", "tapeml.frontend.jit",  # loads on first use)
                          "tapeml.frontend.autodiff"]}
    for module in ["tapeml", *modules.get(system, [])]:
        importlib.import_module(module)


def first(system: str, variant: str, layers: int) -> float:
    """Seconds from building `system`'s step to its first result, in this (fresh) process,
    imports excluded."""
    _import(system)
    _, params, tokens, targets = make(variant, layers)
    start = time.perf_counter()
    bind(system, variant, params, tokens, targets)()
    return time.perf_counter() - start


def rebatch(variant: str, layers: int, batch: int, generic: bool = False) -> list[float]:
    """tapeml's first call at BATCH, then the same step's first call at `batch`, in this
    (fresh) process, imports excluded: seconds each (the second compiles a new program and
    shares the GEMM kernels; `generic`: jitted with batch_argnums, it shares the program's
    machine code where its lowering at `batch` is an instance of the first's)."""
    _import("tapeml")
    import tapeml

    step = (tapeml.jit(tapeml.value_and_grad(tapeml_loss(variant)), batch_argnums=(1, 2))
            if generic else tapeml_step(variant))
    seconds = []
    for size in (BATCH, batch):
        _, params, tokens, targets = make(variant, layers, batch=size)
        start = time.perf_counter()
        step(params, tokens, targets)
        seconds.append(time.perf_counter() - start)
    return seconds


def main(argv: list[str]) -> None:
    if argv[0] == "steady":
        threads = int(argv[4]) if len(argv) > 4 else 1
        print(json.dumps(steady(argv[1], int(argv[2]), int(argv[3]), threads=threads)))
    elif argv[0] == "first":
        print(json.dumps(first(argv[1], argv[2], int(argv[3]))))
    elif argv[0] == "rebatch":
        print(json.dumps(rebatch(argv[1], int(argv[2]), int(argv[3]), argv[4:] == ["generic"])))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    wanted = threads_environment(int(sys.argv[5]) if sys.argv[1:2] == ["steady"] and
                                 len(sys.argv) > 5 else 1)
    if any(os.environ.get(k) != v for k, v in wanted.items()):  # read at import: run again
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]],
                  {**os.environ, **wanted})
    main(sys.argv[1:])
