"""The whole models the onnx wheel ships with reference outputs, through tapeml: the "light"
architectures (resnet50, squeezenet, vgg19, ...: their weights filled by ConstantOfShape,
their input ONNX's own dummy, arange / size, and their expected output beside them) and the
small converted PyTorch models and operators (real weights, a test_data_set each).

    .venv/bin/python tests/onnx_model_cases.py [--backend interp|cpu] [--only NAME,...]

prints each model's outcome, its import and first-call times; test_onnx_models.py runs them.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import tapeml
import tapeml.onnx
from tapeml.errors import OnnxError


@dataclass(frozen=True)
class ModelCase:
    name: str
    path: Path
    kind: str  # "light", "pytorch-converted", "pytorch-operator"

    def data(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The inputs and the expected outputs."""
        import onnx
        from onnx import numpy_helper

        def read(path: Path) -> np.ndarray:
            return numpy_helper.to_array(onnx.load_tensor(str(path)))

        if self.kind == "light":
            model = onnx.load(str(self.path))
            initialized = {t.name for t in model.graph.initializer}
            inputs = []
            for i in model.graph.input:
                if i.name in initialized:
                    continue
                shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                              for d in i.type.tensor_type.shape.dim)
                n = int(np.prod(shape))
                inputs.append((np.arange(n).reshape(shape) / n).astype(np.float32))
            stem = self.path.with_suffix("")
            outputs = [read(p) for p in sorted(stem.parent.glob(stem.name + "_output_*.pb"))]
            return inputs, outputs
        folder = self.path.parent / "test_data_set_0"
        return ([read(p) for p in sorted(folder.glob("input_*.pb"))],
                [read(p) for p in sorted(folder.glob("output_*.pb"))])


@functools.cache
def model_cases() -> list[ModelCase]:
    import onnx

    data = Path(onnx.__file__).parent / "backend" / "test" / "data"
    found = [ModelCase(p.stem.removeprefix("light_"), p, "light")
             for p in sorted((data / "light").glob("light_*.onnx"))]
    for kind in ("pytorch-converted", "pytorch-operator"):
        found += [ModelCase(p.parent.name.removeprefix("test_"), p, kind)
                  for p in sorted((data / kind).glob("*/model.onnx"))]
    return found


@dataclass
class Outcome:
    status: str  # "passed", "failed", "unsupported"
    detail: str = ""
    load_s: float = 0.0
    first_call_s: float = 0.0


def run(case: ModelCase, backend: str, rtol: float = 1e-3, atol: float = 1e-7) -> Outcome:
    inputs, expected = case.data()
    start = time.perf_counter()
    try:
        program = tapeml.onnx.load(case.path)
    except OnnxError as error:
        return Outcome("unsupported", str(error))
    loaded = time.perf_counter()
    fn = program if backend == "interp" else tapeml.jit(program, backend=backend)
    got = fn(*inputs)
    done = time.perf_counter()
    got = got if isinstance(got, tuple) else (got,)
    if len(got) != len(expected):
        return Outcome("failed", f"{len(got)} outputs, expected {len(expected)}")
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        g = np.asarray(g)
        if g.shape != e.shape or not np.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True):
            worst = np.abs(g - e).max() if g.shape == e.shape else "-"
            return Outcome("failed", f"output {k}: shape {g.shape} (expected {e.shape}), "
                                     f"differs by up to {worst}")
    return Outcome("passed", "", loaded - start, done - loaded)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cpu", choices=["interp", "cpu"])
    parser.add_argument("--only", default="")
    args = parser.parse_args(argv)
    only = set(filter(None, args.only.split(",")))
    for case in model_cases():
        if only and case.name not in only:
            continue
        o = run(case, args.backend)
        print(f"{case.kind:<18} {case.name:<44} {o.status:<12} import {o.load_s:6.2f} s  "
              f"first call {o.first_call_s:6.2f} s  {o.detail[:150]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
