"""The ONNX importer's fixes after a tester's report: each case against an independent
reference, named in its test (onnxruntime, onnx.reference, or numpy from the op's spec text),
on the interpreter and, where the result was silently wrong, compiled for the CPU too."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tapeml  # noqa: E402
import tapeml.onnx  # noqa: E402

F32 = TensorProto.FLOAT
INT64_MIN = np.iinfo(np.int64).min


def _model(nodes, inputs, opset, initializers=None, out_type=F32):
    """A one-output ("y") model; `inputs`: {name: array or (elem type, dims)}."""
    def info(name, v):
        elem, dims = v if isinstance(v, tuple) else \
            (helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        return helper.make_tensor_value_info(name, elem, dims)

    output = helper.make_tensor_value_info("y", out_type, None)
    weights = [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()]
    graph = helper.make_graph(nodes, "g", [info(k, v) for k, v in inputs.items()], [output],
                              weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # (what onnxruntime 1.x reads, whatever the onnx package writes)
    return model


def _onnxruntime(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _reference(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)[0]


def _both_backends(model, *args):
    """The imported model's result interpreted and compiled for the CPU (the same bits)."""
    program = tapeml.onnx.load(model)
    interpreted = np.asarray(program(*args))
    np.testing.assert_array_equal(np.asarray(tapeml.jit(program)(*args)), interpreted)
    return interpreted


# ---------------------------------------------------------------------------------------------
# 1. Slice stepping backward from a start below -dim


@pytest.mark.parametrize("start", [-100, -11, -10, -1, 3, 100])
def test_slice_stepping_backward_clamps_the_start_into_0_to_dim_minus_1(start):
    """Reference: onnxruntime, which follows Slice's spec text (a start is clamped to
    [0, dim - 1] stepping backward: -100 is 0, so x[0] alone); numpy and onnx.reference read
    it as an empty slice. tapeml had clamped to -1, read as the last element: the whole axis
    reversed."""
    x = np.arange(10, dtype=np.float32)
    bounds = {"starts": [start], "ends": [INT64_MIN], "axes": [0], "steps": [-1]}
    model = _model([helper.make_node("Slice", ["x", *bounds], ["y"])], {"x": x}, 13,
                   {k: np.array(v, np.int64) for k, v in bounds.items()})
    want = _onnxruntime(model, {"x": x})
    got = _both_backends(model, x) if start == -100 else tapeml.onnx.load(model)(x)
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------------------------
# 2, 3. Resize of integers; Resize to sizes keeping the aspect ratio


def _resize_model(mode, elem, shape, scales=None, sizes=None, **attrs):
    """Resize-19 of an input `x` of `shape` by `scales`, or else to `sizes`."""
    if scales is not None:
        names, initializers = ["x", "", "scales"], {"scales": np.array(scales, np.float32)}
    else:
        names, initializers = ["x", "", "", "sizes"], {"sizes": np.array(sizes, np.int64)}
    node = helper.make_node("Resize", names, ["y"], mode=mode, **attrs)
    return _model([node], {"x": (elem, shape)}, 19, initializers, out_type=elem)


@pytest.mark.parametrize("mode, dtype", [("linear", np.int32), ("cubic", np.int64),
                                         ("linear", np.int64), ("cubic", np.int32)])
def test_resize_of_integers_interpolates_in_float_and_rounds_back(mode, dtype):
    """Reference: onnx.reference, which interpolates in float64 and rounds half to even back
    to the integer type, saturating (onnxruntime implements only int32 linear, and truncates
    there: here its 0.75 would be 0, the reference's 1). tapeml had cast the weights to the
    integer type: all 0, so linear gave the low neighbour and cubic zeros."""
    x = np.array([[[[0, 1, -1, 3, -3, 2, 5, -6], [0, 100, 200, 300, 10, 20, 30, 40]]]], dtype)
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    model = _resize_model(mode, elem, x.shape, scales=[1, 1, 1.5, 4])
    want = _reference(model, {"x": x})
    got = _both_backends(model, x) if mode == "cubic" else tapeml.onnx.load(model)(x)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)


