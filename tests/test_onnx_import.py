"""tapeml.onnx.load's contract: names, params=True (fine-tuning, checked by finite
differences), input_shapes and constants, and the errors for what it does not import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tapeml  # noqa: E402
import tapeml.onnx  # noqa: E402
from tapeml import ops  # noqa: E402

RNG = np.random.default_rng(7)
CONVERTED = Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-converted"


def small_cnn() -> onnx.ModelProto:
    """Conv -> Relu -> MaxPool -> Flatten -> Gemm, opset 17, float32 initializers."""
    def init(name, *shape):
        return numpy_helper.from_array((0.3 * RNG.standard_normal(shape)).astype(np.float32),
                                       name)

    nodes = [helper.make_node("Conv", ["image", "conv.w", "conv.b"], ["c"], pads=[1, 1, 1, 1],
                              name="conv"),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], transB=1)]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 6, 6])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        [init("conv.w", 4, 1, 3, 3), init("conv.b", 4), init("fc.w", 3, 36), init("fc.b", 3)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_arguments_and_results_carry_the_graphs_names():
    program = tapeml.onnx.load(small_cnn(), input_shapes={"image": (2, 1, 6, 6)})
    text = str(program)
    assert 'tapeml.name = "image"' in text and 'tapeml.name = "logits"' in text
    assert program.name == "small_cnn"


def _finite_difference_check(loss, params, x, eps=1e-2, directions=3):
    """The gradient against central differences along random directions (float32: loose)."""
    grads = tapeml.grad(loss)(params, x)
    for _ in range(directions):
        d = {k: RNG.standard_normal(v.shape).astype(np.float32) for k, v in params.items()}
        plus = {k: v + eps * d[k] for k, v in params.items()}
        minus = {k: v - eps * d[k] for k, v in params.items()}
        numeric = (float(loss(plus, x)) - float(loss(minus, x))) / (2 * eps)
        analytic = sum(float(np.sum(grads[k] * d[k])) for k in params)
        assert abs(numeric - analytic) <= 2e-2 * max(1.0, abs(numeric)), (numeric, analytic)
    return grads


def test_fine_tuning_a_small_cnn_gradients_match_finite_differences():
    program, params = tapeml.onnx.load(small_cnn(), input_shapes={"image": (2, 1, 6, 6)},
                                       params=True)
    assert sorted(params) == ["conv.b", "conv.w", "fc.b", "fc.w"]
    x = RNG.standard_normal((2, 1, 6, 6)).astype(np.float32)
    labels = np.eye(3, dtype=np.float32)[[0, 2]]

    def loss(p, x):
        return tapeml.nn.softmax_cross_entropy(program(p, x), labels)

    grads = _finite_difference_check(loss, params, x)
    compiled = tapeml.jit(tapeml.grad(loss))(params, x)
    for k in params:
        np.testing.assert_allclose(compiled[k], grads[k], rtol=1e-4, atol=1e-6)


def test_fine_tuning_a_converted_pytorch_conv():
    """A model from the wheel's converted PyTorch set (grouped Conv2d with bias)."""
    program, params = tapeml.onnx.load(CONVERTED / "test_Conv2d_groups" / "model.onnx",
                                       params=True)
    assert sorted(params) == ["1", "2"]
    (_, spec), _ = program.input_shapes  # (the params dict comes first)
    assert 'tapeml.name = "1"' in str(program) and 'tapeml.name = "0"' in str(program)
    shape = spec.shape
    x = RNG.standard_normal(shape).astype(np.float32)

    def loss(p, x):
        return ops.mean(ops.tanh(program(p, x)))

    _finite_difference_check(loss, params, x)


def test_constants_bind_inputs_at_import():
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                      helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(tapeml.OnnxError, match=r"Reshape node.*input 1 \('shape'\) must be "
                                               r"known when the model is imported"):
        tapeml.onnx.load(model)
    program = tapeml.onnx.load(model, constants={"shape": np.array([3, 4])})
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_array_equal(program(x), x.reshape(3, 4))


