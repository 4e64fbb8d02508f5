"""`make demo`: a Python function becomes a tape program, then machine code.

An MLP loss is traced once into the tape dialect, printed, summarised, run on xDSL's interpreter
and checked against the same function run eagerly; the printed program is parsed back; its
gradient program is compiled for this CPU and checked against the interpreter; and a shape
mistake is reported at the user's line. (The CNN-on-digits training demo comes with the fast
CPU kernels.)
"""

from __future__ import annotations

import time

import numpy as np

import tapeml
from tapeml import nn


def loss(params, x, y):
    logits = nn.mlp(params, x, activation=tapeml.tanh)
    return nn.softmax_cross_entropy(logits, y)


def main() -> None:
    rng = np.random.default_rng(0)
    params = nn.mlp_init(rng, [4, 8, 3])
    x = rng.standard_normal((16, 4)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 16)]

    start = time.perf_counter()
    program = tapeml.trace(loss, params, x, y)
    traced = time.perf_counter() - start
    print(f"== tapeml.trace(loss, params, x, y) in {traced * 1e3:.1f} ms:\n")
    print(program)
    print()
    print(program.summary())

    start = time.perf_counter()
    value = program(params, x, y)
    ran = time.perf_counter() - start
    eager = loss(params, x, y)
    print(f"\n== program(params, x, y) on xDSL's interpreter in {ran * 1e3:.1f} ms: {value!r}")
    print(f"   the same function run eagerly:                     {eager!r} "
          f"({'bit-identical' if value == eager else 'DIFFERENT'})")

    again = tapeml.Program.parse(str(program))
    print(f"\n== parsed back from its text: {again!r} -> {again(params, x, y)!r}")

    start = time.perf_counter()
    step = tapeml.jit(tapeml.value_and_grad(loss))
    value, grads = step(params, x, y)
    compiled = time.perf_counter() - start
    expected_value, expected_grads = tapeml.value_and_grad(loss)(params, x, y)
    error = max(float(np.abs(a - b).max()) for a, b in zip(
        tapeml.frontend.pytree.flatten(grads)[0],
        tapeml.frontend.pytree.flatten(expected_grads)[0], strict=True))
    start = time.perf_counter()
    for _ in range(100):
        step(params, x, y)
    per_step = (time.perf_counter() - start) / 100
    stages = step.lower(params, x, y)
    print(f"\n== tapeml.jit(tapeml.value_and_grad(loss)): traced, differentiated, fused, lowered "
          f"and compiled in {compiled:.2f} s")
    print(f"   stages: {', '.join(stages)}; {stages['assembly'].count(chr(10))} lines of assembly")
    print(f"   value {value!r} (interpreter: {expected_value!r}), max |gradient difference| "
          f"{error:.1e}, {per_step * 1e6:.0f} us per step")

    print("\n== a shape mistake, reported at the line that made it:")
    try:
        tapeml.trace(loss, params, x[:, :3], y)
    except tapeml.ShapeError as error:
        print(f"ShapeError: {error}")


if __name__ == "__main__":
    main()
