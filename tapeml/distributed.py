"""Data-parallel training over MPI ranks (mpi4py; the `distributed` extra installs it with the
`mpich` wheel, whose `mpiexec` starts the ranks):

    world = distributed.init()                      # this rank, of the MPI world
    params = distributed.broadcast(params)          # rank 0's, on every rank
    grads_of = distributed.data_parallel(value_and_grad_fn, batch_argnums=(1, 2))
    loss, grads = grads_of(params, x_global, y_global)   # every rank: the same averages
    params, state = update(params, grads, state)         # the same update everywhere

`data_parallel` shards the global batch by rank, runs the compiled step (`tapeml.jit`) on the
rank's shard, and averages its results across ranks with one `Allreduce` per dtype over a
contiguous buffer (`all_reduce_mean`), so every rank holds the same gradients and, updating
the same parameters with them, the same parameters. It wraps a compiled step; it never
reaches into the compiler. Run with `mpiexec -n 2 python train.py` (on several machines,
`mpiexec -hosts a,b -n 4 ...`: nothing else changes).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tapeml.frontend.jit import Jitted, jit
from tapeml.tracing.pytree import flatten, leaf_paths, unflatten


def _mpi() -> Any:
    try:
        from mpi4py import MPI
    except ImportError:
        raise ImportError("tapeml.distributed needs MPI: pip install 'tapeml[distributed]' "
                          "(mpi4py, and the mpich wheel with its mpiexec)") from None
    return MPI


@dataclass(frozen=True)
class World:
    """This process's place among the ranks: `rank` of `size`, on `comm`; its compiled code
    runs on `threads` threads."""

    comm: Any
    rank: int
    size: int
    threads: int

    @property
    def is_root(self) -> bool:
        """Rank 0: the one that logs and saves."""
        return self.rank == 0


def init(comm: Any = None) -> World:
    """The MPI world (or `comm`). Where TAPEML_NUM_THREADS is not set, each rank's compiled
    code takes its share of this machine's cores (the cores over the ranks on the machine),
    so two ranks on two cores do not run four threads."""
    MPI = _mpi()
    comm = MPI.COMM_WORLD if comm is None else comm
    if "TAPEML_NUM_THREADS" not in os.environ:
        local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
            os.cpu_count() or 1
        os.environ["TAPEML_NUM_THREADS"] = str(max(1, cores // local))
    return World(comm, comm.Get_rank(), comm.Get_size(), int(os.environ["TAPEML_NUM_THREADS"]))


def _world(world: World | None) -> World:
    return init() if world is None else world


def _floats(arrays: list[np.ndarray], what: str) -> None:
    """Only float arrays are averaged. Checked after the ranks agree on the layout (_agree),
    so that every rank raises: a rank raising alone left the others in the collective."""
    for i, a in enumerate(arrays):
        if a.dtype.kind != "f":
            raise TypeError(f"distributed.{what}: leaf {i} is a {a.dtype} array; only float "
                            "arrays are averaged")


def _agree(world: World, what: str, arrays: list[np.ndarray], treedef: Any) -> None:
    """Every rank passes the same structure, shapes and dtypes, or every rank raises a
    ValueError naming the first difference (a collective over buffers of unequal sizes would
    abort MPI or mix the ranks' data). Each rank's layout is a 62-bit digest (cached by
    layout), compared by one Allreduce (MAX) of (digest, -digest): 2 int64s, whatever the
    tree; only where they differ are the layouts gathered, to say how."""
    key = (treedef, tuple((a.dtype.str, a.shape) for a in arrays))
    digest = _DIGESTS.get(key)
    if digest is None:
        text = repr((str(treedef), key[1])).encode()
        digest = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 2
        if len(_DIGESTS) < 64:
            _DIGESTS[key] = digest
    seen = np.array([digest, -digest], np.int64)
    world.comm.Allreduce(_mpi().IN_PLACE, seen, op=_mpi().MAX)
    if seen.tolist() != [digest, -digest]:
        _disagree(world, what, arrays, treedef)


_DIGESTS: dict[Any, int] = {}


def _disagree(world: World, what: str, arrays: list[np.ndarray], treedef: Any) -> None:
    """The ValueError every rank raises where the ranks' layouts differ, naming the first
    difference between rank 0's and the first rank whose layout is another."""
    layout = [(path, a.dtype.str, a.shape) for path, a in zip(leaf_paths(treedef), arrays,
                                                              strict=True)]
    ranks = world.comm.allgather((str(treedef), layout))
    other = next((r for r, theirs in enumerate(ranks) if theirs != ranks[0]), None)
    if other is None:  # (the digests of two equal layouts differ: cannot be)
        return
    (tree0, layout0), (tree1, layout1) = ranks[0], ranks[other]
    if tree0 != tree1:
        said = f"rank 0 has {tree0}, rank {other} {tree1}"
    else:
        (path, dtype0, shape0), (_, dtype1, shape1) = next(
            (a, b) for a, b in zip(layout0, layout1, strict=True) if a != b)
        name = path or "its array"
        said = (f"rank 0 has {name} {np.dtype(dtype0)} {shape0}, rank {other} "
                f"{name} {np.dtype(dtype1)} {shape1}")
    raise ValueError(f"distributed.{what}: the ranks' trees differ (every rank passes the same "
                     f"structure, shapes and dtypes): {said}")


def all_reduce_mean(tree: Any, world: World | None = None) -> Any:
    """The mean over ranks of every leaf of `tree` (float arrays, the same structure and
    shapes on every rank): the leaves of one dtype packed into one contiguous buffer, one
    `Allreduce` (sum) on it, divided by the number of ranks, unpacked."""
    world = _world(world)
    leaves, treedef = flatten(tree)
    arrays = [np.asarray(leaf) for leaf in leaves]
    _agree(world, "all_reduce_mean", arrays, treedef)
    _floats(arrays, "all_reduce_mean")
    out: list[np.ndarray | None] = [None] * len(arrays)
    for dtype in sorted({a.dtype for a in arrays}, key=str):
        members = [i for i, a in enumerate(arrays) if a.dtype == dtype]
        buffer = np.concatenate([arrays[i].reshape(-1) for i in members]) if members else \
            np.empty(0, dtype)
        world.comm.Allreduce(_mpi().IN_PLACE, buffer, op=_mpi().SUM)
        buffer /= dtype.type(world.size)
        at = 0
        for i in members:
            size = arrays[i].size
            out[i] = buffer[at:at + size].reshape(arrays[i].shape)
            at += size
    return unflatten(treedef, out)


def broadcast(tree: Any, world: World | None = None, root: int = 0) -> Any:
    """Rank `root`'s `tree` on every rank (one `Bcast` per leaf): the same starting
    parameters everywhere."""
    world = _world(world)
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or \
            not 0 <= root < world.size:
        raise ValueError(f"distributed.broadcast: root {root!r} is not a rank of {world.size}")
    leaves, treedef = flatten(tree)
    arrays = [np.array(leaf, order="C") for leaf in leaves]
    _agree(world, "broadcast", arrays, treedef)
    out = []
    for array in arrays:
        world.comm.Bcast(array, root=root)
        out.append(array)
    return unflatten(treedef, out)


def shard(x: Any, world: World | None = None) -> np.ndarray:
    """This rank's rows of a global batch: the `rank`-th of `size` equal parts along axis 0."""
    world = _world(world)
    x = np.asarray(x)
    if x.ndim == 0 or x.shape[0] % world.size:
        raise ValueError(f"distributed.shard: a global batch of shape {x.shape} does not "
                         f"split into {world.size} equal parts along axis 0")
    n = x.shape[0] // world.size
    return x[world.rank * n:(world.rank + 1) * n]


def data_parallel(step: Callable, batch_argnums: int | Sequence[int] = 1,
                  world: World | None = None) -> Callable:
    """`step` on every rank's shard of a global batch, its results averaged over the ranks.

    `step(*args)` returns float arrays (a pytree: a loss and gradients, as
    `tapeml.value_and_grad` gives them) that are means over its batch; it is compiled with
    `tapeml.jit` unless it is already. The returned function takes the same arguments with
    the global batch at `batch_argnums` (every array leaf there split along axis 0 by
    `shard`), and returns on every rank the mean of the ranks' results: with equal shards,
    the step's value on the global batch, up to the order of summation."""
    world = _world(world)
    compiled = step if isinstance(step, Jitted) else jit(step)
    argnums = (batch_argnums,) if isinstance(batch_argnums, int) else tuple(batch_argnums)

    def parallel(*args: Any) -> Any:
        args = list(args)
        for i in argnums:
            leaves, treedef = flatten(args[i])
            args[i] = unflatten(treedef, [shard(leaf, world) for leaf in leaves])
        return all_reduce_mean(compiled(*args), world)

    parallel.__name__ = f"data_parallel({getattr(step, '__name__', 'step')})"
    return parallel
