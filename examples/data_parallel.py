"""The demo's CNN trained data-parallel on MPI ranks: each rank computes the gradient of its share
of every global batch, the ranks average them (one Allreduce), and every rank applies the same
Adam update, so the parameters stay identical everywhere.

    mpiexec -n 2 .venv/bin/python examples/data_parallel.py [--epochs N] [--batch 32]
    .venv/bin/python examples/data_parallel.py          # one rank: the same training

Only rank 0 prints. `--steps N --save DIR` stops after N steps and writes each rank's parameters
to DIR/rank<r>.npz (what tests/test_distributed.py compares); `--time N` times N steps.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import tapeml
from tapeml import distributed, optim
from tapeml.tracing.pytree import flatten

sys.path.insert(0, str(Path(__file__).resolve().parent))
import demo  # noqa: E402  (the CNN, its loss, the digits, the learning-rate schedule)


def gradients(params, x, y):
    return tapeml.value_and_grad(demo.loss)(params, x, y)


def update(params, grads, state, learning_rate):
    return optim.adam(learning_rate).update(params, grads, state)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--batch", type=int, default=32, help="the global batch (all ranks)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    parser.add_argument("--save", type=Path, default=None, help="write each rank's parameters")
    parser.add_argument("--time", type=int, default=None, metavar="N",
                        help="time N steps (after one to compile) and print ms per step")
    args = parser.parse_args(argv)

    world = distributed.init()
    say = print if world.is_root else (lambda *a, **k: None)
    if args.batch % world.size:
        parser.error(f"--batch {args.batch} does not split over {world.size} ranks")
    x_train, x_test, y_train, y_test = demo.digits(args.seed)
    rng = np.random.default_rng(args.seed)  # the same on every rank: the same batches
    params = distributed.broadcast(demo.init(rng), world)
    state = optim.adam(demo.LEARNING_RATE).init(params)
    grads_of = distributed.data_parallel(gradients, batch_argnums=(1, 2), world=world)
    step = tapeml.jit(update)

    if args.time:
        x, y = x_train[:args.batch], y_train[:args.batch]
        rate = np.float32(demo.LEARNING_RATE)
        grads_of(params, x, y)  # compiles
        world.comm.Barrier()
        started = time.perf_counter()
        for _ in range(args.time):
            loss, grads = grads_of(params, x, y)
            params, state = step(params, grads, state, rate)
        world.comm.Barrier()
        per_step = (time.perf_counter() - started) / args.time
        reduce = timed_all_reduce(grads, world, args.time)
        say(f"ranks {world.size} threads {world.threads} batch {args.batch}: "
            f"{per_step * 1e3:.3f} ms per step, all-reduce {reduce * 1e3:.3f} ms")
        return

    say(f"digits on {world.size} rank(s): global batch {args.batch} "
        f"({args.batch // world.size} per rank), Adam with a cosine learning rate")
    steps_per_epoch = len(x_train) // args.batch
    total = args.epochs * steps_per_epoch
    done = 0
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x_train))
        losses = []
        for i in range(steps_per_epoch):
            rows = order[i * args.batch:(i + 1) * args.batch]
            loss, grads = grads_of(params, x_train[rows], y_train[rows])
            params, state = step(params, grads, state, demo.schedule(done, total))
            losses.append(float(loss))
            done += 1
            if args.steps is not None and done == args.steps:
                break
        accuracy = float(np.mean(demo.logits(params, x_test).argmax(axis=1)
                                 == y_test.argmax(axis=1)))
        say(f"  epoch {epoch:>2}/{args.epochs}: loss {np.mean(losses):.4f}, "
            f"test accuracy {accuracy:.1%}")
        if args.steps is not None and done == args.steps:
            break
    if args.save is not None:
        args.save.mkdir(parents=True, exist_ok=True)
        leaves = flatten(params)[0]
        np.savez(args.save / f"rank{world.rank}.npz", *[np.asarray(p) for p in leaves])


def timed_all_reduce(grads, world, repeat: int) -> float:
    """Seconds per all-reduce of these gradients (what each step adds to the compiled one)."""
    world.comm.Barrier()
    started = time.perf_counter()
    for _ in range(repeat):
        distributed.all_reduce_mean(grads, world)
    return (time.perf_counter() - started) / repeat


if __name__ == "__main__":
    main()
