"""The tape ops' shape rules (builder + verifier) against numpy: accept exactly what numpy accepts
(within the dialect's documented domain), and give the result shape numpy gives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.ir import Block

import tapeml
from tapeml.dialects import tape
from tapeml.errors import ShapeError

dims = st.integers(min_value=0, max_value=3)
shapes = st.lists(dims, min_size=0, max_size=4).map(tuple)
SETTINGS = settings(max_examples=300, deadline=None)


def arg(shape, dtype=np.float32):
    return Block(arg_types=[tape.tensor_type(shape, dtype)]).args[0]


def ours(op, *shapes_, **params):
    """The result shape our builder infers (after verifying the built op), or None if rejected."""
    try:
        built = op.build(*(arg(s) for s in shapes_), **params)
        built.verify()
    except ShapeError:
        return None
    return built.result.type.get_shape()


def numpy(fn, *shapes_):
    """The result shape numpy gives, or None if numpy rejects the shapes."""
    try:
        return np.shape(fn(*(np.zeros(s, np.float32) for s in shapes_)))
    except ValueError:
        return None


@SETTINGS
@given(src=shapes, dst=shapes)
def test_broadcast_accepts_what_numpy_accepts(src, dst):
    expected = numpy(lambda x: np.broadcast_to(x, dst), src)
    assert ours(tape.BroadcastOp, src, shape=dst) == expected


@SETTINGS
@given(src=shapes, dst=st.lists(st.integers(-1, 4), max_size=4).map(tuple))
def test_reshape_accepts_what_numpy_accepts(src, dst):
    expected = numpy(lambda x: x.reshape(dst), src)
    assert ours(tape.ReshapeOp, src, shape=dst) == expected


@SETTINGS
@given(src=shapes, perm=st.lists(st.integers(-5, 4), max_size=5).map(tuple))
def test_permute_accepts_what_numpy_accepts(src, perm):
    expected = numpy(lambda x: np.transpose(x, perm), src)
    assert ours(tape.PermuteOp, src, perm=perm) == expected


@SETTINGS
@given(src=shapes, axes=st.lists(st.integers(-5, 4), max_size=4).map(tuple), keep=st.booleans())
@pytest.mark.parametrize(("op", "fn"), [(tape.SumOp, np.sum), (tape.MaxOp, np.max)])
def test_reductions_accept_what_numpy_accepts(op, fn, src, axes, keep):
    expected = numpy(lambda x: fn(x, axis=axes, keepdims=keep), src)
    assert ours(op, src, axes=axes, keepdims=keep) == expected


ranks_1_to_4 = st.lists(st.integers(1, 3), min_size=1, max_size=4).map(tuple)


@SETTINGS
@given(a=ranks_1_to_4, b=ranks_1_to_4)
def test_matmul_agrees_with_numpy_within_its_domain(a, b):
    """tape.matmul takes rank 2 x rank 2 or rank 3 x rank 3 with equal batch (broadcasting is
    explicit). There it accepts exactly what numpy accepts; outside it rejects."""
    expected = numpy(np.matmul, a, b)
    got = ours(tape.MatmulOp, a, b)
    in_domain = len(a) == len(b) and len(a) in (2, 3) and a[:-2] == b[:-2]
    assert got == (expected if in_domain else None)


@SETTINGS
@given(a=shapes, b=shapes)
def test_elementwise_needs_equal_types(a, b):
    assert (ours(tape.AddOp, a, b) is not None) == (a == b)


@SETTINGS
@given(shape_list=st.lists(shapes, min_size=1, max_size=3), axis=st.integers(-4, 3))
def test_concat_accepts_what_numpy_accepts(shape_list, axis):
    expected = numpy(lambda *xs: np.concatenate(xs, axis=axis), *shape_list)
    assert ours(tape.ConcatOp, *shape_list, axis=axis) == expected


def test_messages_name_the_op_the_shapes_and_the_rule():
    with pytest.raises(ShapeError) as e:
        tape.MatmulOp.build(arg((2, 3)), arg((4, 5)))
    assert str(e.value) == (
        "tape.matmul: contraction dims differ: tensor<2x3xf32> has 3 columns, "
        "tensor<4x5xf32> has 4 rows"
    )
    with pytest.raises(ShapeError, match=r"tape.add: operands must have the same type .*"
                       r"tensor<2xf32>, tensor<3xf32>"):
        tape.AddOp.build(arg((2,)), arg((3,)))
    with pytest.raises(ShapeError, match=r"tape.broadcast: cannot broadcast tensor<3xf32> to "
                       r"shape \[2, 4\]"):
        tape.BroadcastOp.build(arg((3,)), shape=(2, 4))


def test_mixing_element_types_is_an_error():
    with pytest.raises(ShapeError, match="tape.matmul: operands must share one element type"):
        tape.MatmulOp.build(arg((2, 2)), arg((2, 2), np.float64))
    with pytest.raises(ShapeError, match="tape.add: operands must have the same type"):
        tape.AddOp.build(arg((2,)), arg((2,), np.float64))


def test_integer_tensors_are_rejected():
    from xdsl.dialects.builtin import TensorType, i32

    x = Block(arg_types=[TensorType(i32, [2])]).args[0]
    with pytest.raises(ShapeError, match="tape.exp: operand must be a statically shaped tensor "
                       "of f32 or f64, got tensor<2xi32>"):
        tape.ExpOp.build(x)


def test_verifier_rejects_a_wrong_stated_result_type():
    op = tape.PermuteOp.build(arg((2, 3)), perm=(1, 0))
    bad = tape.PermuteOp.create(operands=[arg((2, 3))], result_types=[tape.tensor_type((2, 3),
                                np.float32)], properties=dict(op.properties))
    with pytest.raises(ShapeError, match=r"tape.permute: result type tensor<2x3xf32> does not "
                       r"match tensor<3x2xf32>"):
        bad.verify()


def test_build_reports_unknown_and_missing_parameters():
    with pytest.raises(TypeError, match=r"tape.permute got unexpected parameters \['axes'\]"):
        tape.PermuteOp.build(arg((2, 3)), perm=(1, 0), axes=(0,))
    with pytest.raises(TypeError, match=r"tape.pad needs the parameters \['value'\]"):
        tape.PadOp.build(arg((2, 3)), low=(0, 0), high=(0, 0))


@pytest.mark.parametrize(
    ("op", "shapes_", "params", "expected"),
    [
        (tape.UnfoldOp, [(2, 3, 7, 6)], dict(kernel=(3, 2), stride=(2, 3), dilation=(1, 2)),
         (2, 3, 3, 2, 3, 2)),
        (tape.FoldOp, [(2, 3, 3, 2, 3, 2)],
         dict(kernel=(3, 2), stride=(2, 3), dilation=(1, 2), spatial=(7, 6)), (2, 3, 7, 6)),
        (tape.Conv2dOp, [(2, 4, 9, 8), (6, 2, 3, 2)],
         dict(stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2), groups=2), (2, 6, 5, 7)),
        (tape.MaxPool2dOp, [(1, 2, 5, 5)], dict(kernel=(2, 2), stride=(2, 2),
                                                padding=(0, 0, 1, 1)), (1, 2, 3, 3)),
        (tape.PadOp, [(4, 5)], dict(low=(-1, 2), high=(0, -5), value=0.0), (3, 2)),
        (tape.SliceOp, [(7,)], dict(start=(1,), stop=(6,), step=(2,)), (3,)),
    ],
)
def test_window_and_layout_shapes(op, shapes_, params, expected):
    assert ours(op, *shapes_, **params) == expected


@pytest.mark.parametrize(
    ("op", "shapes_", "params", "message"),
    [
        (tape.UnfoldOp, [(1, 4)], dict(kernel=(5,), stride=(1,), dilation=(1,)),
         "does not fit"),
        (tape.FoldOp, [(1, 3, 2)], dict(kernel=(2,), stride=(1,), dilation=(1,), spatial=(5,)),
         "must have shape [1, 4, 2]"),
        (tape.Conv2dOp, [(1, 4, 5, 5), (6, 3, 3, 3)],
         dict(stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=2), "C/groups = 2"),
        (tape.Conv2dOp, [(1, 4, 5, 5), (6, 4, 3, 3)],
         dict(stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=3), "groups=3"),
        (tape.PadOp, [(2,)], dict(low=(-2,), high=(-1,), value=0.0), "crops more than"),
        (tape.SliceOp, [(4,)], dict(start=(3,), stop=(2,), step=(1,)), "start <= stop"),
        (tape.MaxOp, [(0, 2)], dict(axes=(0,), keepdims=False), "empty axis"),
    ],
)
def test_window_and_layout_rules(op, shapes_, params, message):
    with pytest.raises(ShapeError, match=op.name) as e:
        op.build(*(arg(s) for s in shapes_), **params)
    assert message in str(e.value)


def test_build_says_which_parameter_has_the_wrong_type():
    """Op.build checks each parameter's Python type against its clause: a TypeError naming the
    op and the parameter (PadOp.build(value="x") was float()'s bare ValueError,
    SumOp.build(keepdims="no") a keepdims of True, a list of floats truncated to ints)."""
    x = tapeml.trace(lambda x: x, np.ones((2, 3), np.float32)).function.body.block.args[0]
    cases = [(tape.PadOp, dict(low=[1, 1], high=[1, 1], value="x"), "value must be a number"),
             (tape.PadOp, dict(low=[1, 1], high=[1.5, 1], value=0.0),
              "high must be a sequence of ints"),
             (tape.SumOp, dict(axes=[0], keepdims="no"), "keepdims must be True or False"),
             (tape.ConcatOp, dict(axis=0.0), "axis must be an int")]
    for op, params, message in cases:
        with pytest.raises(TypeError, match=f"{op.name}: {message}, got"):
            op.build(x, **params)
    assert tape.SumOp.build(x, axes=np.array([1]), keepdims=np.bool_(True)).params == {
        "axes": (1,), "keepdims": True}
