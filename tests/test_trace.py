"""Tracing: programs, pytrees and names, data-free tracers, located errors, eager == traced."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapeml
from tapeml import Spec, nn, ops
from tapeml.dialects import tape

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def this_line(offset: int = 0) -> str:
    """`test_trace.py:<line>` of the caller's line plus `offset`."""
    frame = inspect.currentframe().f_back
    return f"test_trace.py:{frame.f_lineno + offset}"


# ----------------------------------------------------------------------------------------------
# Programs


def two_layer(params, x):
    h = tapeml.tanh(x @ params["lin1"]["W"] + params["lin1"]["b"])
    return h @ params["lin2"]["W"] + params["lin2"]["b"]


def test_traced_program_runs_like_the_function():
    params = nn.mlp_init(RNG, [3, 5, 2])
    x = rand(4, 3)
    program = tapeml.trace(two_layer, params, x)
    expected = np.tanh(x @ params["lin1"]["W"] + params["lin1"]["b"]) @ params["lin2"]["W"] \
        + params["lin2"]["b"]
    np.testing.assert_allclose(program(params, x), expected, rtol=1e-6)
    assert [op.name for op in program.function.body.ops] == [
        "tape.matmul", "tape.broadcast", "tape.add", "tape.tanh", "tape.matmul",
        "tape.broadcast", "tape.add", "func.return"]


def test_printed_program_parses_back_to_the_same_callable():
    params = nn.mlp_init(RNG, [3, 5, 2])
    x = rand(4, 3)
    program = tapeml.trace(two_layer, params, x)
    again = tapeml.Program.parse(str(program))
    assert str(again) == str(program)
    np.testing.assert_array_equal(again(params, x), program(params, x))
    assert again.in_tree == program.in_tree and again.out_tree == program.out_tree


def test_names_survive_as_attributes_and_value_names():
    params = nn.mlp_init(RNG, [3, 5, 2])
    text = str(tapeml.trace(two_layer, params, rand(4, 3)))
    assert '%params.lin1.W: tensor<3x5xf32> {tapeml.name = "params.lin1.W"}' in text
    assert '%x: tensor<4x3xf32> {tapeml.name = "x"}' in text
    assert '-> (tensor<4x2xf32> {tapeml.name = "result"})' in text


def test_pytrees_in_and_out_with_none_leaves():
    def fn(batch, scale=None, extra=None):
        a, (b, c) = batch["pair"]
        return {"sum": a + b, "parts": [c * 2.0, None], "none": None}

    batch = {"pair": (rand(2), (rand(2), rand(3)))}
    program = tapeml.trace(fn, batch)
    out = program(batch)
    assert set(out) == {"sum", "parts", "none"} and out["none"] is None
    assert out["parts"][1] is None
    np.testing.assert_array_equal(out["sum"], batch["pair"][0] + batch["pair"][1][0])
    np.testing.assert_array_equal(out["parts"][0], batch["pair"][1][1] * 2)
    text = str(program)
    for name in ("batch.pair.0", "batch.pair.1.0", "batch.pair.1.1", "result.sum",
                 "result.parts.0"):
        assert f'tapeml.name = "{name}"' in text
    with pytest.raises(TypeError, match="traced for arguments structured as"):
        program({"pair": (rand(2), rand(2))})


def test_keyword_arguments_are_traced_by_name():
    program = tapeml.trace(lambda x, *, w: x * w, rand(3), w=rand(3))
    assert 'tapeml.name = "w"' in str(program)
    x, w = rand(3), rand(3)
    np.testing.assert_array_equal(program(x, w=w), x * w)


def test_captured_arrays_become_constants():
    table = np.arange(6, dtype=np.float32).reshape(2, 3)

    program = tapeml.trace(lambda x: x + table, rand(2, 3))
    assert "tape.constant dense<[[0.000000e+00, 1.000000e+00, 2.000000e+00]" in str(program)
    x = rand(2, 3)
    np.testing.assert_array_equal(program(x), x + table)