def test_an_unsupported_op_names_its_node_and_opset():
    node = helper.make_node("Unique", ["x"], ["y"], name="the_unique")
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(tapeml.OnnxError, match=r"Unique node 'the_unique' \(#0, output 'y', "
                                               r"opset 13\)"):
        tapeml.onnx.load(model)


def test_wrong_input_shapes_and_dtypes_are_errors():
    with pytest.raises(tapeml.OnnxError, match="names \\['images'\\], not inputs"):
        tapeml.onnx.load(small_cnn(), input_shapes={"images": (1, 1, 6, 6)})
    with pytest.raises(tapeml.OnnxError, match="gives 'image' the shape \\(1, 2, 6, 6\\)"):
        tapeml.onnx.load(small_cnn(), input_shapes={"image": (1, 2, 6, 6)})
    for dims in ((-2, 1, 6, 6), (1.5, 1, 6, 6)):  # (a bare ValueError of Spec's, for -2)
        with pytest.raises(tapeml.OnnxError, match="gives 'image' the shape .*: dims are "
                           "integers, 0 or more"):
            tapeml.onnx.load(small_cnn(), input_shapes={"image": dims})
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4])])
    with pytest.raises(tapeml.OnnxError, match="input 'x' is of type float16"):
        tapeml.onnx.load(helper.make_model(graph))
    with pytest.raises(tapeml.OnnxError, match="no such file"):
        tapeml.onnx.load("/nonexistent/model.onnx")
    with pytest.raises(tapeml.OnnxError, match="not an ONNX model"):
        tapeml.onnx.load(b"not a model")


def test_a_shape_mistake_inside_a_node_names_the_node():
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"], name="mm")], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 5])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 5])])
    with pytest.raises(tapeml.OnnxError, match=r"MatMul node 'mm' \(#0, output 'c', opset"):
        tapeml.onnx.load(helper.make_model(graph))


def _opt(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tapeml.tools.opt", *args],
                          capture_output=True, text=True)


