"""A program that keeps the examples of its batch apart (tapeml/transforms/per_example.py),
run on several threads as pieces of its batch side by side: one program compiled for a
piece (N / pieces examples, single-threaded), the threads claiming pieces until none is left,
each piece's inputs and outputs consecutive slices of the whole's. Every op of a piece runs
on one core from its caches, and the threads wait for each other once, at the end, where the
whole program's ops would each split their work over the threads and wait at every op
(ResNet-50 at batch 8 on two threads: 456-541 -> 387-424 ms). Each example's results are the
whole program's bits: every op computes an example the same way at any batch size.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from tapeml.codegen.arguments import Argument, checked
from tapeml.codegen.outputs import Outputs
from tapeml.transforms.per_example import Split

PER_THREAD = 2
"""Pieces per thread where the batch has that many and the weights are small: each thread
claims the next piece when it is done with one, so a thread on a busier core takes fewer
(squeezenet at batch 8 on two threads, the median call in alternating runs: 41-62 ms as two
pieces, 32-37 as four, 37-38 as eight)."""

PER_THREAD_WEIGHTS = 16 << 20
"""...: a program whose constants take more than this runs one piece per thread, for every
piece reads all of them (ResNet-50's 100 MB: 387-424 ms at batch 8 on two threads as two
pieces, 430-459 as four; squeezenet's 5 MB)."""

ONE_THREAD_BYTES = 8 << 20
"""On one thread, a program whose largest value (an activation of the whole batch) takes more
than this runs as pieces of its batch one after another, as small as SPLIT_FLOPS (and, for
large weights, VALUE_TRAFFIC) lets them be: each piece's activations stay in the core's
caches from one op to the next, where the whole batch's go out to memory and back
(squeezenet at batch 8, one core of an AVX-512 Xeon: its first convolution's output is 25 MB;
as eight pieces 55.8-56.2 ms, whole 58.4-61.4 ms, eight batches of one 56 ms)."""

VALUE_TRAFFIC = 4
"""...: where the weights are large (PER_THREAD_WEIGHTS), each piece past the first reads them
all from memory once more, so the pieces are at most so many that this many times the
weights' bytes read again stays within the bytes of the whole program's values (the traffic
the pieces keep in the caches, or some of it). ResNet-50 at batch 8 (100 MB of weights, its
values 50 times as large), one core: as eight pieces 501-527 ms, as four 536-538, whole
538-558 (alternating processes); one large matmul and its relu (1024 x 2048 @ 2048 x 2560,
21 MB of weights, values 1.5 times as large) stays whole (as four pieces it ran 1% slower)."""


SPLIT_FLOPS = 16_000_000
"""A piece does at least this many FLOPs of products (matmuls, convolutions), or the program
is not split: handing a piece to another thread costs tens of microseconds."""


_workers: tuple[int, ThreadPoolExecutor] | None = None  # (its threads, the pool)
_workers_lock = threading.Lock()


def workers(count: int) -> ThreadPoolExecutor:
    """The threads every split program hands its pieces to (but the first, which its caller
    runs): one pool for the process, with `count` threads at least."""
    global _workers
    with _workers_lock:
        if _workers is None or _workers[0] < count:
            _workers = (count, ThreadPoolExecutor(count, thread_name_prefix="tapeml-piece"))
        return _workers[1]


class SplitProgram:
    """`split.pieces` calls of `piece` (a compiled program: `Native`) on consecutive slices
    of the batch, at once; called as the whole program is, with its arguments."""

    def __init__(self, piece: Any, split: Split, threads: int, name: str,
                 inputs: list[Argument], outputs: list[Argument]) -> None:
        self.piece, self.split, self.threads = piece, split, threads
        self.name, self.inputs, self.outputs = name, inputs, outputs
        self.origin = piece.origin
        self._outputs = Outputs([(a.shape, a.dtype) for a in outputs])
        self._workers = workers(threads - 1) if threads > 1 else None

    def describe(self) -> str:
        size = self.split.n // self.split.pieces
        where = (f"on {self.threads} threads side by side" if self._workers is not None
                 else "one after another, each from the caches")
        return (f"run as {self.split.pieces} pieces of batch {size} {where} (the examples are "
                "kept apart)")

    def __call__(self, *leaves: Any) -> tuple[np.ndarray, ...]:
        inputs, name = self.inputs, self.name
        if len(leaves) != len(inputs):
            raise TypeError(f"@{name} takes {len(inputs)} arrays, got {len(leaves)}")
        buffers = [checked(leaf, arg, name) for leaf, arg in zip(leaves, inputs, strict=True)]
        outputs = self._outputs.new()
        pieces = self.split.pieces

        def piece(i: int) -> None:
            def part(array: np.ndarray) -> np.ndarray:  # rows of example i*size on
                rows = array.shape[0] // pieces
                return array[i * rows:(i + 1) * rows]

            self.piece.run_into([part(b) if batched else b for b, batched
                                 in zip(buffers, self.split.batched, strict=True)],
                                tuple(part(o) for o in outputs))

        claims = iter(range(pieces))  # (next() on it is atomic: each piece runs once)

        def run() -> None:  # pieces until none is left: a thread on a busier core takes fewer
            for i in claims:
                piece(i)

        others = [] if self._workers is None else [
            self._workers.submit(run) for _ in range(1, self.threads)]
        run()
        for other in others:
            other.result()
        return outputs