def test_python_float_arguments_are_weak_scalars():
    """A Python number argument is a float64 scalar that takes the dtype of the array it meets
    (JAX's weak types): all of 0.1 in a float64 program, float32 in a float32 one."""
    program = tapeml.trace(lambda x, s: x * s + 1.0, rand(3, dtype=np.float64), 2.0)
    assert program.input_shapes == ((Spec((3,), np.float64), Spec((), np.float64)), {})
    assert program.shapes == Spec((3,), np.float64)

    def f(x, s):
        return x * s

    x64, x32 = np.ones(3), np.ones(3, np.float32)
    for run in (tapeml.jit(f), tapeml.jit(f, backend="interp"), tapeml.trace(f, x64, 0.1)):
        assert run(x64, 0.1).tolist() == [0.1] * 3  # not 0.10000000149
    for run in (tapeml.jit(f), tapeml.trace(f, x32, 0.1)):
        out = run(x32, 0.1)
        assert out.dtype == np.float32 and out.tolist() == [np.float32(0.1)] * 3
    # weak values alone compute in float64 and come out as a Python float's float32
    alone = tapeml.jit(lambda s, t: s * t)(0.1, 3)
    assert alone.dtype == np.float32 and alone == np.float32(0.1 * 3)


def test_numpy_scalar_arguments_keep_their_dtype():
    """np.float64 is a float subclass; it was traced as float32 and then refused as float64.
    numpy scalars are strong (as in JAX): float32 meeting float64 gives float64. numpy ints
    are weak numbers until tapeml has integer tensors."""
    f = tapeml.jit(lambda a, s: a * s)
    a = np.ones(3, np.float32)
    out = f(a, np.float64(4.0))
    assert out.dtype == np.float64 and out.tolist() == [4.0] * 3
    assert f(a, np.float32(4.0)).dtype == np.float32
    out = f(a, np.int64(4))
    assert out.dtype == np.float32 and out.tolist() == [4.0] * 3
    assert tapeml.trace(lambda a, s: a * s, a, np.int64(3))(a, 5).tolist() == [5.0] * 3


def test_a_closed_over_boolean_mask_is_captured():
    """A causal-mask style constant: captured as (float constant != 0), so where() takes it."""
    mask = np.array([[True, False], [True, True]])

    def f(x):
        return tapeml.where(mask, x, -np.inf)

    x = rand(2, 2)
    expected = np.where(mask, x, -np.inf).astype(np.float32)
    np.testing.assert_array_equal(tapeml.trace(f, x)(x), expected)
    np.testing.assert_array_equal(tapeml.jit(f)(x), expected)
    np.testing.assert_array_equal(f(x), expected)


def test_numpy_functions_without_a_tapeml_op_are_not_recommended_as_tapeml_ops():
    with pytest.raises(tapeml.TracingError) as error:
        tapeml.trace(lambda x: np.median(x), rand(3))
    assert "tapeml has no median" in str(error.value)
    assert "use tapeml.median" not in str(error.value)
    with pytest.raises(tapeml.TracingError, match=r"use tapeml\.sum"):
        tapeml.trace(lambda x: np.sum(x), rand(3))


def test_eval_shape_and_shapes():
    def fn(x, y):
        return {"mm": x @ y, "s": tapeml.sum(x, axis=0)}

    shapes = tapeml.eval_shape(fn, Spec((2, 3)), Spec((3, 4), np.float32))
    assert shapes == {"mm": Spec((2, 4)), "s": Spec((3,))}


def test_summary_counts_ops_parameters_flops_and_bytes():
    params = nn.mlp_init(RNG, [3, 5, 2])
    summary = tapeml.trace(two_layer, params, rand(4, 3)).summary()
    rows = {line.split()[0]: line.split()[1:] for line in summary.splitlines()[2:-1]}
    assert summary.startswith("program @two_layer: 7 tape ops, 248 FLOPs")
    assert rows["tape.matmul"] == ["2", "200"]  # 2*4*3*5 + 2*4*5*2
    assert rows["tape.tanh"] == ["1", "20"]
    assert rows["params.lin1"] == ["20"] and rows["params.lin2"] == ["12"]
    assert rows["arguments"] == ["elements"] and rows["x"] == ["12"]  # data, too
    assert summary.endswith("inputs 176 bytes, outputs 32 bytes")


