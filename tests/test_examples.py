"""The examples run, at a small size."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


def run_example(name: str, *args: str) -> None:
    argv = sys.argv
    sys.argv = [name, *args]
    try:
        runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    finally:
        sys.argv = argv


def test_demo(capsys):
    run_example("demo.py")
    out = capsys.readouterr().out
    assert "bit-identical" in out and "ShapeError: tape.matmul" in out


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