def test_tapeml_opt_reads_onnx_models(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(path))
    out = _opt(str(path))  # the batch dim is open in the file: a located error, exit 1
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "dim 0 of input 'image' ('batch') is not static" in out.stderr
    assert "on the command line: --input-shape image=DIMS" in out.stderr  # its way here
    out = _opt(str(path), "--input-shape", "image=2x1x6x6", "-p", "tape-fuse")
    assert out.returncode == 0, out.stderr  # the open dim bound from the command line
    assert "tensor<2x1x6x6xf32>" in out.stdout and "tensor<2x3xf32>" in out.stdout
    for bad, message in ((("image=2x1x6x7",), "input_shapes gives 'image' the shape"),
                         (("image=2,1,6,6",), "--input-shape wants NAME=DIMS"),
                         (("2x1x6x6",), "--input-shape wants NAME=DIMS"),
                         (("image=2x1x6x6", "image=3x1x6x6"), "gives 'image' twice"),
                         (("pixels=2x1x6x6",), "input_shapes names ['pixels'], not inputs")):
        out = _opt(str(path), *[a for b in bad for a in ("--input-shape", b)])
        assert out.returncode == 1 and message in out.stderr, (bad, out.stderr)
        assert "Traceback" not in out.stderr
    (tmp_path / "f.mlir").write_text("func.func @f() {\n  func.return\n}\n")
    out = _opt(str(tmp_path / "f.mlir"), "--input-shape", "x=1")
    assert out.returncode == 1 and "is read as MLIR" in out.stderr
    fixed = small_cnn()
    for value in (*fixed.graph.input, *fixed.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 2
    onnx.save(fixed, str(path))
    out = _opt(str(path), "-p", "tape-fuse")
    assert out.returncode == 0, out.stderr
    assert "tape.conv2d" in out.stdout and 'tapeml.name = "logits"' in out.stdout
    out = _opt("-f", "onnx", str(path), "-p", "tape-to-llvm", "-t", "llvm")
    assert out.returncode == 0 and "define void @_mlir_ciface" not in out.stderr, out.stderr
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    out = _opt(str(tmp_path / "bad.onnx"))
    assert out.returncode == 1 and "is not an ONNX model" in out.stderr
    assert "Traceback" not in out.stderr


def test_supported_ops_are_all_converters():
    assert {"Conv", "Gemm", "MatMul", "Resize", "LayerNormalization", "Gelu",
            "BatchNormalization"} <= set(tapeml.onnx.supported_ops())


def test_an_imported_model_runs_on_every_backend():
    """Interpreted, compiled for the CPU and for the GPU (emulated: xDSL's interpreter runs its
    kernels), the same numbers; eval_shape and summary() see it as any program."""
    w = RNG.standard_normal((5, 3)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [4, 5])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [4, 3])], [numpy_helper.from_array(w, "w")])
    program = tapeml.onnx.load(helper.make_model(graph,
                                                 opset_imports=[helper.make_opsetid("", 17)]))
    x = RNG.standard_normal((4, 5)).astype(np.float32)
    expected = np.exp(np.maximum(x @ w, 0))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(program(x), expected, rtol=1e-5)
    np.testing.assert_allclose(tapeml.jit(program)(x), expected, rtol=1e-5)
    np.testing.assert_allclose(tapeml.jit(program, backend="cuda", emulate=True)(x), expected,
                               rtol=1e-5)
    assert tapeml.eval_shape(program, tapeml.Spec((4, 5))) == tapeml.Spec((4, 3))
    assert "tape.matmul" in program.summary()


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_normalization_asking_for_y_alone_is_one_layer_norm(axis):
    """Y alone: one tape.layer_norm over the axes from `axis` on as one (its Mean and
    InvStdDev asked for too: the ops written out, as the node tests check), the same numbers
    as onnxruntime's, interpreted and compiled."""
    ort = pytest.importorskip("onnxruntime")
    shape = (3, 4, 6)
    inner = shape[axis:]
    scale = RNG.standard_normal(inner).astype(np.float32)
    bias = RNG.standard_normal(inner).astype(np.float32)
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=axis,
                            epsilon=1e-3)
    graph = helper.make_graph(
        [node], "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
        [numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(bias, "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    program = tapeml.onnx.load(model)
    assert [op.name for op in program.function.body.ops].count("tape.layer_norm") == 1
    x = (RNG.standard_normal(shape) * 3 + 1).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"x": x})
    np.testing.assert_allclose(program(x), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tapeml.jit(program)(x), expected, rtol=1e-5, atol=1e-5)


def _pad_model(mode, pads, shape):
    graph = helper.make_graph(
        [helper.make_node("Pad", ["X", "pads"], ["Y"], mode=mode)], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(pads, np.int64), "pads")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap", "constant"])
def test_pad_with_a_negative_pad_crops_then_pads_as_onnxruntime_does(mode):
    """A negative pad crops its side first, then the other side pads what is left in the
    mode (onnxruntime's reading: onnx.reference refuses them); reflect, edge and wrap had
    refused any negative pad with 'pads -1, 3 do not fit axis 1'."""
    ort = pytest.importorskip("onnxruntime")
    x = np.arange(27, dtype=np.float32).reshape(3, 9)
    for pads in ([0, -1, 0, 3], [0, 2, 0, -1], [-1, 0, 1, 0], [0, 0, 0, 0]):
        model = _pad_model(mode, pads, x.shape)
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        want = session.run(None, {"X": x})[0]
        program = tapeml.onnx.load(model)
        for got in (program(x), tapeml.jit(program)(x)):
            np.testing.assert_array_equal(got, want, err_msg=f"{mode} {pads}")
    if mode == "constant":
        return
    for pads in ([0, 1, 0, -10], [0, 1, 0, -9], [0, -10, 0, 1]):  # nothing left (a review:
        # an end crop past the axis had kept part of it, a slice's negative stop)
        with pytest.raises(tapeml.OnnxError, match="nothing is left after the crop"):
            tapeml.onnx.load(_pad_model(mode, pads, x.shape))