# ----------------------------------------------------------------------------------------------
# Tracers have no data; errors point at the user's line


@pytest.mark.parametrize(
    ("fn", "what"),
    [
        (lambda x: bool(x), "bool()"),
        (lambda x: float(x), "float()"),
        (lambda x: np.asarray(x), "np.asarray()"),
        (lambda x: x * 2 if x > 0 else x, "bool()"),
        (lambda x: x[int(x)], "int()"),
    ],
)
def test_reading_a_tracer_value_is_a_tracing_error_at_the_users_line(fn, what):
    with pytest.raises(tapeml.TracingError) as error:
        tapeml.trace(fn, np.float32(1.0))
    message = str(error.value)
    assert what in message
    assert "test_trace.py:" in message and "lambda x:" in message


def test_shape_errors_name_the_op_the_shapes_and_the_users_line():
    def bad(x, w):
        return x @ w  # the line the error must name

    with pytest.raises(tapeml.ShapeError) as error:
        tapeml.trace(bad, rand(2, 3), rand(4, 5))
    message = str(error.value)
    assert "tape.matmul: contraction dims differ: tensor<2x3xf32> has 3 columns" in message
    assert "test_trace.py:" in message and "return x @ w  # the line the error must name" in \
        message


def test_broadcast_errors_are_located_too():
    with pytest.raises(tapeml.ShapeError, match=r"shapes \(2, 3\), \(4,\) cannot be broadcast"
                       r"(.|\n)*test_trace.py"):
        tapeml.trace(lambda x, y: x + y, rand(2, 3), rand(4))


def test_a_leaked_tracer_is_an_error():
    leaked = []
    tapeml.trace(lambda x: leaked.append(x) or x, rand(2))
    with pytest.raises(tapeml.TracingError, match="another \\(or a finished\\) trace"):
        tapeml.trace(lambda y: y + leaked[0], rand(2))


def test_non_array_arguments_are_rejected_clearly():
    with pytest.raises(tapeml.TracingError, match="argument `mode` is a str"):
        tapeml.trace(lambda x, mode: x, rand(2), "train")


def test_eager_shape_errors_are_located():
    with pytest.raises(tapeml.ShapeError, match="tape.matmul(.|\n)*test_trace.py"):
        ops.matmul(rand(2, 3), rand(4, 5))


# ----------------------------------------------------------------------------------------------
# Eager and traced agree bit for bit


