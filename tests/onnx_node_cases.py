"""ONNX's backend node tests (onnx.backend.test.case.node.collect_testcases) through tapeml:
each case's model imported (tapeml.onnx.load), run on its inputs, and compared with its
expected outputs at the case's own tolerances.

    .venv/bin/python tests/onnx_node_cases.py [--backend interp|cpu|both] [--op Conv,...]

prints, per op, how many cases passed, failed, and were not imported (an op, a dtype or an
attribute tapeml does not import: the OnnxError's reason), and the failures. test_onnx_node.py
runs the float32 cases of the supported ops with pytest.
"""

from __future__ import annotations

import argparse
import functools
import sys
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

import tapeml
import tapeml.onnx
from tapeml.errors import OnnxError


@functools.cache
def cases() -> list[Any]:
    """Every node test case that has a model (ONNX's function-expanded ones included)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [c for c in collect_testcases() if c.model is not None]


def op_of(case: Any) -> str:
    """The op a case tests: its last node's (an expanded case's function body is several)."""
    return case.model.graph.node[-1].op_type if case.model.graph.node else "?"


def is_float32(case: Any) -> bool:
    """The case computes in float32: its floating inputs and outputs are all float32 (there is
    at least one); integer inputs (shapes, indices, axes) may come with them."""
    arrays = [_array(a) for inputs, outputs in case.data_sets for a in (*inputs, *outputs)]
    if any(a is None for a in arrays):
        return False
    floats = [a for a in arrays if a.dtype.kind in "fc" or a.dtype.itemsize > 8]
    return bool(floats) and all(a.dtype == np.float32 for a in floats)


@dataclass
class Outcome:
    status: str  # "passed", "failed", "unsupported"
    detail: str = ""


def run(case: Any, backend: str) -> Outcome:
    """Import the case's model and compare its outputs with the expected ones."""
    graph_inputs = [i.name for i in case.model.graph.input
                    if i.name not in {t.name for t in case.model.graph.initializer}]
    for inputs, expected in case.data_sets:
        inputs, expected = [_array(a) for a in inputs], [_array(a) for a in expected]
        if any(a is None for a in (*inputs, *expected)):
            return Outcome("unsupported", "sequence or optional inputs or outputs")
        named = dict(zip(graph_inputs, inputs, strict=False))
        try:
            program = load(case.model, named)
        except OnnxError as error:
            return Outcome("unsupported", str(error).split(": ", 2)[-1][:200])
        args = [a for name, a in named.items() if name not in program_constants(program)]
        try:
            fn = program if backend == "interp" else tapeml.jit(program, backend=backend)
            got = fn(*args)
        except Exception as error:  # noqa: BLE001 (a failure of ours: reported, not raised)
            return Outcome("failed", f"{type(error).__name__}: {str(error)[:300]}")
        got = got if isinstance(got, tuple) else (got,)
        for k, (g, e) in enumerate(zip(got, expected, strict=False)):
            problem = compare(np.asarray(g), e, case.rtol, case.atol)
            if problem:
                return Outcome("failed", f"output {k}: {problem}")
    return Outcome("passed")


def _array(a: Any) -> np.ndarray | None:
    """A case's input or output as an array (they come as arrays, numpy scalars, or
    TensorProtos); None for a sequence or an optional."""
    from onnx import TensorProto, numpy_helper

    if isinstance(a, TensorProto):
        return numpy_helper.to_array(a)
    if isinstance(a, np.ndarray | np.generic):
        return np.asarray(a)
    return None


def load(model: Any, named: dict[str, np.ndarray]) -> Any:
    """The model with its input shapes from the data; an input that must be known at import
    (a Reshape's target, a Slice's bounds) bound to its value, as an exporter would fold it."""
    shapes = {n: a.shape for n, a in named.items()}
    try:
        return tapeml.onnx.load(model, input_shapes=shapes)
    except OnnxError as error:
        if "must be known when the model is imported" not in str(error):
            raise
    integers = {n: a for n, a in named.items() if a.dtype.kind in "iub" or a.ndim <= 1}
    program = tapeml.onnx.load(model, input_shapes={n: s for n, s in shapes.items()
                                                     if n not in integers},
                               constants=integers)
    program.bound = set(integers)
    return program


def program_constants(program: Any) -> set[str]:
    return getattr(program, "bound", set())


def compare(got: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> str:
    if got.shape != expected.shape:
        return f"shape {got.shape}, expected {expected.shape}"
    if got.dtype != expected.dtype:
        return f"dtype {got.dtype}, expected {expected.dtype}"
    if expected.dtype.kind in "fc":
        if not np.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True):
            worst = np.nanmax(np.abs(got.astype(np.float64) - expected))
            return f"differs by up to {worst:.3g} (rtol {rtol}, atol {atol})"
        return ""
    return "" if np.array_equal(got, expected) else "values differ"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="interp", choices=["interp", "cpu", "both"])
    parser.add_argument("--op", default="", help="only these ops (comma separated)")
    parser.add_argument("--failures", action="store_true", help="list each failure")
    args = parser.parse_args(argv)
    only = set(filter(None, args.op.split(",")))
    backends = ["interp", "cpu"] if args.backend == "both" else [args.backend]
    table: dict[str, Counter] = defaultdict(Counter)
    notes: list[str] = []
    for case in cases():
        op = op_of(case)
        if only and op not in only:
            continue
        for backend in backends:
            outcome = run(case, backend)
            table[op][f"{backend} {outcome.status}"] += 1
            if outcome.status != "passed" and (args.failures or outcome.status == "failed"):
                notes.append(f"{case.name} [{backend}] {outcome.status}: {outcome.detail}")
    columns = [f"{b} {s}" for b in backends for s in ("passed", "failed", "unsupported")]
    print(f"{'op':<32}" + "".join(f"{c:>20}" for c in columns))
    for op in sorted(table):
        print(f"{op:<32}" + "".join(f"{table[op][c]:>20}" for c in columns))
    totals = Counter()
    for counts in table.values():
        totals.update(counts)
    print(f"{'total':<32}" + "".join(f"{totals[c]:>20}" for c in columns))
    print("\n".join(notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
