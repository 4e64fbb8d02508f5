"""tapeml.distributed: data-parallel training on MPI ranks. The demo's CNN trained on 2 ranks
(`mpiexec -n 2`, the mpich wheel's) holds bit-identical parameters on both ranks after N steps,
equal to one process's on the full batch up to the order of summation; the collectives' own
contracts (one Allreduce per dtype, shards, broadcast) in-process on a recording communicator
and on the real world of one rank."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py", reason="MPI is in the test extra (make test installs it)")

from mpi4py import MPI  # noqa: E402

import tapeml  # noqa: E402
from tapeml import distributed, ops  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "data_parallel.py"
MPIEXEC = Path(sys.executable).with_name("mpiexec")


def _run(command: list[str], threads: int | None = 1) -> str:
    """The command's output; TAPEML_NUM_THREADS=threads, or unset for None."""
    env = {k: v for k, v in os.environ.items() if k != "TAPEML_NUM_THREADS"}
    if threads is not None:
        env["TAPEML_NUM_THREADS"] = str(threads)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec beside this Python (the mpich wheel)")
def test_two_ranks_hold_the_same_parameters_as_one_process_on_the_full_batch(tmp_path):
    steps = 12
    two = _run([str(MPIEXEC), "-n", "2", sys.executable, str(EXAMPLE), "--steps", str(steps),
                "--save", str(tmp_path / "two")])
    one = _run([sys.executable, str(EXAMPLE), "--steps", str(steps), "--save",
                str(tmp_path / "one")])
    assert "on 2 rank(s)" in two and two.count("epoch") == 1  # rank 0 alone prints
    assert "on 1 rank(s)" in one
    rank0, rank1 = (np.load(tmp_path / "two" / f"rank{r}.npz") for r in (0, 1))
    alone = np.load(tmp_path / "one" / "rank0.npz")
    assert sorted(rank0) == sorted(rank1) == sorted(alone) and len(alone) == 6
    for name in alone:
        a, b = rank0[name], rank1[name]
        assert a.tobytes() == b.tobytes(), f"{name} differs between the ranks"
        # the same step on the full batch, each gradient summed in another order
        np.testing.assert_allclose(a, alone[name], rtol=1e-4, atol=2e-6, err_msg=name)
        assert not np.array_equal(a, _initial(name)), "the parameters moved"


def _initial(name: str) -> np.ndarray:
    sys.path.insert(0, str(ROOT / "examples"))
    import demo  # noqa: PLC0415

    leaves = tapeml.tracing.pytree.flatten(demo.init(np.random.default_rng(0)))[0]
    return np.asarray(leaves[int(name.removeprefix("arr_"))])