def _composites():
    x, y = rand(3, 4), rand(3, 4)
    m, v = rand(4, 5), rand(4)
    img = rand(2, 3, 7, 6)
    w = rand(4, 3, 3, 2)
    wg = rand(6, 1, 3, 3)
    pos = np.abs(rand(3, 4)) + 0.5
    return [
        ("add", lambda a, b: ops.add(a, b), (x, y)),
        ("sub_scalar", lambda a: ops.subtract(2.0, a), (x,)),
        ("mul_bcast", lambda a, b: ops.multiply(a, b), (x, v)),
        ("div", lambda a, b: ops.divide(a, b), (x, pos)),
        ("pow", lambda a: ops.power(a, 2.0), (pos,)),
        ("neg", ops.negative, (x,)),
        ("maximum", lambda a, b: ops.maximum(a, b), (x, y)),
        ("minimum", lambda a, b: ops.minimum(a, b), (x, y)),
        ("exp_log", lambda a: ops.log(ops.exp(a)), (x,)),
        ("tanh", ops.tanh, (x,)),
        ("sigmoid", ops.sigmoid, (x,)),
        ("relu", ops.relu, (x,)),
        ("sqrt", ops.sqrt, (pos,)),
        ("abs", ops.abs, (x,)),
        ("where", lambda a, b: ops.where(ops.greater(a, b), a, b), (x, y)),
        ("compare", lambda a, b: ops.where(ops.less_equal(a, b), a, 0.0), (x, y)),
        ("cast", lambda a: ops.multiply(ops.astype(a, np.float64), 3.0), (x,)),
        ("reshape_transpose", lambda a: ops.transpose(ops.reshape(a, (2, 6))), (x,)),
        ("getitem", lambda a: ops.getitem(ops.getitem(a, (slice(1, None), slice(None, None, 2))),
                                             (None, Ellipsis, 0)), (x,)),
        ("pad", lambda a: ops.pad(a, ((1, 0), (2, -1)), 0.5), (x,)),
        ("concat_stack", lambda a, b: ops.stack([ops.concatenate([a, b], axis=1),
                                                 ops.concatenate([b, a], axis=1)], axis=-1),
         (x, y)),
        ("sum", lambda a: ops.sum(a, axis=1), (x,)),
        ("mean_keep", lambda a: ops.mean(a, axis=0, keepdims=True), (x,)),
        ("max_min", lambda a: ops.subtract(ops.max(a), ops.min(a, axis=(0, 1))), (x,)),
        ("softmax", lambda a: ops.softmax(a, axis=0), (x,)),
        ("log_softmax", ops.log_softmax, (x,)),
        ("logsumexp", lambda a: ops.logsumexp(a, axis=-1), (x,)),
        ("matmul_vec", lambda a, b: ops.matmul(a, b), (m, rand(5))),
        ("matmul_batched", ops.matmul, (rand(2, 3, 4), rand(2, 4, 5))),
        ("matmul_bcast", ops.matmul, (rand(2, 3, 4), rand(4, 5))),
        ("dot", lambda a, b: ops.dot(a, b), (v, v)),
        ("unfold_fold", lambda a: ops.fold(ops.unfold(a, (3, 2), (2, 1)), (7, 6), (3, 2),
                                           (2, 1)), (img,)),
        ("conv2d", lambda a, k: nn.conv2d(a, k, stride=(2, 1), padding=(1, 0, 2, 1),
                                          dilation=(1, 2)), (img, w)),
        ("conv2d_depthwise", lambda a, k: nn.conv2d(
            ops.concatenate([a, a], axis=1), k, groups=6, padding=1), (img, wg)),
        ("max_pool", lambda a: nn.max_pool2d(a, 2, padding=1), (img,)),
        ("avg_pool", lambda a: nn.avg_pool2d(a, (3, 2), stride=(2, 2)), (img,)),
        ("mse", nn.mse, (x, y)),
        ("xent", lambda a: nn.softmax_cross_entropy(a, np.eye(4, dtype=np.float32)[[0, 2, 1]]),
         (x,)),
    ]


@pytest.mark.parametrize(("name", "fn", "args"), _composites(), ids=lambda v: v
                         if isinstance(v, str) else "")
def test_eager_and_traced_agree_bit_for_bit(name, fn, args):
    eager = fn(*args)
    traced = tapeml.trace(fn, *args)(*args)
    assert isinstance(eager, np.ndarray)
    assert eager.dtype == traced.dtype and eager.shape == traced.shape
    np.testing.assert_array_equal(eager, traced)


def test_operators_on_tracers_record_the_ops_functions():
    def with_operators(a, b, v):
        return (-(2.0 - a) * v / b) ** 2.0 @ (a.T > b.T)[..., :3].astype(np.float32) + a[0, :3]

    def with_functions(a, b, v):
        lhs = ops.power(ops.divide(ops.multiply(ops.negative(ops.subtract(2.0, a)), v), b), 2.0)
        mask = ops.getitem(ops.greater(ops.transpose(a), ops.transpose(b)),
                           (Ellipsis, slice(None, 3)))
        product = ops.matmul(lhs, ops.astype(mask, np.float32))
        return ops.add(product, ops.getitem(a, (0, slice(None, 3))))

    args = (rand(3, 4), rand(3, 4), rand(4))
    assert str(tapeml.trace(with_operators, *args)).replace("with_operators", "f") == \
        str(tapeml.trace(with_functions, *args)).replace("with_functions", "f")


