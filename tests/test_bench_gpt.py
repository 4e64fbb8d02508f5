"""bench/'s plain numpy GPT step (bench/numpy_gpt.py: the forward and a hand-written backward)
computes tapeml's: the loss and every gradient against tapeml's reference interpreter on a small
model, both W7 variants (integer ids through a gather, one-hot through a matmul). jax's and
torch's steps are checked against numpy's by bench/run.py --only W7 itself, every run (importing
them here would cost most of this file's time budget)."""

import sys
from pathlib import Path

import numpy as np
import pytest

import tapeml
from tapeml.tracing.pytree import flatten

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "examples"))
pytest.importorskip("gpt", reason="examples/gpt.py (the model W7 measures) is not here")

import gpt_step  # noqa: E402
import numpy_gpt  # noqa: E402

SMALL = {"batch": 3, "context": 8, "width": 16, "heads": 2, "vocab": 11}


@pytest.fixture(scope="module", params=["ids", "onehot"])
def case(request):
    variant = request.param
    _, params, tokens, targets = gpt_step.make(variant, 2, seed=1, **SMALL)
    loss = tapeml.jit(tapeml.value_and_grad(gpt_step.tapeml_loss(variant, SMALL["heads"])),
                      backend="interp")
    value, grads = loss(params, tokens, targets)
    return variant, params, tokens, targets, float(value), flatten(grads)[0]


def _close(value, grads, expected_value, expected_grads):
    assert value == pytest.approx(expected_value, rel=1e-5)
    assert len(grads) == len(expected_grads)
    for g, e in zip(grads, expected_grads, strict=True):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-4, atol=1e-6)


def test_numpy_step_is_tapemls(case):
    _, params, tokens, targets, value, grads = case
    ours, theirs = numpy_gpt.value_and_grad(params, tokens, targets, SMALL["heads"])
    _close(float(ours), flatten(theirs)[0], value, grads)