def test_resize_of_int32_linear_agrees_with_onnxruntime_where_the_result_is_whole():
    """Reference: onnxruntime, on values where its truncation and the reference's rounding
    agree (the tester's case: 17.5 would be 18 here, 17 there)."""
    x = np.array([[[[0, 100, 200, 300]]]], np.int32)
    model = _resize_model("linear", TensorProto.INT32, x.shape, scales=[1, 1, 1, 2])
    np.testing.assert_array_equal(tapeml.onnx.load(model)(x), _onnxruntime(model, {"x": x}))


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["linear", "cubic", "nearest"])
def test_resize_keeping_the_aspect_ratio_maps_coordinates_with_the_common_scale(policy, mode):
    """Reference: onnxruntime (onnx.reference agrees). With sizes and a
    keep_aspect_ratio_policy every axis uses one scale (min or max of size / length), and
    that scale maps the coordinates: tapeml had used each axis's out / in (9 / 5, not 7 / 4)."""
    x = (np.arange(20, dtype=np.float32).reshape(1, 1, 4, 5) ** 2)
    model = _resize_model(mode, F32, x.shape, sizes=[7, 9], axes=[2, 3],
                          keep_aspect_ratio_policy=policy)
    want = _onnxruntime(model, {"x": x})
    np.testing.assert_allclose(_reference(model, {"x": x}), want, rtol=1e-5, atol=1e-4)
    got = tapeml.onnx.load(model)(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# 4. Reductions over no axis (noop_with_empty_axes)


@pytest.mark.parametrize("op", ["ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum",
                                "ReduceLogSumExp", "ReduceSum", "ReduceMax"])
def test_a_reduction_over_no_axis_still_applies_its_elementwise_part(op):
    """Reference: onnxruntime (onnx.reference agrees): ONNX defines ReduceSumSquare as
    ReduceSum(x * x), ReduceL1, ReduceL2 and ReduceLogSum likewise, so reducing no axis leaves
    x * x, |x|, sqrt(x * x), log x; tapeml had returned x."""
    x = np.array([[-2.0, -0.5, 3.0, 1e30, 0.0]], np.float32)
    model = _model([helper.make_node(op, ["x", "axes"], ["y"], noop_with_empty_axes=1)],
                   {"x": x}, 18, {"axes": np.array([], np.int64)})
    with np.errstate(all="ignore"):
        want = _onnxruntime(model, {"x": x})
        got = _both_backends(model, x) if op == "ReduceL2" else tapeml.onnx.load(model)(x)
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# 5. Binary ops before opset 7: broadcast=1 with an axis


@pytest.mark.parametrize("op, fn", [("Add", np.add), ("Sub", np.subtract),
                                    ("Mul", np.multiply), ("Div", np.divide),
                                    ("Pow", np.power)])
@pytest.mark.parametrize("a_shape, b_shape, axis", [((1, 3, 2, 3), (3,), 1),
                                                    ((2, 3, 4, 5), (3, 4), 1),
                                                    ((2, 3, 4, 5), (2,), 0),
                                                    ((2, 3, 4, 5), (4, 5), -2),
                                                    ((2, 3, 4, 5), (1, 1), 1),
                                                    ((2, 3, 4, 5), (3, 1), 1)])
def test_legacy_broadcast_lines_b_up_with_a_from_axis(op, fn, a_shape, b_shape, axis):
    """Reference: numpy, from Add-6's spec text (onnxruntime has no kernels before opset 7):
    B's dims are A's from `axis` on (or 1, as ONNX's own operator_add_size1_broadcast
    model has), so B gets trailing 1s. tapeml had broadcast B against A's last dims: a wrong
    sum where those happened to match, an error elsewhere."""
    rng = np.random.default_rng(1)
    a = rng.uniform(1, 2, a_shape).astype(np.float32)
    b = rng.uniform(1, 2, b_shape).astype(np.float32)
    node = helper.make_node(op, ["a", "b"], ["y"], broadcast=1, axis=axis)
    model = _model([node], {"a": a}, 6, {"b": b})
    aligned = b if b.size == 1 else \
        b.reshape(*b.shape, *[1] * (len(a_shape) - axis % len(a_shape) - len(b_shape)))
    np.testing.assert_allclose(tapeml.onnx.load(model)(a), fn(a, aligned), rtol=1e-6)


def test_legacy_broadcast_names_the_node_where_b_does_not_fit_at_axis():
    model = _model([helper.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=2)],
                   {"a": (F32, (2, 3, 4))}, 6, {"b": np.ones(3, np.float32)})
    with pytest.raises(tapeml.OnnxError, match=r"Add node \(#0, output 'y', opset 6\): B \(3,\) "
                                               r"does not line up with the dims of A "
                                               r"\(2, 3, 4\) from axis 2"):
        tapeml.onnx.load(model)


# ---------------------------------------------------------------------------------------------
# 6. Hardmax before opset 13


@pytest.mark.parametrize("opset, attrs", [(11, {}), (11, {"axis": 2}), (11, {"axis": 0}),
                                          (1, {"axis": 1})])
def test_hardmax_before_opset_13_is_one_hot_over_the_flattened_rows(opset, attrs):
    """Reference: onnxruntime. Before opset 13 the input is flattened to 2-D at `axis`;
    tapeml had failed to import any row longer than 1 (an internal reshape error)."""
    x = np.array([[[1, 5, 2], [0, 3, 9]], [[7, 1, 1], [2, 2, 0]]], np.float32)
    model = _model([helper.make_node("Hardmax", ["x"], ["y"], **attrs)], {"x": x}, opset)
    np.testing.assert_array_equal(tapeml.onnx.load(model)(x), _onnxruntime(model, {"x": x}))


