"""The examples run, at a small size."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

import tapeml

EXAMPLES = Path(__file__).parent.parent / "examples"


def run_example(name: str, *args: str) -> None:
    argv = sys.argv
    sys.argv = [name, *args]
    try:
        runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    finally:
        sys.argv = argv


def test_demo_trains_the_digits_cnn_through_the_pipeline(capsys):
    """`make demo` as it runs: every stage reported, the compiled step equal to the
    interpreter's, and at least 97% held-out accuracy."""
    run_example("demo.py")
    out = capsys.readouterr().out
    for stage in ("trace loss", "tape-differentiate", "tape-fuse", "tape-to-loops",
                  "convert-loops-to-llvm", "LLVM O2", "machine code"):
        assert stage in out
    assert "conv2d-forward 2" in out and "maxpool2d-backward 2" in out
    difference = float(re.search(r"max \|difference\| (\S+)", out).group(1))
    # a tenth of the step's size: a wrong kernel moves parameters by the whole learning rate,
    # while float32 rounding summed in another order can only shift a max-pool near-tie
    assert difference < 3e-4
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", out).group(1))
    assert accuracy >= 97.0
    assert re.search(r"step time, batch 32: tapeml [\d.]+ ms, numpy [\d.]+ ms", out)


def test_demo_rejects_an_unknown_backend_cleanly(capsys):
    with pytest.raises(SystemExit) as exit_:
        run_example("demo.py", "--backend", "tpu")
    assert exit_.value.code == 2
    assert "unknown backend 'tpu'" in capsys.readouterr().err


def test_demo_on_cuda_without_a_gpu_says_so(capsys):
    from tapeml.codegen.cuda_driver import available

    if available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(SystemExit) as exit_:
        run_example("demo.py", "--backend", "cuda", "--epochs", "1")
    assert exit_.value.code == 2
    assert "needs an NVIDIA GPU" in capsys.readouterr().err


def test_numpy_cnn_step_matches_tapeml_gradients():
    """The numpy step the demo and bench time is the same step (so the comparison is fair)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import demo
        import numpy_cnn
    finally:
        sys.path.remove(str(EXAMPLES))
    rng = np.random.default_rng(1)
    params = demo.init(rng)
    x = rng.random((5, 1, 8, 8)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 5)]
    value, grads = tapeml.value_and_grad(demo.loss)(params, x, y)
    expected_value, expected = numpy_cnn.value_and_grad(params, x, y)
    np.testing.assert_allclose(value, expected_value, rtol=1e-5)
    for layer in params:
        for k in params[layer]:
            np.testing.assert_allclose(grads[layer][k], expected[layer][k], rtol=1e-4, atol=1e-6)
    state = tapeml.optim.adam(demo.LEARNING_RATE).init(params)
    new_params, new_state, _ = demo.train_step(params, state, x, y,
                                               np.float32(demo.LEARNING_RATE))
    numpy_params, numpy_state, _ = numpy_cnn.adam_step(
        params, {"step": 0, "m": state["m"], "v": state["v"]}, x, y, demo.LEARNING_RATE)
    for layer in params:
        for k in params[layer]:
            np.testing.assert_allclose(new_params[layer][k], numpy_params[layer][k],
                                       rtol=1e-4, atol=1e-6)


def test_triangle_disagreement_falls(capsys):
    sys.path.insert(0, str(EXAMPLES))
    try:
        import triangle
    finally:
        sys.path.remove(str(EXAMPLES))
    losses = triangle.train(steps=25)
    assert losses[-1] < 0.05 * losses[0]
    run_example("triangle.py", "--steps", "5")
    assert "disagreement fell" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["mlp.mlir"])
def test_example_mlir_parses(name):
    from tapeml.tools.opt import main

    assert main([str(EXAMPLES / name)]) == 0


def test_cnn_step_prints_a_differentiated_program(capsys):
    run_example("cnn_step.py")
    text = capsys.readouterr().out
    assert "tape.unfold" in text and 'tapeml.name = "grad.params.c1.W"' in text
