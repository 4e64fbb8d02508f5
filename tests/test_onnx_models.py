"""Every whole model the onnx wheel ships with a reference output loads, compiles for the CPU
and matches it (tests/onnx_model_cases.py: the nine "light" architectures, resnet50 to vgg19,
and the converted PyTorch models and operators); the small ones on the interpreter too."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

import onnx_model_cases as models  # noqa: E402

CASES = models.model_cases()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.kind}/{c.name}" for c in CASES])
def test_model_matches_its_reference_output(case):
    outcome = models.run(case, "cpu")
    assert outcome.status == "passed", outcome.detail


SMALL = [c for c in CASES if c.kind != "light"]


@pytest.mark.parametrize("case", SMALL, ids=[f"{c.kind}/{c.name}" for c in SMALL])
def test_small_model_on_the_interpreter(case):
    outcome = models.run(case, "interp")
    assert outcome.status == "passed", outcome.detail


def test_every_kind_is_there():
    kinds = {c.kind for c in CASES}
    assert kinds == {"light", "pytorch-converted", "pytorch-operator"}, kinds
    assert len([c for c in CASES if c.kind == "light"]) == 9