# ---------------------------------------------------------------------------------------------
# 7. params=True and initializers a node must know at import


def test_params_keeps_initializers_reaching_an_import_time_input_through_other_nodes():
    """Reference: onnxruntime for the values. Resize's scales = Mul(s0, two) and Pad's value
    = Identity(v0): s0, two and v0 stay constants (the README: 'those a node must know at
    import ... stay constants'); w, read by a Mul and through Shape by a Reshape's target,
    stays a parameter. params=True had failed to import, blaming 'the graph's inputs'."""
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 2, 4)
    nodes = [helper.make_node("Mul", ["s0", "two"], ["scales"]),
             helper.make_node("Resize", ["x", "", "scales"], ["r"], mode="nearest"),
             helper.make_node("Identity", ["v0"], ["value"]),
             helper.make_node("Pad", ["r", "pads", "value"], ["p"]),
             helper.make_node("Mul", ["p", "w"], ["m"]),
             helper.make_node("Shape", ["m"], ["shape"]),
             helper.make_node("Reshape", ["m", "shape"], ["y"])]
    initializers = {"s0": np.array([1, 1, 1, 1], np.float32), "two": np.array(2, np.float32),
                    "v0": np.array(-5, np.float32), "w": np.array(3, np.float32),
                    "pads": np.array([0, 0, 1, 0, 0, 0, 0, 1], np.int64)}
    model = _model(nodes, {"x": x}, 19, initializers)
    program, params = tapeml.onnx.load(model, params=True)
    assert sorted(params) == ["w"]
    np.testing.assert_array_equal(program(params, x), _onnxruntime(model, {"x": x}))


# ---------------------------------------------------------------------------------------------
# 8. Clip


def test_clip_6_defaults_its_bounds_to_flt_max():
    """Reference: onnxruntime (onnx.reference agrees): Clip-6's schema defaults min and max
    to -/+FLT_MAX, so an infinity clips to FLT_MAX; tapeml had kept it."""
    x = np.array([-np.inf, -1.0, np.inf], np.float32)
    for attrs in ({"min": -2.0}, {"max": 2.0}, {}):
        model = _model([helper.make_node("Clip", ["x"], ["y"], **attrs)], {"x": x}, 6)
        np.testing.assert_array_equal(_both_backends(model, x), _onnxruntime(model, {"x": x}))


@pytest.mark.parametrize("bound", [0.0, -0.0])
def test_clip_keeps_the_sign_of_a_zero_within_the_bounds(bound):
    """Reference: onnxruntime (onnx.reference agrees): clipping [-0, +0] to [b, b], b = +-0,
    leaves [-0, +0]. The converter now calls tapeml.clip, which keeps x's zero within its
    bounds; its own maximum and minimum had given the bound's."""
    x = np.array([-0.0, 0.0], np.float32)
    b = np.array(bound, np.float32)
    model = _model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], {"x": x}, 13,
                   {"lo": b, "hi": b})
    want = _onnxruntime(model, {"x": x})
    np.testing.assert_array_equal(np.signbit(_both_backends(model, x)), np.signbit(want))


# ---------------------------------------------------------------------------------------------
# 9. Messages and smaller gaps


def test_concat_1_concatenates_along_axis_1_without_the_attribute():
    """Reference: numpy, from Concat-1's schema ('Default value is 1'; onnxruntime has no
    Concat-1, onnx.reference requires the attribute). From opset 4 it is required: an error
    naming the node. tapeml had raised a bare comparison TypeError."""
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = a + 10
    model = _model([helper.make_node("Concat", ["a", "b"], ["y"])], {"a": a, "b": b}, 1)
    np.testing.assert_array_equal(tapeml.onnx.load(model)(a, b), np.concatenate([a, b], 1))
    model = _model([helper.make_node("Concat", ["a", "b"], ["y"])], {"a": a, "b": b}, 13)
    with pytest.raises(tapeml.OnnxError, match=r"Concat node \(#0, output 'y', opset 13\): it "
                                               r"has no axis attribute"):
        tapeml.onnx.load(model)


