"""examples/gpt.py at a small size: the loss falls on the standard library's text, the compiled
step equals the interpreter's on one batch, and generation runs (issue 17's bar)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import tapeml

sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
import gpt  # noqa: E402


def test_the_corpus_is_the_standard_library_split_by_file():
    train, held, alphabet = gpt.corpus(limit_bytes=200_000)
    assert len(train) == 200_000 and 0 < len(held) <= 200_000 // 9
    assert len(alphabet) == max(train.max(), held.max()) + 1 and bytes(alphabet[:1]) <= b"\n"
    files = gpt.stdlib_files()
    assert any(f.endswith("os.py") for f in files)
    assert 0 < gpt.unigram_entropy(train, len(alphabet)) < np.log(len(alphabet))


def test_a_small_gpt_learns_and_the_compiled_step_is_the_interpreters():
    train, held, alphabet = gpt.corpus(limit_bytes=400_000)
    cfg = gpt.Config(vocab=len(alphabet), context=16, width=32, heads=2, layers=1)
    params, record = gpt.train(cfg, train, held, epochs=2, steps=30, batch=8,
                               learning_rate=1e-2, report=lambda line: None)
    assert record["train"][-1] < record["train"][0] - 0.3
    assert record["held"][-1] < gpt.unigram_entropy(train, cfg.vocab)
    x, y = gpt.windows(train, np.arange(4) * 997, cfg.context)

    def step(p, x, y):
        return tapeml.value_and_grad(lambda p, x, y: gpt.loss(p, x, y, cfg.heads))(p, x, y)

    compiled_loss, compiled = tapeml.jit(step)(params, x, y)
    interpreted_loss, interpreted = tapeml.trace(step, params, x, y)(params, x, y)
    np.testing.assert_allclose(compiled_loss, interpreted_loss, rtol=1e-5)
    for got, want in zip(tapeml.tree_map(np.asarray, compiled).values(),
                         tapeml.tree_map(np.asarray, interpreted).values(), strict=True):
        for g, w in zip(tapeml.tracing.pytree.flatten(got)[0],
                        tapeml.tracing.pytree.flatten(want)[0], strict=True):
            np.testing.assert_allclose(g, w, rtol=2e-3, atol=2e-5)
    sample = gpt.generate(params, cfg, b"def ", alphabet, 8)
    assert sample.startswith(b"def ") and len(sample) == 12
