"""`make demo`: a small CNN learns scikit-learn's handwritten digits through the whole compiler.

The training step (loss, gradient, Adam update) is an ordinary Python function. tapeml traces it
into the `tape` dialect, appends its backward ops (tape-differentiate), raises convolution and
pooling idioms and fuses elementwise chains (tape-fuse), lowers it to loops and to LLVM, and runs
it as machine code. The demo prints what each stage did, checks the compiled step against xDSL's
interpreter on one batch, trains, and times the compiled step beside the same step in numpy.

    .venv/bin/python examples/demo.py [--epochs N] [--backend cpu]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import tapeml
from tapeml import nn, ops, optim
from tapeml.codegen.cuda_driver import GPUUnavailableError
from tapeml.tracing.pytree import flatten

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy_cnn  # noqa: E402  (the same step written plainly with numpy)

LEARNING_RATE = 3e-3
"""The peak of the cosine schedule; each step's rate is an argument of the compiled step."""


def logits(params, x):
    """conv3x3 16 + relu + maxpool2 -> conv3x3 32 + relu + maxpool2 -> linear 10."""
    h = nn.max_pool2d(ops.relu(nn.conv2d(x, params["c1"]["W"], params["c1"]["b"], padding=1)), 2)
    h = nn.max_pool2d(ops.relu(nn.conv2d(h, params["c2"]["W"], params["c2"]["b"], padding=1)), 2)
    return nn.linear(params["out"], ops.reshape(h, (h.shape[0], -1)))


def loss(params, x, y):
    return nn.softmax_cross_entropy(logits(params, x), y)


def train_step(params, state, x, y, learning_rate):
    value, grads = tapeml.value_and_grad(loss)(params, x, y)
    params, state = optim.adam(learning_rate).update(params, grads, state)
    return params, state, value


def schedule(step: int, total: int) -> np.float32:
    """Cosine decay from LEARNING_RATE to 0 over the run."""
    return np.float32(LEARNING_RATE * 0.5 * (1 + np.cos(np.pi * step / total)))


def init(rng: np.random.Generator) -> dict:
    return {"c1": nn.conv2d_init(rng, 1, 16, 3), "c2": nn.conv2d_init(rng, 16, 32, 3),
            "out": nn.linear_init(rng, 32 * 2 * 2, 10)}


def digits(seed: int) -> tuple[np.ndarray, ...]:
    """8x8 images scaled to [0, 1] as (N, 1, 8, 8) float32, one-hot labels; 80/20 split."""
    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)[:, None]
    y = np.eye(10, dtype=np.float32)[data.target]
    return tuple(train_test_split(x, y, test_size=0.2, random_state=seed,
                                  stratify=data.target))


def max_difference(a, b) -> float:
    leaves_a, leaves_b = flatten(a)[0], flatten(b)[0]
    return max(float(np.max(np.abs(np.asarray(p) - np.asarray(q))))
               for p, q in zip(leaves_a, leaves_b, strict=True))


def progress(epoch: int, epochs: int, done: int, total: int, text: str) -> None:
    """A progress bar redrawn in place on a terminal; elsewhere only each epoch's last line."""
    if done < total and not sys.stdout.isatty():
        return
    width = 30
    bar = "#" * (width * done // total) + "." * (width - width * done // total)
    print(f"\r  epoch {epoch:>2}/{epochs} [{bar}] {text}", end="", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--backend", default="cpu", help="cpu (or cuda, where there is a GPU)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    x_train, x_test, y_train, y_test = digits(args.seed)
    rng = np.random.default_rng(args.seed)
    params = init(rng)
    state = optim.adam(LEARNING_RATE).init(params)  # Adam's moments and step count
    batch = args.batch
    print(f"digits: {len(x_train)} training and {len(x_test)} test images of 8x8, "
          f"batch {batch}, Adam with a cosine learning rate from {LEARNING_RATE}\n")

    # 1. The pipeline, stage by stage: the first call traces and compiles the step.
    try:
        step = tapeml.jit(train_step, backend=args.backend)
    except ValueError as error:  # an unknown backend
        parser.error(str(error))
    xb, yb = x_train[:batch], y_train[:batch]
    rate = np.float32(LEARNING_RATE)
    started = time.perf_counter()
    try:
        with tapeml.profile() as stages:
            compiled_out = step(params, state, xb, yb, rate)
    except GPUUnavailableError as error:  # --backend cuda on a machine without a GPU
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    first_call = time.perf_counter() - started
    print(f"the training step through the pipeline (first call, {first_call:.2f} s):")
    for stage in stages:
        print(f"  {stage}")

    # 2. The compiled step against the reference interpreter, on one batch.
    reference_out = tapeml.jit(train_step, backend="interp")(params, state, xb, yb, rate)
    # Summed in another order, float32 rounding can make two values of a max-pool window
    # tie in one and not the other, moving that window's gradient: the difference is small
    # beside the step itself (Adam moves a parameter by up to the learning rate), not zero.
    print(f"\ncompiled step vs xDSL's interpreter on one batch: max |difference| "
          f"{max_difference(compiled_out, reference_out):.1e} over loss, parameters and "
          f"optimizer state (the step moves a parameter by up to {LEARNING_RATE:.0e})\n")

    # 3. Training.
    forward = tapeml.jit(logits)

    def predict(p, x):
        return forward(p, x).argmax(axis=1)

    steps_per_epoch = len(x_train) // batch
    started = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x_train))
        losses = []
        for i in range(steps_per_epoch):
            take = order[i * batch:(i + 1) * batch]
            rate = schedule((epoch - 1) * steps_per_epoch + i, args.epochs * steps_per_epoch)
            params, state, value = step(params, state, x_train[take], y_train[take], rate)
            losses.append(float(np.asarray(value)))  # a DeviceArray on the GPU
            if i % 8 == 0:
                progress(epoch, args.epochs, i + 1, steps_per_epoch, f"loss {np.mean(losses):.4f}")
        accuracy = np.mean(predict(params, x_train) == y_train.argmax(1))
        progress(epoch, args.epochs, steps_per_epoch, steps_per_epoch,
                 f"loss {np.mean(losses):.4f}  train accuracy {accuracy:.1%}\n")
    trained = time.perf_counter() - started
    test_accuracy = float(np.mean(predict(params, x_test) == y_test.argmax(1)))
    print(f"\ntest accuracy {test_accuracy:.1%} on {len(x_test)} held-out images "
          f"({args.epochs * steps_per_epoch} steps in {trained:.1f} s)")

    # 4. The compiled step beside the same step written in numpy (channels-last im2col and one
    #    BLAS matmul per convolution: the fastest formulation of it we know in numpy).
    numpy_params = tapeml.tree_map(np.copy, params)
    numpy_state = {"step": 0, "m": state["m"], "v": state["v"]}
    ours = _median_seconds(lambda: step(params, state, xb, yb, rate))
    theirs = _median_seconds(lambda: numpy_cnn.adam_step(numpy_params, numpy_state, xb, yb,
                                                         float(rate)))
    print(f"step time, batch {batch}: tapeml {ours * 1e3:.2f} ms, numpy {theirs * 1e3:.2f} ms "
          f"({theirs / ours:.1f}x)")


def _median_seconds(fn, repeat: int = 7, number: int = 10) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - started) / number)
    return float(np.median(times))


if __name__ == "__main__":
    main()