def test_an_empty_file_is_no_model(tmp_path):
    """onnxruntime says 'No graph was found in the protobuf'; tapeml had imported an empty
    program, and tapeml-opt printed one."""
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    for model in (path, b""):
        with pytest.raises(tapeml.OnnxError, match="holds no graph"):
            tapeml.onnx.load(model)
    out = subprocess.run([sys.executable, "-m", "tapeml.tools.opt", str(path)],
                         capture_output=True, text=True)
    assert out.returncode == 1 and "holds no graph" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("equation, a_shape, b_shape", [
    ("...ij,...jk->...ik", (5, 2, 3), (1, 3, 4)),
    ("...ij,...jk->...ik", (1, 2, 3), (5, 3, 4)),
    ("...ij,...jk", (4, 1, 2, 3), (4, 6, 3, 2)),
    ("...ij,jk->...ik", (5, 2, 3), (3, 4)),
    ("i...j,j...k->i...k", (2, 5, 1, 3), (3, 1, 4, 6)),
    ("ij...,jk...->ik...", (2, 3, 5), (3, 4, 1))])
def test_einsum_broadcasts_the_dims_under_the_ellipsis(equation, a_shape, b_shape):
    """Reference: onnxruntime. tapeml had refused a 1 against a 5, naming an index 'A' the
    equation does not have."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    model = _model([helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)],
                   {"a": a, "b": b}, 12)
    np.testing.assert_allclose(tapeml.onnx.load(model)(a, b),
                               _onnxruntime(model, {"a": a, "b": b}), rtol=1e-5, atol=1e-6)


def test_einsum_dims_under_the_ellipsis_that_do_not_broadcast_name_the_equation():
    model = _model([helper.make_node("Einsum", ["a", "b"], ["y"],
                                     equation="...ij,...jk->...ik")],
                   {"a": (F32, (5, 2, 3)), "b": (F32, (3, 3, 4))}, 12)
    with pytest.raises(tapeml.OnnxError, match=r"Einsum node .*the dims '\.\.\.' stands for in "
                                               r"'\.\.\.ij,\.\.\.jk->\.\.\.ik', \(5,\), \(3,\), "
                                               "do not broadcast"):
        tapeml.onnx.load(model)


def test_input_shapes_takes_an_int_as_a_1d_shape_and_names_what_is_not_a_shape():
    """As tapeml.Spec(5) is Spec((5,)); tapeml had raised a bare TypeError."""
    model = _model([helper.make_node("Relu", ["a"], ["y"])], {"a": (F32, ("N",))}, 13)
    program = tapeml.onnx.load(model, input_shapes={"a": 5})
    np.testing.assert_array_equal(program(np.array([-1, 0, 2, -3, 4], np.float32)),
                                  [0, 0, 2, 0, 4])
    with pytest.raises(tapeml.OnnxError, match=r"input_shapes gives 'a' 5\.0, not a shape"):
        tapeml.onnx.load(model, input_shapes={"a": 5.0})


# ---------------------------------------------------------------------------------------------
# 10. The lowest


def test_one_dim_symbol_bound_to_two_sizes_is_an_error():
    """ONNX's IR: one dim_param in several inputs is one size (onnxruntime does not check;
    tapeml had imported a program of two unrelated shapes)."""
    model = _model([helper.make_node("Add", ["a", "b"], ["y"])],
                   {"a": (F32, ("N", 3)), "b": (F32, ("N", 3))}, 13)
    with pytest.raises(tapeml.OnnxError, match="the dim 'N' 2 in input 'a' and 1 in input 'b'"):
        tapeml.onnx.load(model, input_shapes={"a": (2, 3), "b": (1, 3)})
    tapeml.onnx.load(model, input_shapes={"a": (2, 3), "b": (2, 3)})


def test_gemm_with_beta_0_does_not_read_c():
    """Reference: onnxruntime (BLAS's rule: beta = 0 leaves C unread, so its inf and NaN add
    nothing; onnx.reference computes 0 * inf, NaN). tapeml had given NaN."""
    x = np.array([[1, 2, 3]], np.float32)
    model = _model([helper.make_node("Gemm", ["a", "b", "c"], ["y"], beta=0.0)], {"a": x}, 13,
                   {"b": np.ones((3, 2), np.float32),
                    "c": np.array([np.inf, np.nan], np.float32)})
    np.testing.assert_array_equal(tapeml.onnx.load(model)(x), _onnxruntime(model, {"a": x}))


def test_a_missing_external_data_file_is_said_to_be_missing(tmp_path):
    """The model itself reads; its weights file is what is missing (tapeml had said the
    model 'is not an ONNX model')."""
    w = np.ones((4, 3), np.float32)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": (F32, (2, 4))}, 13,
                   {"w": w})
    path = tmp_path / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin",
                    size_threshold=0)
    np.testing.assert_array_equal(tapeml.onnx.load(path)(np.ones((2, 4), np.float32)),
                                  np.full((2, 3), 4, np.float32))
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(tapeml.OnnxError, match=r"model\.onnx: its external data cannot be "
                                               r"read \(.*weights\.bin"):
        tapeml.onnx.load(path)