# ----------------------------------------------------------------------------------------------
# A new user's mistakes and corner cases (from trying tapeml as one)


@pytest.mark.parametrize(
    ("index", "message"),
    [(True, "a boolean scalar is not an index"), (np.array([0.5]), "must hold integers"),
     ("a", "cannot index with a str")],
)
def test_unsupported_indices_are_clear_errors(index, message):
    with pytest.raises(IndexError, match=f"{message}(.|\n)*test_trace.py"):
        tapeml.trace(lambda a: a[index], rand(3, 4))
    with pytest.raises(IndexError, match="a boolean mask tracer"):
        tapeml.trace(lambda a: a[a > 0], rand(3, 4))


def test_numpy_ufuncs_on_tracers_trace_as_tapeml_ops():
    x = rand(3, 4)
    program = tapeml.trace(lambda a: np.exp(a) * np.float32(2.0) + np.maximum(a, 0.0), x)
    np.testing.assert_array_equal(program(x), ops.add(ops.multiply(ops.exp(x), 2.0),
                                                      ops.maximum(x, 0.0)))
    with pytest.raises(tapeml.TracingError, match="numpy.sum cannot run on a tracer; use "
                       "tapeml.sum"):
        tapeml.trace(lambda a: np.sum(a), x)


def test_non_ascii_and_numpy_int_keys_round_trip():
    x = rand(2)
    program = tapeml.trace(lambda d: d["é"] * 2.0, {"é": x})
    np.testing.assert_array_equal(tapeml.Program.parse(str(program))({"é": x}), x * 2)
    program = tapeml.trace(lambda d: d[np.int64(1)] + 1.0, {np.int64(1): x})
    np.testing.assert_array_equal(tapeml.Program.parse(str(program))({1: x}), x + 1)
    with pytest.raises(TypeError, match="dict keys must be sortable"):
        tapeml.trace(lambda d: d["a"], {"a": x, 1: x})


def test_bad_specs_arguments_and_calls():
    with pytest.raises(ValueError, match="Spec: negative dimensions are not allowed"):
        Spec((-1, 3))
    for shape in ((2.5, True), (2, True), 2.0, "3"):  # (2.5, True) was silently (2, 1)
        with pytest.raises(TypeError, match="Spec: a shape is an int or a sequence of ints"):
            Spec(shape)
    with pytest.raises(tapeml.TracingError, match="argument `a` has dtype uint8; tape tensors "
                       "hold bool, int32, int64, float32 or float64"):
        tapeml.trace(lambda a: a, np.ones(3, np.uint8))
    program = tapeml.trace(lambda a: a * 2.0, rand(2))
    with pytest.raises(TypeError, match="needs arrays to run on"):
        program(Spec((2,)))
    with pytest.raises(ValueError, match=r"no function @nope in the module \(functions: "):
        tapeml.Program.parse(str(program), name="nope")
    with pytest.raises(TypeError, match="add: cannot use a dict as an operand"):
        tapeml.trace(lambda a: a + {"k": 1}, rand(2))


def test_tracer_methods_take_numpy_spellings():
    x = rand(3, 4)
    program = tapeml.trace(lambda a: (a.transpose((1, 0)), a.transpose(1, 0), abs(a)), x)
    t1, t2, a = program(x)
    np.testing.assert_array_equal(t1, x.T)
    np.testing.assert_array_equal(t2, x.T)
    np.testing.assert_array_equal(a, np.abs(x))


def test_layer_mistakes_name_the_layer():
    with pytest.raises(tapeml.ShapeError, match="nn.conv2d: input .* must be rank 4"):
        nn.conv2d(rand(1, 3, 4), rand(2, 3, 3, 3))
    with pytest.raises(tapeml.ShapeError, match="nn.conv2d: with groups=1, an input of 3 "
                       "channels needs a weight of 3 input channels"):
        nn.conv2d(rand(1, 3, 5, 5), rand(2, 2, 3, 3))
    for groups in (3, 0):  # (it had said "a weight of ? input channels")
        with pytest.raises(tapeml.ShapeError, match=f"nn.conv2d: groups={groups} must be a "
                           "positive divisor of the input's 4 channels"):
            nn.conv2d(rand(1, 4, 5, 5), rand(6, 2, 3, 3), groups=groups)
    with pytest.raises(ValueError, match="nn.mlp: parameters must be layers named lin1"):
        nn.mlp({"first": {"W": rand(2, 2), "b": rand(2)}}, rand(1, 2))


