"""Real trained models from packages, imported and compiled, against onnxruntime on the same
inputs: magika's file-type classifier (int32 bytes in, through an embedding-like one-hot, a
convolution and attention-style pooling) and basic-pitch's note model (audio in, a CQT of
1 x 256 filters, 2-D convolutions, three outputs). make test installs both (basic-pitch
without its dependencies: its ONNX file is all the test reads)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

import tapeml  # noqa: E402
import tapeml.onnx  # noqa: E402

MODELS = {  # package, its ONNX file, the input's name, a batch of it
    "magika": ("models/standard_v3_3/model.onnx", "bytes",
               lambda rng: rng.integers(0, 257, (3, 2048)).astype(np.int32)),
    "basic_pitch": ("saved_models/icassp_2022/nmp.onnx", "serving_default_input_2:0",
                    lambda rng: (0.1 * rng.standard_normal((1, 43844, 1))).astype(np.float32)),
}


def model_path(package: str) -> Path:
    spec = importlib.util.find_spec(package)  # (not imported: basic-pitch's deps are absent)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed")
    return Path(spec.submodule_search_locations[0]) / MODELS[package][0]


@pytest.mark.parametrize("package", sorted(MODELS))
def test_package_model_agrees_with_onnxruntime(package):
    path = model_path(package)
    _, name, make = MODELS[package]
    x = make(np.random.default_rng(0))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = session.run(None, {name: x})
    program = tapeml.onnx.load(path, input_shapes={name: x.shape})
    got = tapeml.jit(program)(x)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_an_open_batch_dim_needs_input_shapes():
    path = model_path("magika")
    with pytest.raises(tapeml.OnnxError,
                       match=r"dim 0 of input 'bytes' \('unk__214'\) is not static"):
        tapeml.onnx.load(path)
