"""Train a character-level GPT on the text of Python's own standard library, then write with it.

    .venv/bin/python examples/gpt.py [--epochs N] [--steps-per-epoch N] [--layers N] ...

The corpus is every `.py` file under `sysconfig.get_paths()["stdlib"]` (every machine with
Python has it), read as bytes; one file in ten (by sorted path) is held out. The model is a
decoder-only transformer written with tapeml's ops the way a JAX user writes one: token and
position embeddings, pre-LN blocks of causal multi-head attention and a GELU MLP, a final layer
norm and a separate unembedding, mean softmax cross-entropy over every position against the
next byte. `tapeml.jit(tapeml.value_and_grad(loss))` traces, differentiates, fuses and compiles
the step once; Adam (`tapeml.optim`, also jitted) updates the parameters between calls.

Each epoch prints the train loss (the mean over its steps) and the held-out loss (a fixed set of
held-out windows); the unigram entropy of the corpus is the bar (a model that ignores context
cannot beat it). Then a sample is generated greedily from a prompt, and the step time reported.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import sysconfig
import time
from dataclasses import dataclass

import numpy as np

import tapeml
from tapeml import nn, optim


@dataclass(frozen=True)
class Config:
    vocab: int
    context: int = 64
    width: int = 128
    heads: int = 4
    layers: int = 2
    mlp: int = 4  # the MLP's width, in multiples of `width`


# ----------------------------------------------------------------------------------------------
# The corpus


def stdlib_files() -> list[str]:
    root = sysconfig.get_paths()["stdlib"]
    found = []
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("site-packages", "__pycache__"))
        found += [os.path.join(here, f) for f in sorted(files) if f.endswith(".py")]
    return sorted(found)


def corpus(limit_bytes: int | None = None) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(train ids, held-out ids, the byte of each id): one file in ten held out."""
    train, held = [], []
    for k, path in enumerate(stdlib_files()):
        with open(path, "rb") as f:
            (held if k % 10 == 9 else train).append(f.read())
    train_bytes, held_bytes = b"\n".join(train), b"\n".join(held)
    if limit_bytes:
        train_bytes, held_bytes = train_bytes[:limit_bytes], held_bytes[:limit_bytes // 9]
    alphabet = sorted(set(train_bytes) | set(held_bytes))
    table = np.zeros(256, np.int32)
    table[alphabet] = np.arange(len(alphabet))
    return (table[np.frombuffer(train_bytes, np.uint8)], table[np.frombuffer(held_bytes, np.uint8)],
            alphabet)


def unigram_entropy(ids: np.ndarray, vocab: int) -> float:
    """-sum p log p of the byte frequencies, in nats: the loss of the best context-free model."""
    p = np.bincount(ids, minlength=vocab) / len(ids)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def windows(ids: np.ndarray, starts: np.ndarray, context: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs ids[s : s + context] and targets shifted by one, for each start s."""
    at = starts[:, None] + np.arange(context + 1)
    chunk = ids[at]
    return chunk[:, :-1], chunk[:, 1:]


# ----------------------------------------------------------------------------------------------
# The model


def init(rng: np.random.Generator, cfg: Config) -> dict:
    params = {"tok": nn.embedding_init(rng, cfg.vocab, cfg.width),
              "pos": nn.embedding_init(rng, cfg.context, cfg.width),
              "ln_f": nn.layer_norm_init(cfg.width),
              "head": nn.linear_init(rng, cfg.width, cfg.vocab)}
    hidden = cfg.mlp * cfg.width
    for i in range(cfg.layers):
        params[f"block{i}"] = {
            "ln1": nn.layer_norm_init(cfg.width),
            "qkv": nn.linear_init(rng, cfg.width, 3 * cfg.width),
            "proj": nn.linear_init(rng, cfg.width, cfg.width),
            "ln2": nn.layer_norm_init(cfg.width),
            "fc": nn.linear_init(rng, cfg.width, hidden),
            "out": nn.linear_init(rng, hidden, cfg.width),
        }
    return params


def attention(block: dict, x, heads: int):
    """Causal multi-head self-attention of x (batch, time, width)."""
    b, t, width = x.shape
    d = width // heads
    qkv = nn.linear(block["qkv"], x)  # (b, t, 3 * width)
    q, k, v = (tapeml.transpose(tapeml.reshape(qkv[..., i * width:(i + 1) * width],
                                               (b, t, heads, d)), (0, 2, 1, 3))
               for i in range(3))  # each (b, heads, t, d)
    a = nn.dot_product_attention(q, k, v, causal=True)
    return nn.linear(block["proj"], tapeml.reshape(tapeml.transpose(a, (0, 2, 1, 3)),
                                                   (b, t, width)))


def forward(params: dict, tokens, heads: int):
    """Logits (batch, time, vocab) for integer tokens (batch, time)."""
    t = tokens.shape[1]
    x = nn.embedding(params["tok"], tokens) + params["pos"]["E"][:t]
    for i in range(sum(1 for k in params if k.startswith("block"))):
        block = params[f"block{i}"]
        x = x + attention(block, nn.layer_norm(block["ln1"], x), heads)
        h = nn.gelu(nn.linear(block["fc"], nn.layer_norm(block["ln2"], x)))
        x = x + nn.linear(block["out"], h)
    return nn.linear(params["head"], nn.layer_norm(params["ln_f"], x))


def loss(params: dict, tokens, targets, heads: int):
    return nn.softmax_cross_entropy(forward(params, tokens, heads), targets)


# ----------------------------------------------------------------------------------------------
# Training and sampling


def progress(done: int, total: int, text: str) -> None:
    if not sys.stdout.isatty():
        return
    filled = round(24 * done / total)
    print(f"\r  [{'#' * filled}{'.' * (24 - filled)}] {done}/{total} {text}", end="",
          flush=True)


def generate(params: dict, cfg: Config, prompt: bytes, alphabet: list[int], length: int) -> bytes:
    """Greedy decoding: the prompt left-aligned in a window of the context's length (causal
    attention makes what follows position n-1 irrelevant to it), sliding once full."""
    ids = {b: i for i, b in enumerate(alphabet)}
    out = [ids.get(b, 0) for b in prompt]
    step = tapeml.jit(lambda p, tokens: forward(p, tokens, cfg.heads))
    for _ in range(length):
        window = out[-cfg.context:]
        tokens = np.zeros((1, cfg.context), np.int32)
        tokens[0, :len(window)] = window
        logits = step(params, tokens)
        out.append(int(np.argmax(logits[0, len(window) - 1])))
    return bytes(alphabet[i] for i in out)


def train(cfg: Config, train_ids: np.ndarray, held_ids: np.ndarray, epochs: int, steps: int,
          batch: int, learning_rate: float, seed: int = 0, report=print) -> tuple[dict, dict]:
    """Adam on random windows; returns the parameters and a record of losses and times."""
    rng = np.random.default_rng(seed)
    params = init(rng, cfg)
    opt = optim.adam(learning_rate)
    state = opt.init(params)

    @tapeml.jit  # loss, gradient and Adam's update: one program, compiled on the first call
    def step(params, state, x, y):
        value, grads = tapeml.value_and_grad(
            lambda p, x, y: loss(p, x, y, cfg.heads))(params, x, y)
        params, state = opt.update(params, grads, state)
        return params, state, value

    evaluate = tapeml.jit(lambda p, x, y: loss(p, x, y, cfg.heads))
    held_x, held_y = windows(held_ids, rng.integers(0, len(held_ids) - cfg.context - 1,
                                                    8 * batch), cfg.context)
    record = {"train": [], "held": [], "step_s": [], "first_s": None}
    for epoch in range(epochs):
        losses = []
        for s in range(steps):
            x, y = windows(train_ids, rng.integers(0, len(train_ids) - cfg.context - 1, batch),
                           cfg.context)
            started = time.perf_counter()
            params, state, value = step(params, state, x, y)
            elapsed = time.perf_counter() - started
            if record["first_s"] is None:
                record["first_s"] = elapsed
            else:
                record["step_s"].append(elapsed)
            losses.append(float(value))
            progress(s + 1, steps, f"loss {losses[-1]:.3f}")
        held = float(np.mean([evaluate(params, held_x[i:i + batch], held_y[i:i + batch])
                              for i in range(0, len(held_x), batch)]))
        record["train"].append(float(np.mean(losses)))
        record["held"].append(held)
        if sys.stdout.isatty():
            print("\r" + " " * 60 + "\r", end="")
        report(f"epoch {epoch + 1}: train loss {record['train'][-1]:.3f}, held-out loss "
               f"{held:.3f}")
    return params, record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=4,
                        help="passes of --steps-per-epoch steps each (default 4)")
    parser.add_argument("--steps-per-epoch", type=int, default=120,
                        help="training steps per epoch (default 120)")
    parser.add_argument("--batch", type=int, default=16,
                        help="sequences per step (default 16)")
    parser.add_argument("--context", type=int, default=64,
                        help="tokens per sequence (default 64)")
    parser.add_argument("--width", type=int, default=128,
                        help="model width (default 128)")
    parser.add_argument("--heads", type=int, default=4,
                        help="attention heads, dividing --width (default 4)")
    parser.add_argument("--layers", type=int, default=2,
                        help="transformer blocks (default 2)")
    parser.add_argument("--lr", type=float, default=3e-3,
                        help="Adam's learning rate (default 3e-3)")
    parser.add_argument("--prompt", default="def __init__(self",
                        help="the greedy sample's start")
    parser.add_argument("--sample", type=int, default=160, help="bytes to generate")
    args = parser.parse_args()

    started = time.perf_counter()
    train_ids, held_ids, alphabet = corpus()
    cfg = Config(vocab=len(alphabet), context=args.context, width=args.width, heads=args.heads,
                 layers=args.layers)
    entropy = unigram_entropy(train_ids, cfg.vocab)
    print(f"corpus: {len(train_ids) / 1e6:.1f} MB to train on, {len(held_ids) / 1e6:.1f} MB "
          f"held out, {cfg.vocab} distinct bytes; unigram entropy {entropy:.3f} nats "
          f"({time.perf_counter() - started:.1f} s to read)")
    print(f"model: {cfg.layers} layers, width {cfg.width}, {cfg.heads} heads, context "
          f"{cfg.context}, batch {args.batch}")
    params, record = train(cfg, train_ids, held_ids, args.epochs, args.steps_per_epoch,
                           args.batch, args.lr)
    print(f"held-out loss {record['held'][-1]:.3f} nats against the unigram entropy "
          f"{entropy:.3f} ({record['held'][-1] / entropy:.0%} of it; "
          f"{math.exp(record['held'][-1]):.1f} perplexity)")
    steady = float(np.median(record["step_s"]))
    print(f"step: {steady * 1e3:.1f} ms steady (median), first call {record['first_s']:.2f} s "
          "(trace + differentiate + compile + run)")
    sample = generate(params, cfg, args.prompt.encode(), alphabet, args.sample)
    print("sample (greedy):\n" + sample.decode("utf-8", errors="replace"))


if __name__ == "__main__":
    main()
