"""Train a small MLP on two interleaved half-moons with a compiled training step, then draw the
decision surface it learned.

    .venv/bin/python examples/mlp_moons.py [--steps N] [--out PATH]

The model is a 2-16-16-1 MLP with tanh hidden layers whose output is the logit of class 1; the
loss is binary cross-entropy, written with tapeml ops. One `tapeml.jit` step holds
`value_and_grad(loss)` and Adam's update (`tapeml.optim`): traced once and compiled for this CPU
as one program, it takes the parameters and Adam's state and returns the new ones and the loss.
The trained model is then evaluated by a compiled forward pass over a grid: the decision surface
is saved as a PNG (default `mlp_moons.png`) and printed as text ('.' class 0, '#' class 1,
'o'/'x' some training points).
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.datasets import make_moons

import tapeml
from tapeml import nn, optim

WIDTH, HEIGHT = 60, 24  # the text surface, in characters


def forward(params, x):
    """The logit of class 1 for each row of x: shape (n, 1)."""
    return nn.mlp(params, x, activation=tapeml.tanh)


def loss(params, x, y):
    """Binary cross-entropy of sigmoid(logit) against labels y in {0, 1}, in the stable form
    max(z, 0) - y*z + log(1 + exp(-|z|)) (no log(0) when the sigmoid saturates)."""
    z = forward(params, x)
    per_point = tapeml.maximum(z, 0.0) - y * z + tapeml.log(1.0 + tapeml.exp(-tapeml.abs(z)))
    return tapeml.mean(per_point)


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """200 points of the two moons (noise 0.15) as float32 (n, 2), labels as float32 (n, 1)."""
    x, y = make_moons(n_samples=200, noise=0.15, random_state=seed)
    return x.astype(np.float32), y.astype(np.float32)[:, None]


def train(x: np.ndarray, y: np.ndarray, steps: int, seed: int = 0,
          learning_rate: float = 0.01) -> tuple[dict, list[float]]:
    """Full-batch Adam for `steps` steps; returns the parameters and the loss before each step."""
    params = nn.mlp_init(np.random.default_rng(seed), [2, 16, 16, 1])
    opt = optim.adam(learning_rate)
    state = opt.init(params)
    @tapeml.jit  # loss, gradient and Adam's update: one program, compiled on the first call
    def step(params, state, x, y):
        value, grads = tapeml.value_and_grad(loss)(params, x, y)
        params, state = opt.update(params, grads, state)
        return params, state, value

    losses = []
    for _ in range(steps):
        params, state, value = step(params, state, x, y)
        losses.append(float(value))
    return params, losses


def grid(x: np.ndarray, nx: int, ny: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An ny-by-nx grid of points covering the data with a margin: xs (nx,), ys (ny,), and the
    points (ny*nx, 2) row by row, ys increasing."""
    low, high = x.min(axis=0) - 0.5, x.max(axis=0) + 0.5
    xs = np.linspace(low[0], high[0], nx, dtype=np.float32)
    ys = np.linspace(low[1], high[1], ny, dtype=np.float32)
    gx, gy = np.meshgrid(xs, ys)
    return xs, ys, np.stack([gx.ravel(), gy.ravel()], axis=1)


def ascii_surface(predict, params, x: np.ndarray, y: np.ndarray) -> list[str]:
    """HEIGHT lines of WIDTH characters, top row = largest y: '.' / '#' where the model says
    class 0 / 1, and every 4th training point as 'o' (class 0) or 'x' (class 1)."""
    xs, ys, points = grid(x, WIDTH, HEIGHT)
    logits = predict(params, points).reshape(HEIGHT, WIDTH)
    cells = np.where(logits > 0, "#", ".")
    for (px, py), label in zip(x[::4], y[::4, 0], strict=True):
        col = int(np.abs(xs - px).argmin())
        row = int(np.abs(ys - py).argmin())
        cells[row, col] = "x" if label else "o"
    return ["".join(row) for row in cells[::-1]]


def save_png(path: str, predict, params, x: np.ndarray, y: np.ndarray, accuracy: float) -> None:
    import matplotlib

    matplotlib.use("Agg")  # draw to a file; no display needed
    import matplotlib.pyplot as plt

    xs, ys, points = grid(x, 200, 200)
    probability = 1 / (1 + np.exp(-predict(params, points).reshape(len(ys), len(xs))))
    fig, ax = plt.subplots(figsize=(6, 4.5))
    surface = ax.contourf(xs, ys, probability, levels=np.linspace(0, 1, 11), cmap="RdBu_r",
                          alpha=0.5)
    ax.contour(xs, ys, probability, levels=[0.5], colors="k", linewidths=1)
    ax.scatter(x[:, 0], x[:, 1], c=y[:, 0], cmap="RdBu_r", edgecolors="k", s=18)
    fig.colorbar(surface, ax=ax, label="P(class 1)")
    ax.set_title(f"2-16-16-1 MLP on two moons: training accuracy {accuracy:.1%}")
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=500, help="training steps (default 500)")
    parser.add_argument("--out", default="mlp_moons.png",
                        help="where to save the decision surface (default mlp_moons.png)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")

    x, y = data()
    params, losses = train(x, y, args.steps)
    for i in sorted({*range(0, args.steps, max(1, args.steps // 10)), args.steps - 1}):
        print(f"step {i:5d}   loss {losses[i]:.4f}")

    predict = tapeml.jit(forward)
    accuracy = float(np.mean((predict(params, x) > 0) == (y > 0.5)))
    print(f"training accuracy after {args.steps} steps: {accuracy:.1%}\n")
    print("\n".join(ascii_surface(predict, params, x, y)))
    save_png(args.out, predict, params, x, y, accuracy)
    print(f"\ndecision surface saved to {args.out}")


if __name__ == "__main__":
    main()