def test_submodules_import_as_spelled():
    import tapeml.nn
    import tapeml.optim

    assert tapeml.nn.conv2d is nn.conv2d and tapeml.optim.adam is tapeml.optim.adam


@settings(max_examples=60, deadline=None)
@given(bits=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=4), wide=st.booleans())
def test_every_constant_prints_and_parses_back_bit_for_bit(bits, wide):
    # any bit pattern: nan payloads, infinities, denormals, and finite values such as 2**20
    # that xDSL itself would print as hex it cannot read back
    dtype, unsigned = (np.float64, np.uint64) if wide else (np.float32, np.uint32)
    value = np.array([b % (2 ** (8 * np.dtype(dtype).itemsize)) for b in bits], unsigned)
    value = np.concatenate([value.view(dtype), np.array([2.0**20, 2.0**24, -(2.0**53)], dtype)])
    program = tapeml.trace(lambda x: x + value, np.zeros(value.shape, dtype))
    (constant,) = [op for op in tapeml.Program.parse(str(program)).function.walk()
                   if isinstance(op, tape.ConstantOp)]
    assert constant.params["value"].tobytes() == value.tobytes()


def test_tracers_that_escape_or_hide_in_lists_get_a_way_out():
    x = rand(2, 3)
    with pytest.raises(tapeml.TracingError, match="pass an outer function's array to an inner "
                       "trace/grad/jit as an argument"):
        tapeml.grad(lambda a: ops.sum(tapeml.trace(lambda b: a * b, x)(a)))(x)
    with pytest.raises(tapeml.TracingError, match=r"make one with tapeml.stack\(\[...\]\)"):
        tapeml.trace(lambda a: ops.exp([a, [a]]), x)


def test_a_list_where_an_array_belongs_says_where_it_came_from():
    f = tapeml.jit(ops.exp)
    with pytest.raises(tapeml.TracingError, match=r"^`x` came as a list, which a traced "
                       r"function takes as a pytree, each element an argument of its own, not "
                       r"as one array: pass np\.asarray"):
        f([1.0, 2.0])
    with pytest.raises(tapeml.TracingError, match=r"^`x` came as a list"):
        f([[1.0, 2.0], [3.0, 4.0]])  # (its leaves x.0.0 .. x.1.1)
    with pytest.raises(tapeml.TracingError, match=r"^`p\.w` came as a list"):
        tapeml.jit(lambda p: ops.exp(p["w"]))({"w": [np.ones(2, np.float32)] * 2})
    # a list the function makes of its arguments (or of their members): no argument came as one
    a = np.ones(2, np.float32)
    for made, args in ((lambda x: ops.exp([x, x]), (a,)),
                       (lambda p: ops.exp([p["w"], p["b"]]), ({"w": a, "b": a},)),
                       (lambda t: ops.exp([t[1], t[0]]), ((a, a),))):
        with pytest.raises(tapeml.TracingError, match=r"^a list or tuple holding tracers is not "
                           r"an array; make one with tapeml\.stack"):
            tapeml.jit(made)(*args)


