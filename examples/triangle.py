"""Compositional training: a direct map h: E -> D and a composition g . f (f: E -> S, g: S -> D)
trained until they agree, their disagreement 1/2 ||h(x) - g(f(x))||^2 being the loss.

    python examples/triangle.py [--steps N]

`tapeml.triangle_gradients` returns the loss and the gradient of each map's parameters; it is
built from `value_and_grad`, with no special knowledge of the triangle in the autodiff core.
"""

from __future__ import annotations

import argparse

import numpy as np

import tapeml
from tapeml import nn


def left(params, x):  # f: E -> S, a tanh layer
    return tapeml.tanh(nn.linear(params, x))


def train(steps: int = 60, learning_rate: float = 0.02, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((32, 4))  # points of E
    params = (nn.linear_init(rng, 4, 3, np.float64),   # h: E -> D
              nn.linear_init(rng, 4, 6, np.float64),   # f: E -> S
              nn.linear_init(rng, 6, 3, np.float64))   # g: S -> D
    losses = []
    for _ in range(steps):
        loss, grads = tapeml.triangle_gradients(direct=nn.linear, left=left, right=nn.linear,
                                                x=x, params=params)
        losses.append(float(loss))
        params = tapeml.tree_map(lambda p, g: p - learning_rate * g, params, grads)
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    steps = parser.parse_args().steps
    losses = train(steps)
    for step in sorted({0, 1, 2, 5, 10, 20, 40, steps - 1} & set(range(steps))):
        print(f"step {step:3d}   disagreement {losses[step]:.6f}")
    print(f"the disagreement fell {losses[0] / losses[-1]:.0f}x in {steps} steps")


if __name__ == "__main__":
    main()