@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec beside this Python (the mpich wheel)")
def test_the_collectives_on_two_ranks():
    script = """
import numpy as np
from tapeml import distributed
world = distributed.init()
r = world.rank
tree = {"a": np.full((2, 3), r + 1.0, np.float32), "b": [np.arange(4.0) * (r + 1)]}
mean = distributed.all_reduce_mean(tree, world)
assert (mean["a"] == 1.5).all() and mean["a"].dtype == np.float32
assert (mean["b"][0] == np.arange(4.0) * 1.5).all()
same = distributed.broadcast({"w": np.full(3, float(r))}, world)
assert (same["w"] == 0.0).all()
assert distributed.shard(np.arange(8), world).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]][r]
for collective in (distributed.all_reduce_mean, distributed.broadcast):
    try:  # unequal buffers would abort MPI: every rank raises, and the ranks go on
        collective({"w": np.zeros(3 + r, np.float32)}, world)
        raise AssertionError("no error")
    except ValueError as e:
        assert "rank 0 has w float32 (3,), rank 1 w float32 (4,)" in str(e), e
try:  # an integer leaf on one rank: it raised alone, and the other waited in the collective
    distributed.all_reduce_mean({"w": np.zeros(3, [np.float32, np.int32][r])}, world)
    raise AssertionError("no error")
except ValueError as e:
    assert "rank 0 has w float32 (3,), rank 1 w int32 (3,)" in str(e), e
lines = world.comm.gather(f"ok {r} {world.size} {world.threads}", root=0)
if world.is_root:
    print("\\n".join(lines))
"""
    out = _run([str(MPIEXEC), "-n", "2", sys.executable, "-c", script], threads=None)
    share = max(1, len(os.sched_getaffinity(0)) // 2)  # init's: the cores over the ranks
    assert out.split("\n")[:2] == [f"ok 0 2 {share}", f"ok 1 2 {share}"]


class RecordingComm:
    """A communicator of `size` ranks whose every rank holds what this one does."""

    def __init__(self, size: int) -> None:
        self.size, self.calls = size, []

    def Allreduce(self, send, receive, op):  # noqa: N802 - MPI's name
        if op is MPI.MAX:  # (the agreement check's digests: every rank's the same)
            return
        self.calls.append(receive.size)
        receive *= self.size

    def Bcast(self, buffer, root):  # noqa: N802
        self.calls.append(buffer.size)

    def allgather(self, mine):
        return [mine] * self.size


class OtherRankComm(RecordingComm):
    """Two ranks, the other one passing `theirs` to the collectives' agreement check."""

    def __init__(self, theirs) -> None:
        super().__init__(2)
        self.theirs = theirs

    def Allreduce(self, send, receive, op):  # noqa: N802 - MPI's name
        if op is MPI.MAX:  # the other rank's digest is another: the largest is not ours
            receive += 1
            return
        super().Allreduce(send, receive, op)

    def allgather(self, mine):
        return [mine, self.theirs]


def test_all_reduce_mean_is_one_allreduce_per_dtype_on_one_buffer():
    comm = RecordingComm(4)
    world = distributed.World(comm, 1, 4, 1)
    tree = {"w": [np.ones((3, 2), np.float32) * i for i in range(5)],
            "b": (np.ones(7), np.ones(2)), "s": np.float32(2.0)}
    mean = distributed.all_reduce_mean(tree, world)
    assert sorted(comm.calls) == [9, 31]  # f64: 7 + 2; f32: 5 * 6 + 1
    assert tapeml.tracing.pytree.flatten(mean)[1] == tapeml.tracing.pytree.flatten(tree)[1]
    for got, want in zip(tapeml.tracing.pytree.flatten(mean)[0],
                         tapeml.tracing.pytree.flatten(tree)[0], strict=True):
        assert got.dtype == np.asarray(want).dtype and np.array_equal(got, want)


def test_bad_input_is_a_clear_error():
    world = distributed.World(RecordingComm(3), 0, 3, 1)
    with pytest.raises(ValueError, match=r"shape \(8, 2\) does not split into 3 equal parts"):
        distributed.shard(np.zeros((8, 2)), world)
    with pytest.raises(TypeError, match="leaf 1 is a int64 array; only float arrays"):
        distributed.all_reduce_mean([np.zeros(2), np.zeros(2, np.int64)], world)


@pytest.mark.parametrize("theirs, said", [
    (("{'w': ...}", [("w", "<f4", (4,))]), "rank 0 has w float32 (3,), rank 1 w float32 (4,)"),
    (("{'w': ...}", [("w", "<f8", (3,))]), "rank 0 has w float32 (3,), rank 1 w float64 (3,)"),
    (("{'w': ..., 'x': ...}", [("w", "<f4", (3,)), ("x", "<f4", (3,))]),
     "rank 0 has {'w': ...}, rank 1 {'w': ..., 'x': ...}"),
    (("[...]", [("0", "<f4", (3,))]), "rank 0 has {'w': ...}, rank 1 [...]"),
])
def test_ranks_that_pass_different_trees_are_told_before_any_data_moves(theirs, said):
    world = distributed.World(comm := OtherRankComm(theirs), 0, 2, 1)
    for collective in (distributed.all_reduce_mean, distributed.broadcast):
        with pytest.raises(ValueError, match=f"distributed.{collective.__name__}: the ranks' "
                           "trees differ") as error:
            collective({"w": np.zeros(3, np.float32)}, world)
        assert said in str(error.value)
    assert comm.calls == []
    with pytest.raises(ValueError, match="root 2 is not a rank of 2"):
        distributed.broadcast({"w": np.zeros(3)}, world, root=2)


def test_on_one_rank_data_parallel_is_the_compiled_step(monkeypatch):
    monkeypatch.setenv("TAPEML_NUM_THREADS", "1")  # init sets it where it is not set
    world = distributed.init()
    assert (world.rank, world.size) == (0, 1)

    def step(w, x, y):
        return tapeml.value_and_grad(lambda w, x, y: ops.mean((x @ w - y) ** 2))(w, x, y)

    rng = np.random.default_rng(0)
    w, x, y = (rng.normal(size=s).astype(np.float32) for s in [(3, 2), (8, 3), (8, 2)])
    loss, grad = distributed.data_parallel(step, batch_argnums=(1, 2), world=world)(w, x, y)
    want_loss, want_grad = tapeml.jit(step)(w, x, y)
    assert loss == want_loss and np.array_equal(grad, want_grad)
