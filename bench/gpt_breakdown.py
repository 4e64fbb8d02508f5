"""W7's tapeml step taken apart: each piece of the GPT step compiled alone with tapeml.jit
(forward and backward, as in the step), timed beside the same piece of bench/numpy_gpt.py, with
what tapeml's pipeline made of it (fused groups, GEMM kernel calls, loops) read from
`tapeml.jit(f).lower(...)`'s stages and the compile stages from `tapeml.profile()`.

    .venv/bin/python bench/gpt_breakdown.py [--layers 2] [--pieces attention,mlp,...]

One thread (the environment gpt_step.py's workers run in). A piece's backward is taken of
sum(piece(x) * r) for a fixed random cotangent r, so its gradient work is the step's.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gpt_step  # noqa: E402  (puts examples/ on the path too)

if __name__ == "__main__":
    missing = {k: v for k, v in gpt_step.ONE_THREAD.items() if os.environ.get(k) != v}
    if missing:
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]],
                  {**os.environ, **gpt_step.ONE_THREAD})

import gpt  # noqa: E402
import numpy as np  # noqa: E402
import numpy_gpt as npg  # noqa: E402

import tapeml  # noqa: E402
from tapeml import nn  # noqa: E402
from tapeml.frontend.program import trace  # noqa: E402
from tapeml.tracing.pytree import flatten  # noqa: E402
from tapeml.tracing.trace import runtime_leaf  # noqa: E402

B, T, W, H = gpt_step.BATCH, gpt_step.CONTEXT, gpt_step.WIDTH, gpt_step.HEADS
MLP_WIDTH = gpt_step.MLP * W


def median_ms(fn: Callable[[], object], rounds: int = 7, calls: int = 3) -> float:
    fn()
    times = []
    for _ in range(rounds * calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def describe(stages: dict[str, str]) -> str:
    """What the program became: fused groups and the tape ops left beside them (after
    tape-fuse), GEMM kernel calls by shape, loop nests shared out over threads
    (kernel.parallel_for) and those left sequential (a top-level scf.for)."""
    fused = stages.get("fused tape", "")
    top: dict[str, int] = {}
    for op in re.findall(r"^    %\S+ = \"?tape\.(\w+)", fused, re.M):
        top[op] = top.get(op, 0) + 1
    groups = top.pop("fused", 0)
    ops = ", ".join(f"{k} {v}" for k, v in sorted(top.items(), key=lambda kv: -kv[1])
                    if k not in ("constant", "reshape"))
    loops = stages.get("outlined loops") or stages.get("loops", "")  # outlined on threads only
    gemms: dict[str, int] = {}
    for b, m, n, k in re.findall(r"kernel\.gemm .*?batch = (\d+) : i64, m = (\d+) : i64, "
                                 r"n = (\d+) : i64, k = (\d+)", loops):
        shape = f"{b}x{m}x{n}x{k}" if b != "1" else f"{m}x{n}x{k}"
        gemms[shape] = gemms.get(shape, 0) + 1
    parallel = len(re.findall(r'^    (?:kernel\.parallel_for|"scf\.parallel")', loops, re.M))
    sequential = len(re.findall(r"^    (?:%\S+ = )?scf\.for", loops, re.M))
    gemm_text = " ".join(f"{s}" + (f"*{c}" if c > 1 else "") for s, c in gemms.items())
    return (f"{groups} fused groups + {ops}; {sum(gemms.values())} GEMMs [(b)xmxnxk: "
            f"{gemm_text}]; {parallel} parallel loop nests, {sequential} sequential")


def gemm_shapes(layers: int) -> list[tuple[int, int, int, int]]:
    """(batch, m, k, n) of every matmul in the step (contiguous operands here; the step reads
    some transposed in place): per layer the four linears forward, dX and dW each, and the
    attention's QK^T and PV forward, dP, dV, dQ, dK; the head's three."""
    rows, heads, d = B * T, B * H, W // H
    linears = [(W, 3 * W), (W, W), (W, MLP_WIDTH), (MLP_WIDTH, W)]
    per_layer = []
    for fan_in, fan_out in linears:
        per_layer += [(1, rows, fan_in, fan_out), (1, rows, fan_out, fan_in),
                      (1, fan_in, rows, fan_out)]
    per_layer += [(heads, T, d, T), (heads, T, T, d), (heads, T, d, T), (heads, T, T, d),
                  (heads, T, T, d), (heads, T, T, d)]
    vocab = gpt_step.VOCAB
    head = [(1, rows, W, vocab), (1, rows, vocab, W), (1, W, rows, vocab)]
    return per_layer * layers + head


def pieces(params: dict, ids: np.ndarray, targets: np.ndarray) -> dict:
    """name: (tapeml fn, its args, numpy fn of the same args, times it runs in the step)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((B, T, W)).astype(np.float32)
    r = rng.standard_normal((B, T, W)).astype(np.float32)
    layers = sum(1 for k in params if k.startswith("block"))
    blk = params["block0"]
    attn_p = {"qkv": blk["qkv"], "proj": blk["proj"]}
    mlp_p = {"fc": blk["fc"], "out": blk["out"]}
    t = tapeml

    def vg(f, argnums=0):
        return t.value_and_grad(f, argnums)

    def np_attention(p, x, r):
        y, saved = npg._attention(p, x, H)
        return npg._attention_back(p, x, saved, r, H)

    def np_mlp(p, x, r):
        f = npg._linear(p["fc"], x)
        g, dg = npg._gelu(f)
        npg._linear(p["out"], g)
        g_out, dgo = npg._linear_back(p["out"], g, r)
        return npg._linear_back(p["fc"], x, dgo * dg)

    def np_ln(p, x, r):
        y, saved = npg._layer_norm(p, x)
        return npg._layer_norm_back(p, saved, r)

    def np_embed(e, ids, r):
        e[ids]
        d = np.zeros_like(e)
        np.add.at(d, ids.reshape(-1), r.reshape(-1, W))
        return d

    def np_loss(p, x, y):
        logits = npg._linear(p, x)
        z = logits - logits.max(-1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
        np.take_along_axis(log_p, y[..., None], -1).mean()
        d = np.exp(log_p)
        np.put_along_axis(d, y[..., None], np.take_along_axis(d, y[..., None], -1) - 1, -1)
        return npg._linear_back(p, x, d / (B * T))

    qkv = rng.standard_normal((3, B, H, T, W // H)).astype(np.float32)
    s = rng.standard_normal((B, H, T, T)).astype(np.float32)
    keep = np.tril(np.ones((T, T), bool))

    def tp_core(qkv, r):
        q, k, v = qkv[0], qkv[1], qkv[2]
        return t.sum(nn.dot_product_attention(q, k, v, causal=True) * r)

    def np_core(qkv, r):
        q, k, v = qkv
        scale = np.float32(1 / np.sqrt(W // H))
        sc = np.where(keep, (q * scale) @ k.transpose(0, 1, 3, 2), np.finfo(np.float32).min)
        pr = npg._softmax(sc)
        pr @ v
        dp = r @ v.transpose(0, 1, 3, 2)
        ds = pr * (dp - (dp * pr).sum(-1, keepdims=True))
        return ds @ k, ds.transpose(0, 1, 3, 2) @ q, pr.transpose(0, 1, 3, 2) @ r

    def tp_softmax(s, r):
        masked = t.where(keep, s, float(np.finfo(np.float32).min))
        return t.sum(t.softmax(masked, axis=-1) * r)

    def np_softmax(s, r):
        pr = npg._softmax(np.where(keep, s, np.finfo(np.float32).min))
        return pr * (r - (r * pr).sum(-1, keepdims=True))

    shapes = gemm_shapes(layers)
    operands = [(rng.standard_normal((b, m, k)).astype(np.float32),
                 rng.standard_normal((b, k, n)).astype(np.float32)) for b, m, k, n in shapes]
    flops = sum(2 * b * m * k * n for b, m, k, n in shapes)

    r4 = rng.standard_normal((B, H, T, W // H)).astype(np.float32)
    rs = rng.standard_normal((B, H, T, T)).astype(np.float32)
    step = gpt_step.tapeml_loss("ids")
    return {
        "whole step (fwd+bwd)": (vg(step), (params, ids, targets),
                                 lambda p, x, y: npg.value_and_grad(p, x, y, H), 1),
        "forward only (loss)": (step, (params, ids, targets), None, 1),
        f"the step's {len(shapes)} GEMMs alone ({flops / 1e9:.2f} GFLOP)": (
            lambda ops: [t.matmul(a, b) for a, b in ops], (operands,),
            lambda ops: [a @ b for a, b in ops], 1),
        "attention: qkv+proj linears, heads, core": (
            vg(lambda p, x, r: t.sum(gpt.attention(p, x, H) * r), (0, 1)), (attn_p, x, r),
            np_attention, layers),
        "  attention core (QK^T, mask, softmax, PV)": (vg(tp_core), (qkv, r4), np_core, layers),
        "    masked softmax alone": (vg(tp_softmax), (s, rs), np_softmax, layers),
        "MLP: fc, exact GELU, out": (
            vg(lambda p, x, r: t.sum(nn.linear(p["out"], nn.gelu(nn.linear(p["fc"], x))) * r),
               (0, 1)), (mlp_p, x, r), np_mlp, layers),
        "layer norm": (vg(lambda p, x, r: t.sum(nn.layer_norm(p, x) * r), (0, 1)),
                       (blk["ln1"], x, r), np_ln, 2 * layers + 1),
        "embedding gather + scatter-add": (
            vg(lambda e, i, r: t.sum(t.take(e, i, axis=0) * r)),
            (params["tok"]["E"], ids, r), np_embed, 1),
        "head + log_softmax + take_along_axis": (
            vg(lambda p, x, y: nn.softmax_cross_entropy(nn.linear(p, x), y), (0, 1)),
            (params["head"], x, targets), np_loss, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--pieces", default="", help="substrings of the piece names to run")
    parser.add_argument("--ir", default="", help="a folder to write each piece's stages into")
    parser.add_argument("--stages", action="store_true", help="print each compile's stages")
    args = parser.parse_args()
    _, params, ids, targets = gpt_step.make("ids", args.layers)
    backend = tapeml.jit(lambda x: x).backend  # the cpu backend, as jit's default
    chosen = [s for s in args.pieces.split(",") if s]
    total = None
    print(f"{'piece':<44}{'x':>3}{'tapeml ms':>11}{'x count':>9}{'share':>7}{'numpy ms':>10}"
          f"{'compile s':>11}  what it compiles to (compile: with every stage printed)")
    for name, (fn, fargs, np_fn, count) in pieces(params, ids, targets).items():
        if chosen and not any(c in name for c in chosen):
            continue
        # one compilation, keeping each stage's text (as fn.lower does), timed and called
        start = time.perf_counter()
        with tapeml.profile() as stages:
            program = trace(fn, *fargs)
            native = backend.compile(program.module, stages=True)
        compile_s = time.perf_counter() - start
        lowered = dict(native.stages)
        leaves = [runtime_leaf(x) for x in flatten((fargs, {}))[0]]
        ours = median_ms(lambda native=native, leaves=leaves: native(*leaves))
        theirs = median_ms(lambda f=np_fn, a=fargs: f(*a)) if np_fn else float("nan")
        if total is None:
            total = ours
        if args.ir:
            folder = Path(args.ir) / re.sub(r"[^a-z0-9]+", "-", name.strip().lower())
            folder.mkdir(parents=True, exist_ok=True)
            for i, (stage, text) in enumerate(lowered.items()):
                (folder / f"{i:02d}-{re.sub(r'[^a-z0-9]+', '-', stage.lower())}.txt"
                 ).write_text(text)
        what = describe(lowered)
        if args.stages:
            what += "".join(f"\n{'':<8}{stage}" for stage in stages)
        share = ours * count / total
        print(f"{name:<44}{count:>3}{ours:>11.2f}{ours * count:>9.1f}{share:>7.0%}"
              f"{theirs:>10.2f}{compile_s:>11.1f}  {what}", flush=True)


if __name__ == "__main__":
    main()