def test_a_program_called_inside_a_trace_checks_its_arguments():
    """A Program jitted or called inside another trace at other shapes than its own is a
    ShapeError naming the argument, at the user's line, as the interpreter's check is: its ops
    hold its shapes, and replayed they had computed something else silently (x[1:] traced at
    4 returned 3 elements at 6; a sum of x[:, :2] over 3 rows returned 3 rows for 5). An array
    of another dtype is a TypeError; a Python number takes the argument's dtype."""
    prog = tapeml.trace(lambda x: x[1:] * 1.0, np.ones(4))
    prog2 = tapeml.trace(lambda x, s: tapeml.sum(x[:, :2], axis=1) * s,
                         np.ones((3, 4), np.float32), np.float32(2))
    with pytest.raises(tapeml.ShapeError, match=r"@_lambda_: argument 0 \(`x`\) must have "
                       r"shape \(4,\), the shape it was traced \(or loaded\) with, got \(6,\)"
                       r"\n  at .*test_trace.py"):
        tapeml.jit(prog)(np.arange(6.0))
    with pytest.raises(tapeml.ShapeError, match=r"argument 0 \(`x`\) must have shape \(3, 4\)"):
        tapeml.jit(lambda x: prog2(x, np.float32(1)))(np.ones((5, 6), np.float32))
    with pytest.raises(TypeError, match=r"argument 1 \(`s`\) must have dtype float32, the dtype "
                       r"it was traced \(or loaded\) with, got float64"):
        tapeml.jit(prog2)(np.ones((3, 4), np.float32), np.float64(2))
    got = tapeml.jit(prog2)(np.ones((3, 4), np.float32), 3.0)
    assert got.dtype == np.float32 and np.array_equal(got, np.full(3, 6, np.float32))
    np.testing.assert_array_equal(tapeml.jit(prog)(np.arange(4.0)), np.arange(1.0, 4.0))


def test_arrays_in_the_other_byte_order_are_converted():
    """A big-endian array as an eager operand or a closed-over constant is converted, as a jit
    argument already was (it was a TypeError: 'tape tensors hold ... float32 ..., got >f4')."""
    be = np.full((2, 2), 2, ">f4")
    ids = np.arange(3, dtype=">i8")
    np.testing.assert_array_equal(tapeml.add(be, 1.0), np.full((2, 2), 3, np.float32))
    assert tapeml.add(be, 1.0).dtype == np.float32 and tapeml.add(ids, 1).dtype == np.int64
    got = tapeml.jit(lambda a: a @ be)(np.ones((1, 2), np.float32))
    np.testing.assert_array_equal(got, np.full((1, 2), 4, np.float32))


def test_dir_shows_the_api_not_the_packages_own_imports():
    """dir(tapeml) lists the public names and submodules, not the imports of its __init__
    (annotations, importlib, sys, Any were listed)."""
    names = dir(tapeml)
    assert {"jit", "grad", "nn", "optim", "matmul", "Program"} <= set(names)
    assert not {"annotations", "importlib", "sys", "Any"} & set(names)


def test_numpys_shape_queries_work_on_tracers():
    """np.shape, np.ndim and np.size of a tracer are its static shape, rank and size, as
    numpy's of an array (they were 'numpy.shape cannot run on a tracer', though t.shape
    works); numpy functions that need values still name the tapeml function to use."""
    def f(x):
        return x * np.ndim(x) + np.size(x) + tapeml.zeros(np.shape(x), np.float32)

    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(tapeml.jit(f)(x), np.full((2, 3), 8, np.float32))
    with pytest.raises(tapeml.TracingError, match="numpy.mean cannot run on a tracer; use "
                                                  "tapeml.mean"):
        tapeml.jit(lambda x: np.mean(x))(x)


def test_a_program_with_calls_says_so_when_jitted():
    """A parsed program whose function calls another runs on the interpreter, but jit (and
    grad, and calling it in a trace) take tape ops only: a TracingError at the user's line
    naming the call (it said 'cannot replay func.call inside a trace', with no trace begun)."""
    program = tapeml.Program.parse("""
        func.func @g(%x: tensor<2xf32>) -> tensor<2xf32> {
          %0 = tape.add %x, %x : tensor<2xf32>
          func.return %0 : tensor<2xf32>
        }
        func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
          %0 = func.call @g(%x) : (tensor<2xf32>) -> tensor<2xf32>
          func.return %0 : tensor<2xf32>
        }""", name="main")
    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(program(x), 2 * x)
    with pytest.raises(tapeml.TracingError, match=r"@main holds a call of @g: .*inline calls "
                                                  r"into one function first\)\n  at .*test_trace"):
        tapeml.jit(program)(x)
