"""ONNX's backend node tests, the float32 cases of the ops tapeml imports, on the interpreter
and the CPU backend at each case's own tolerances (tests/onnx_node_cases.py runs them all and
prints the table). A case whose model uses an attribute or dtype tapeml does not import must
say so with an OnnxError; it is skipped with that reason, never passed."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

import onnx_node_cases as cases  # noqa: E402

import tapeml.onnx  # noqa: E402

SUPPORTED = set(tapeml.onnx.supported_ops())
FLOAT32 = [c for c in cases.cases() if cases.op_of(c) in SUPPORTED and cases.is_float32(c)]


@pytest.mark.parametrize("backend", ["interp", "cpu"])
@pytest.mark.parametrize("case", FLOAT32, ids=[c.name for c in FLOAT32])
def test_node_case(case, backend):
    outcome = cases.run(case, backend)
    if outcome.status == "unsupported":
        pytest.skip(outcome.detail)
    assert outcome.status == "passed", outcome.detail


def test_the_float32_cases_are_most_of_the_supported_ops():
    """The slice make test runs is not a handful: most supported ops have float32 cases."""
    ops = {cases.op_of(c) for c in FLOAT32}
    assert len(FLOAT32) > 900 and len(ops) > 100, (len(FLOAT32), len(ops))
