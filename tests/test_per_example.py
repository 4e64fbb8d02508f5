"""A program that keeps the examples of its batch apart runs on several threads as pieces of
its batch side by side, and on one thread as pieces one after another where its values would
leave the caches (tapeml/transforms/per_example.py, tapeml/codegen/split.py): which programs
split and which must not, and that a split program gives the whole program's bits."""

from __future__ import annotations

import numpy as np
import pytest
from bits import assert_same_bits

import tapeml
from tapeml import nn, ops
from tapeml.codegen import split as split_module
from tapeml.codegen.split import SplitProgram
from tapeml.transforms import per_example
from tapeml.transforms.per_example import split

RNG = np.random.default_rng(11)
W1 = RNG.standard_normal((32, 3, 3, 3)).astype(np.float32)
B1 = RNG.standard_normal((32, 1, 1)).astype(np.float32)
W2 = RNG.standard_normal((32, 32, 3, 3)).astype(np.float32) / 9
DENSE = RNG.standard_normal((32 * 16 * 16, 10)).astype(np.float32) / 64
EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38, -3e38, 1e-45], np.float32)


def cnn(x):
    """Conv + bias + relu, a pool, a strided conv, flatten, a dense layer, a softmax."""
    y = nn.max_pool2d(ops.relu(nn.conv2d(x, W1, padding=1) + B1), 2, 2)
    y = ops.maximum(nn.conv2d(y, W2, padding=1, stride=2), 0.0)
    z = ops.reshape(y, (y.shape[0], -1)) @ DENSE
    e = ops.exp(z - ops.max(z, axis=1, keepdims=True))
    return e / ops.sum(e, axis=1, keepdims=True)


def mlp(w, b, x):
    """Weights as arguments (not batched: passed whole to each piece)."""
    return ops.tanh(x @ w + b)[:, 1:]


def _images(n):
    x = RNG.standard_normal((n, 3, 64, 64)).astype(np.float32)
    flat = x.reshape(-1)
    flat[RNG.choice(flat.size, 40, replace=False)] = RNG.choice(EDGES, 40)
    return x


@pytest.mark.parametrize("threads,batch,pieces", [("2", 8, 4), ("2", 6, 2), ("3", 12, 6),
                                                  ("3", 9, 3), ("2", 4, 2)])
def test_a_cnn_splits_into_pieces_with_the_whole_programs_bits(monkeypatch, threads, batch,
                                                               pieces):
    """Each example the bits of the program run whole (on one thread), NaN and infinities in
    the images; two pieces per thread where the batch has them, else one (and one where two
    would be too small: 12 MFLOP an image, SPLIT_FLOPS 16)."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    x = _images(batch)
    step = tapeml.jit(cnn)
    got = step(x)
    ((_, program),) = step.cache.values()
    assert isinstance(program, SplitProgram) and program.split.pieces == pieces
    assert f"run as {pieces} pieces of batch {batch // pieces} on {threads} threads" in \
        step.explain()
    monkeypatch.setenv("TAPEML_NUM_THREADS", "1")
    whole = tapeml.jit(cnn)(x)
    assert_same_bits(got, whole)
    for _ in range(3):  # again: the pieces' arenas and packed weights reused
        assert_same_bits(step(x), whole)
    clean = RNG.standard_normal(x.shape).astype(np.float32)
    np.testing.assert_allclose(step(clean), tapeml.jit(cnn, backend="interp")(clean),
                               rtol=1e-4, atol=1e-6)


def test_weights_passed_as_arguments_go_whole_to_each_piece(monkeypatch):
    monkeypatch.setenv("TAPEML_NUM_THREADS", "2")
    w = RNG.standard_normal((300, 400)).astype(np.float32) / 20
    b = RNG.standard_normal(400).astype(np.float32)
    x = RNG.standard_normal((256, 300)).astype(np.float32)
    step = tapeml.jit(mlp)
    got = step(w, b, x)
    ((_, program),) = step.cache.values()
    assert isinstance(program, SplitProgram)
    assert program.split.batched == (False, False, True)
    monkeypatch.setenv("TAPEML_NUM_THREADS", "1")
    assert_same_bits(got, tapeml.jit(mlp)(w, b, x))
    with pytest.raises(ValueError, match="argument `x`"):  # checked whole, before any piece
        program(w, b, x[:100])
    with pytest.raises(TypeError, match="takes 3 arrays, got 2"):
        program(w, b)


def _splits(f, *shapes, pieces=2):
    program = tapeml.trace(f, *[np.zeros(*s) if isinstance(s[0], tuple)
                                else np.zeros(s, np.float32) for s in shapes])
    return split(program.module, pieces)


def test_the_rewritten_program_is_the_whole_at_a_smaller_batch():
    """A slice of every example stops at the piece's; a reshape keeps rows per example."""
    s = _splits(lambda x: ops.reshape(x[:, 2:], (-1, 3)) * 2.0, (8, 5, 3))
    assert (s.n, s.pieces) == (8, 2)
    text = str(s.module)
    assert "tensor<4x5x3xf32>" in text and "tensor<12x3xf32>" in text
    assert "tensor<8x" not in text


@pytest.mark.parametrize("name,f,shapes", [
    ("a mean over the batch", lambda x: ops.sum(x, axis=0) / 8.0, [(8, 4)]),
    ("a matmul contracting the batch", lambda x: x.T @ x, [(8, 4)]),
    ("a permute moving the batch", lambda x: ops.transpose(x) * 2.0, [(8, 4)]),
    ("a slice of some examples", lambda x: x[2:] * 2.0, [(8, 4)]),
    ("a concat along the batch", lambda x: ops.concatenate([x, x], axis=0), [(8, 4)]),
    ("a reshape across examples", lambda x: ops.reshape(x, (4, 8)), [(8, 4)]),
    ("a result the same for every example", lambda x: (x * 2.0, ops.sum(x)), [(8, 4)]),
    ("rows of a constant paired with the batch",
     lambda x: x + np.arange(8, dtype=np.float32)[:, None], [(8, 4)]),
    ("an odd batch on two threads", lambda x: x * 2.0, [(7, 4)]),
    ("windows along the batch", lambda x: ops.unfold(x, (2, 2)), [(8, 4)]),
    ("a fold into the batch", lambda x: ops.fold(x, (9, 4), (2, 2)), [(8, 3, 2, 2)]),
    ("a gather", lambda t, i: ops.take(t, i, axis=0), [(8, 4), ((8,), np.int64)]),
    ("a training step", tapeml.grad(lambda w, x: ops.sum(ops.tanh(x @ w))), [(4, 4), (8, 4)]),
])
def test_what_mixes_examples_does_not_split(name, f, shapes):
    s = _splits(f, *shapes)
    assert s is None, name


@pytest.mark.parametrize("f", [
    lambda x: ops.sum(x, axis=1) / 4.0,
    lambda x: x @ np.ones((4, 3), np.float32),
    lambda x: ops.transpose(ops.reshape(x, (8, 2, 2)), (0, 2, 1)),
    lambda x: x[:, 1:3] * 2.0,
    lambda x: ops.concatenate([x, x], axis=1),
    lambda x: ops.reshape(x, (16, 2)) + np.arange(2, dtype=np.float32),
    lambda x: (x * 2.0, ops.max(x, axis=1)),
    lambda x: ops.unfold(x, (2,)),
])
def test_what_keeps_examples_apart_splits(f):
    """The twins of the cases above that keep the examples apart."""
    s = _splits(f, (8, 4))
    assert s is not None and (s.n, s.pieces) == (8, 2)


def test_a_batch_the_threads_do_not_divide_is_not_split():
    """Fewer pieces than threads would leave a thread idle where the whole program uses all."""
    assert _splits(lambda x: x * 2.0, (6, 4), pieces=4) is None
    assert _splits(lambda x: x * 2.0, (0, 4)) is None  # an empty batch, and one example
    assert _splits(lambda x: x * 2.0, (1, 4)) is None
    assert _splits(lambda x: x * 2.0, (8, 4), pieces=4).pieces == 4


def test_large_weights_go_one_piece_per_thread(monkeypatch):
    """Every piece reads all of a program's constants: past PER_THREAD_WEIGHTS, one piece per
    thread (two pieces), where small weights would take two per thread (four)."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", "2")
    x = RNG.standard_normal((64, 2048)).astype(np.float32)
    for columns, pieces in ((2560, 2), (256, 4)):  # 21 MB of weights; 2 MB
        w = RNG.standard_normal((2048, columns)).astype(np.float32)
        step = tapeml.jit(lambda x, w=w: ops.relu(x @ w))
        step(x)
        ((_, program),) = step.cache.values()
        assert program.split.pieces == pieces


def test_a_small_program_is_not_split(monkeypatch):
    """Below SPLIT_FLOPS of products per piece the handoff would cost more than it saves."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", "2")
    step = tapeml.jit(lambda x: ops.tanh(x) * 2.0)
    step(RNG.standard_normal((64, 64)).astype(np.float32))
    ((_, program),) = step.cache.values()
    assert not isinstance(program, SplitProgram)



def _run(f, *args):
    """f jitted and called on args: its result and the program the backend made of it."""
    step = tapeml.jit(f)
    got = step(*args)
    ((_, program),) = step.cache.values()
    return step, got, program


def test_on_one_thread_values_that_leave_the_caches_run_in_small_pieces(monkeypatch):
    """On one thread, a batch whose largest value passes ONE_THREAD_BYTES (24 images of
    32 x 64 x 64: 12.6 MB) runs as the smallest pieces SPLIT_FLOPS allows (12 MFLOP an image:
    two), one after another, with the whole program's bits; a batch of 12 (6.3 MB) stays
    whole, and so does one matmul against large weights (each piece would read them all
    again, and its values are not four times as large: VALUE_TRAFFIC)."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", "1")
    x = _images(24)
    step, got, program = _run(cnn, x)
    assert isinstance(program, SplitProgram) and program.split.pieces == 12
    assert "run as 12 pieces of batch 2 one after another" in step.explain()
    monkeypatch.setattr(split_module, "ONE_THREAD_BYTES", 1 << 40)
    _, whole, program = _run(cnn, x)
    assert_same_bits(got, whole)
    assert not isinstance(program, SplitProgram)
    monkeypatch.undo()
    monkeypatch.setenv("TAPEML_NUM_THREADS", "1")
    assert not isinstance(_run(cnn, _images(12))[2], SplitProgram)
    w = RNG.standard_normal((2048, 2560)).astype(np.float32)  # 21 MB
    _, _, program = _run(lambda x: ops.relu(x @ w) * 2.0,
                         RNG.standard_normal((1024, 2048)).astype(np.float32))  # a 10 MB result
    assert not isinstance(program, SplitProgram)


def test_on_one_thread_large_weights_bound_the_pieces_by_the_values(monkeypatch):
    """Large weights (past PER_THREAD_WEIGHTS) are read again by every piece after the first:
    on one thread the pieces are at most 1 + (the values' bytes) / (VALUE_TRAFFIC times the
    weights' bytes), still the smallest SPLIT_FLOPS allows within that, with the whole
    program's bits; values no larger than that many weights keep the program whole."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", "1")
    monkeypatch.setattr(split_module, "PER_THREAD_WEIGHTS", 0)  # every weight counts large
    x = _images(24)
    _, whole, _ = _run(cnn, x)
    weights = per_example.constant_bytes
    for times, pieces in ((1000, 12), (2, 3), (0, None)):
        monkeypatch.setattr(per_example, "value_bytes",
                            lambda m, t=times: t * split_module.VALUE_TRAFFIC * weights(m))
        _, got, program = _run(cnn, x)
        if pieces is None:
            assert not isinstance(program, SplitProgram)
        else:
            assert isinstance(program, SplitProgram) and program.split.pieces == pieces
        assert_same_bits(got, whole)


def test_a_piece_is_never_split_again(monkeypatch):
    """On two threads, four pieces of 18 images (9.4 MB values each, past ONE_THREAD_BYTES):
    each piece is one program, compiled whole, not pieces of its own; the whole program's
    bits."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", "2")
    x = _images(72)
    _, got, program = _run(cnn, x)
    assert isinstance(program, SplitProgram) and program.split.pieces == 4
    assert not isinstance(program.piece, SplitProgram)
    monkeypatch.setenv("TAPEML_NUM_THREADS", "1")
    monkeypatch.setattr(split_module, "ONE_THREAD_BYTES", 1 << 40)
    assert_same_bits(got, _run(cnn, x)[1])
