"""Every tape op, run through xDSL's interpreter, against the plain references in `reference.py`.

Each op is built with its xDSL builder into `func.func @f`, the module is verified and run with
`tapeml.interpret`. `run_op` also checks, for every call, what all ops promise: the result is a
fresh, writable, C-contiguous numpy array of the result type's shape and dtype, sharing no memory
with (and not modifying) the inputs, and `type(op).build(*op.operands, **op.params)` rebuilds an
op with equal properties and result type.
"""

from __future__ import annotations

import itertools
import math
import zlib
from typing import Any

import numpy as np
import pytest
import reference as ref  # tests/ is on sys.path (pytest's rootdir-relative import)
from bits import assert_same_bits
from xdsl.builder import Builder, InsertPoint
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, i1
from xdsl.ir import Block, Region

import tapeml
from tapeml.dialects import tape
from tapeml.dialects.base import TapeOp
from tapeml.interpreters.tape import SEMANTICS

DTYPES = [np.float32, np.float64]
DTYPE_IDS = ["f32", "f64"]


def tolerance(dtype: Any) -> dict[str, float]:
    """rtol/atol for results whose summation order differs from the reference's."""
    if np.dtype(dtype) == np.float32:
        return {"rtol": 1e-5, "atol": 1e-5}
    return {"rtol": 1e-12, "atol": 1e-12}


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded by the test's id: reproducible, and different for every case."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def uniform(rng: np.random.Generator, shape, dtype, low=-1.0, high=1.0) -> np.ndarray:
    return rng.uniform(low, high, size=shape).astype(dtype)


# ----------------------------------------------------------------------------------------------
# Running one op through the xDSL interpreter


def _arg_type(a: np.ndarray):
    return tape.tensor_type(a.shape, i1 if a.dtype == np.bool_ else a.dtype)


def build_module(op_type: type[TapeOp], *arrays: np.ndarray, **params: Any):
    """`func.func @f(<arrays' types>) { return <op>(args) }`, verified; returns (module, op)."""
    arg_types = [_arg_type(a) for a in arrays]
    block = Block(arg_types=arg_types)
    builder = Builder(InsertPoint.at_end(block))
    op = builder.insert(op_type.build(*block.args, **params))
    builder.insert(func.ReturnOp(op.results[0]))
    f = func.FuncOp("f", (arg_types, [op.results[0].type]), Region(block))
    module = ModuleOp([f])
    module.verify()
    return module, op


def check_round_trip(op: TapeOp) -> None:
    rebuilt = type(op).build(*op.operands, **op.params)
    try:
        assert rebuilt.properties == op.properties
        assert rebuilt.results[0].type == op.results[0].type
    finally:
        rebuilt.erase()


def run_op(op_type: type[TapeOp], *arrays: np.ndarray, **params: Any) -> np.ndarray:
    module, op = build_module(op_type, *arrays, **params)
    before = [(a.copy(), a.tobytes()) for a in arrays]
    (result,) = tapeml.interpret(module, "f", *arrays)

    result_type = op.results[0].type
    assert isinstance(result, np.ndarray), f"{op_type.name} returned {type(result).__name__}"
    assert result.shape == tuple(result_type.get_shape())
    assert result.dtype == tape.dtype_of(result_type)
    assert result.flags.c_contiguous
    assert result.flags.writeable
    for a, (copy, raw) in zip(arrays, before, strict=True):
        assert not np.shares_memory(result, a), f"{op_type.name} result aliases an input"
        assert a.tobytes() == raw and a.dtype == copy.dtype, f"{op_type.name} mutated an input"

    check_round_trip(op)
    return result


def assert_exact(actual: np.ndarray, expected: np.ndarray) -> None:
    assert_same_bits(actual, expected)  # bit for bit: -0.0 is not +0.0


def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: Any) -> None:
    assert actual.dtype == np.dtype(dtype)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, **tolerance(dtype))


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


# ----------------------------------------------------------------------------------------------
# Coverage of the op set


def test_every_op_has_semantics():
    missing = [op.name for op in tape.OPS if op not in SEMANTICS]
    assert not missing


def _samples(rng: np.random.Generator) -> dict[type[TapeOp], tuple[tuple, dict]]:
    """One representative (arrays, params) per op, with non-default parameters."""
    x = uniform(rng, (2, 3), np.float32)
    y = uniform(rng, (2, 3), np.float32)
    img = uniform(rng, (1, 2, 5, 6), np.float64)
    samples = {op: ((x, y), {}) for op in tape.ELEMENTWISE_BINARY}
    samples |= {op: ((np.abs(x) + 0.5,), {}) for op in tape.ELEMENTWISE_UNARY}
    samples |= {op: ((x - 0.25,), {}) for op in tape.NUMERIC_UNARY}
    samples |= {op: ((x, y), {}) for op in tape.NUMERIC_BINARY}
    samples |= {op: ((x,), {"axis": -1, "keepdims": True}) for op in (tape.ArgMaxOp,
                                                                       tape.ArgMinOp)}
    samples[tape.CumsumOp] = ((x,), {"axis": 0, "reverse": True})
    samples[tape.IotaOp] = ((), {"shape": (2, 3), "dtype": np.float32, "axis": 1})
    i, j = rng.integers(-9, 9, (2, 2, 3)).astype(np.int32)
    samples |= {op: ((i, j), {}) for op in tape.INTEGER_BINARY}
    samples |= {op: ((i,), {}) for op in tape.INTEGER_UNARY}
    samples |= {op: ((x,), {}) for op in tape.IDENTITY_UNARY}
    samples |= {
        tape.CmpOp: ((x, y), {"predicate": "ge"}),
        tape.SelectOp: ((x > y, x, y), {}),
        tape.ConstantOp: ((), {"value": np.array([[1.5, -2.0], [np.nan, -np.inf]], np.float32)}),
        tape.CastOp: ((x,), {"dtype": np.float64}),
        tape.BroadcastOp: ((x[:1],), {"shape": (4, 2, 3)}),
        tape.ReshapeOp: ((x,), {"shape": (3, -1)}),
        tape.PermuteOp: ((x,), {"perm": (1, 0)}),
        tape.PadOp: ((x,), {"low": (1, -1), "high": (-1, 2), "value": -math.inf}),
        tape.SliceOp: ((x,), {"start": (0, 1), "stop": (2, 3), "step": (2, 1)}),
        tape.UnfoldOp: ((img,), {"kernel": (2, 3), "stride": (2, 1), "dilation": (1, 2)}),
        tape.FoldOp: ((uniform(rng, (1, 2, 2, 2, 2, 3), np.float64),),
                      {"kernel": (2, 3), "stride": (2, 1), "dilation": (1, 2), "spatial": (5, 6)}),
        tape.ConcatOp: ((x, y, x), {"axis": -1}),
        tape.TakeOp: ((x, np.array([[1, -1], [0, 5]], np.int32)), {"axis": -1}),
        tape.ScatterOp: ((x, np.array([2, -1, 0, 2], np.int64), uniform(rng, (2, 4), np.float32)),
                         {"kind": "max", "axis": 1}),
        tape.SumOp: ((x,), {"axes": -1, "keepdims": True}),
        tape.MaxOp: ((x,), {"axes": (1, 0), "keepdims": False}),
        tape.LayerNormOp: ((x,), {"eps": 0.25}),
        tape.LayerNormBackwardOp: ((x, y), {"eps": 0.25}),
        tape.SoftmaxOp: ((x,), {}),
        tape.SoftmaxBackwardOp: ((np.abs(x), y), {}),
        tape.MatmulOp: ((x, y.T.copy()), {}),
        tape.Conv2dOp: ((img, uniform(rng, (4, 1, 2, 3), np.float64)),
                        {"stride": (2, 1), "padding": (1, 0, 0, 2), "dilation": (1, 2),
                         "groups": 2}),
        tape.MaxPool2dOp: ((img,), {"kernel": (2, 3), "stride": (1, 2), "padding": (1, 1, 0, 1)}),
        tape.AvgPool2dOp: ((img,), {"kernel": (3, 2), "stride": (2, 1), "padding": (0, 1, 1, 0)}),
    }
    # a fused elementwise group: tanh(x * row) over x (2, 3) and a row (3,) it broadcasts
    body = Block(arg_types=[tape.tensor_type((), np.float32)] * 2)
    product = tape.MulOp.build(*body.args)
    activation = tape.TanhOp.build(product)
    body.add_ops([product, activation, tape.YieldOp(activation)])
    samples[tape.FusedOp] = ((x, uniform(rng, (3,), np.float32)), {"body": body})
    # the backward ops take a cotangent shaped like their forward op's result
    from tapeml.interpreters.tape import evaluate

    (x4, w4), conv = samples[tape.Conv2dOp]
    ct = uniform(rng, evaluate(tape.Conv2dOp, x4, w4, **conv).shape, np.float64)
    samples[tape.Conv2dBackwardInputOp] = ((ct, w4), {**conv, "spatial": x4.shape[2:]})
    samples[tape.Conv2dBackwardWeightOp] = ((x4, ct), {**conv, "kernel": w4.shape[2:]})
    for forward, backward in [(tape.MaxPool2dOp, tape.MaxPool2dBackwardOp),
                              (tape.AvgPool2dOp, tape.AvgPool2dBackwardOp)]:
        (xp,), pool = samples[forward]
        ct = uniform(rng, evaluate(forward, xp, **pool).shape, np.float64)
        samples[backward] = (((xp, ct), pool) if backward is tape.MaxPool2dBackwardOp
                             else ((ct,), {**pool, "spatial": xp.shape[2:]}))
    return samples


def test_samples_cover_every_op(rng):
    assert set(_samples(rng)) == set(tape.OPS)


@pytest.mark.parametrize("op_type", tape.OPS, ids=lambda op: op.name)
def test_params_round_trip(op_type, rng):
    arrays, params = _samples(rng)[op_type]
    module, op = build_module(op_type, *arrays, **params)
    check_round_trip(op)
    assert set(op.params) == {c.name for c in op.CLAUSES} | set(op.DERIVED) or \
        op_type is tape.ConstantOp
    # and the interpreter accepts it, with run_op's checks
    run_op(op_type, *arrays, **params)


# ----------------------------------------------------------------------------------------------
# Elementwise

BINARY = {
    "add": tape.AddOp, "sub": tape.SubOp, "mul": tape.MulOp, "div": tape.DivOp,
    "maximum": tape.MaximumOp, "minimum": tape.MinimumOp, "pow": tape.PowOp,
}
UNARY = {
    "neg": tape.NegOp, "exp": tape.ExpOp, "log": tape.LogOp, "tanh": tape.TanhOp,
    "sigmoid": tape.SigmoidOp, "relu": tape.ReluOp, "sqrt": tape.SqrtOp, "sin": tape.SinOp,
    "cos": tape.CosOp,
}
# Correctly rounded in IEEE arithmetic, so equal bit for bit to the reference.
EXACT = {"add", "sub", "mul", "div", "maximum", "minimum", "neg", "relu", "sqrt"}
ELEMENTWISE_SHAPES = [(), (1,), (5,), (3, 4), (2, 1, 3)]


def test_op_tables_are_complete():
    assert set(BINARY.values()) == set(tape.ELEMENTWISE_BINARY)
    assert set(UNARY.values()) == set(tape.ELEMENTWISE_UNARY)


BINARY_CASES = [
    pytest.param(name, shape, id=f"{name}-{shape}")
    for name in BINARY for shape in ELEMENTWISE_SHAPES
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(("name", "shape"), BINARY_CASES)
def test_binary(name, shape, dtype, rng):
    a = uniform(rng, shape, dtype, -3, 3)
    b = uniform(rng, shape, dtype, -3, 3)
    if name == "div":  # keep divisors away from zero (zeros are in the special-value tests)
        b = (np.sign(b) * (np.abs(b) + 0.5)).astype(dtype)
    if name == "pow":  # a positive base (negative bases are in the special-value tests)
        a = uniform(rng, shape, dtype, 0.25, 3)
    if name in ("maximum", "minimum") and a.size:
        b.reshape(-1)[::2] = a.reshape(-1)[::2]  # ties
    result = run_op(BINARY[name], a, b)
    expected = ref.elementwise(ref.SCALAR_BINARY[name], a, b)
    if name in EXACT:
        assert_exact(result, expected)
    else:
        assert_close(result, expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", ELEMENTWISE_SHAPES, ids=str)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary(name, shape, dtype, rng):
    low, high = {"log": (0.01, 5), "sqrt": (0, 5)}.get(name, (-4, 4))
    x = uniform(rng, shape, dtype, low, high)
    result = run_op(UNARY[name], x)
    expected = ref.elementwise(ref.SCALAR_UNARY[name], x)
    if name in EXACT:
        assert_exact(result, expected)
    else:
        assert_close(result, expected, dtype)


NAN, INF = math.nan, math.inf

# (op, lhs values, rhs values, expected): IEEE special cases, checked against literal values.
BINARY_SPECIALS = [
    ("add", [INF, -INF, NAN, 1.0], [-INF, -INF, 1.0, NAN], [NAN, -INF, NAN, NAN]),
    ("sub", [INF, INF, NAN, 0.0], [INF, -INF, 1.0, 0.0], [NAN, INF, NAN, 0.0]),
    ("mul", [0.0, INF, -INF, NAN], [INF, -2.0, -INF, 0.0], [NAN, -INF, INF, NAN]),
    ("div", [1.0, -1.0, 0.0, 1.0, INF, NAN], [0.0, 0.0, 0.0, -0.0, INF, 1.0],
     [INF, -INF, NAN, -INF, NAN, NAN]),
    ("maximum", [NAN, 1.0, NAN, INF, -INF, 2.0], [1.0, NAN, NAN, NAN, 3.0, 2.0],
     [NAN, NAN, NAN, NAN, 3.0, 2.0]),
    ("minimum", [NAN, 1.0, NAN, -INF, INF, 2.0], [1.0, NAN, NAN, NAN, 3.0, 2.0],
     [NAN, NAN, NAN, NAN, 3.0, 2.0]),
    ("pow", [0.0, -2.0, -2.0, -8.0, NAN, 1.0, 2.0, 0.0], [0.0, 2.0, 3.0, 0.5, 0.0, NAN, INF, -1.0],
     [1.0, 4.0, -8.0, NAN, 1.0, 1.0, INF, INF]),
]

UNARY_SPECIALS = [
    ("neg", [NAN, INF, -INF, 2.5], [NAN, -INF, INF, -2.5]),
    ("exp", [NAN, INF, -INF, 0.0], [NAN, INF, 0.0, 1.0]),
    ("log", [NAN, INF, 0.0, -1.0, 1.0], [NAN, INF, -INF, NAN, 0.0]),
    ("tanh", [NAN, INF, -INF, 0.0], [NAN, 1.0, -1.0, 0.0]),
    ("sigmoid", [NAN, INF, -INF, 0.0], [NAN, 1.0, 0.0, 0.5]),
    ("relu", [NAN, INF, -INF, -1.0, 0.0, 3.0], [NAN, INF, 0.0, 0.0, 0.0, 3.0]),
    ("sqrt", [NAN, INF, -1.0, 0.0, 4.0], [NAN, INF, NAN, 0.0, 2.0]),
    ("sin", [NAN, INF, -INF, 0.0, -0.0], [NAN, NAN, NAN, 0.0, -0.0]),
    ("cos", [NAN, INF, -INF, 0.0, -0.0], [NAN, NAN, NAN, 1.0, 1.0]),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", BINARY_SPECIALS, ids=lambda c: c[0])
def test_binary_special_values(case, dtype):
    name, a, b, expected = case
    result = run_op(BINARY[name], np.array(a, dtype), np.array(b, dtype))
    assert_exact(result, np.array(expected, dtype))
    # and the reference agrees with the literal table where it is defined for these inputs
    if name in ("maximum", "minimum"):
        assert_exact(ref.elementwise(ref.SCALAR_BINARY[name], np.array(a, dtype),
                                     np.array(b, dtype)), np.array(expected, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", UNARY_SPECIALS, ids=lambda c: c[0])
def test_unary_special_values(case, dtype):
    name, x, expected = case
    result = run_op(UNARY[name], np.array(x, dtype))
    assert_exact(result, np.array(expected, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_signed_zeros(dtype):
    zeros = np.array([0.0, -0.0], dtype)
    assert list(np.signbit(run_op(tape.NegOp, zeros))) == [True, False]
    assert list(np.signbit(run_op(tape.SqrtOp, zeros))) == [False, True]
    assert list(np.signbit(run_op(tape.DivOp, np.ones(2, dtype), zeros))) == [False, True]


def test_f32_overflow_stays_f32():
    """f32 arithmetic overflows where f64 would not: evidence the op computes in f32."""
    big = np.array([3e38, 89.0], np.float32)
    assert_exact(run_op(tape.AddOp, big, big), np.array([INF, 178.0], np.float32))
    assert run_op(tape.ExpOp, big)[1] == INF
    assert run_op(tape.ExpOp, big.astype(np.float64))[1] < INF


# ----------------------------------------------------------------------------------------------
# Comparison, select, constant, cast

CMP_VALUES = [1.0, 2.0, 2.0, NAN, 1.0, NAN, -INF, INF, 0.0, -0.0, -1.0]
CMP_OTHER = [2.0, 2.0, 1.0, 1.0, NAN, NAN, -INF, -INF, -0.0, 0.0, -1.5]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("predicate", tape.CMP_PREDICATES)
def test_cmp_special_values(predicate, dtype):
    a, b = np.array(CMP_VALUES, dtype), np.array(CMP_OTHER, dtype)
    result = run_op(tape.CmpOp, a, b, predicate=predicate)
    assert_exact(result, ref.cmp(a, b, predicate))
    nan = np.isnan(a) | np.isnan(b)
    assert result[nan].all() if predicate == "ne" else not result[nan].any()


@pytest.mark.parametrize("shape", [(), (1,), (4, 5), (2, 1, 3)], ids=str)
@pytest.mark.parametrize("predicate", tape.CMP_PREDICATES)
def test_cmp_random(predicate, shape, rng):
    # values on a coarse grid, so that ties are common
    a = rng.integers(-2, 3, size=shape).astype(np.float32)
    b = rng.integers(-2, 3, size=shape).astype(np.float32)
    assert_exact(run_op(tape.CmpOp, a, b, predicate=predicate), ref.cmp(a, b, predicate))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(), (1,), (6,), (3, 4), (2, 1, 3)], ids=str)
def test_select(shape, dtype, rng):
    cond = rng.random(shape) < 0.5
    on_true, on_false = uniform(rng, shape, dtype), uniform(rng, shape, dtype)
    if on_true.size:
        on_true.reshape(-1)[0] = NAN
    result = run_op(tape.SelectOp, cond, on_true, on_false)
    assert_exact(result, ref.select(cond, on_true, on_false))


CONSTANTS = {
    "rank0": lambda dt: np.array(2.5, dt),
    "size1": lambda dt: np.array([[-7.0]], dt),
    "splat": lambda dt: np.full((2, 3), 0.1, dt),
    "random": lambda dt: np.linspace(-1, 1, 12, dtype=dt).reshape(3, 4) ** 3,
    "specials": lambda dt: np.array([NAN, INF, -INF, -0.0, 1e-40], dt),
    "all_nan": lambda dt: np.full((3,), NAN, dt),
    "empty": lambda dt: np.zeros((0, 2), dt),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", list(CONSTANTS))
def test_constant(name, dtype):
    value = CONSTANTS[name](dtype)
    result = run_op(tape.ConstantOp, value=value)
    assert result.dtype == value.dtype and result.shape == value.shape
    np.testing.assert_array_equal(bits(result), bits(value), strict=True)  # bit for bit


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_constant_keeps_signed_zeros(dtype):
    value = np.array([0.0, -0.0, 0.0], dtype)
    result = run_op(tape.ConstantOp, value=value)
    np.testing.assert_array_equal(bits(result), bits(value), strict=True)


@pytest.mark.parametrize("target", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("source", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(), (1,), (3, 4)], ids=str)
def test_cast(shape, source, target, rng):
    x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-5, 5, size=shape)).astype(source)
    result = run_op(tape.CastOp, x, dtype=target)
    expected = ref.cast(x, target)
    assert_exact(result, expected)
    np.testing.assert_array_equal(bits(result), bits(expected))


def test_cast_f64_to_f32_rounding():
    eps = 2.0**-24  # half an f32 ulp at 1.0
    x = np.array([1 + eps, 1 + 3 * eps, 1 + 1.5 * eps, -(1 + eps), 1e39, -1e39, 1e-46, 2e-45,
                  NAN, -0.0, 3.4028235677973366e38], np.float64)
    expected = np.array([1.0, 1 + 4 * eps, 1 + 2 * eps, -1.0, INF, -INF, 0.0, 1.401298464324817e-45,
                         NAN, -0.0, INF], np.float32)
    result = run_op(tape.CastOp, x, dtype=np.float32)
    np.testing.assert_array_equal(bits(result), bits(expected))
    assert_exact(result, ref.cast(x, np.float32))


def test_cast_f32_to_f64_is_exact():
    x = np.array([0.1, -3.4028235e38, 1e-45, NAN, -INF, -0.0], np.float32)
    result = run_op(tape.CastOp, x, dtype=np.float64)
    assert result.dtype == np.float64
    np.testing.assert_array_equal(result, [float(v) for v in x])
    assert np.signbit(result[-1])


# ----------------------------------------------------------------------------------------------
# Layout

BROADCASTS = [
    ((3,), (2, 3)),
    ((1,), (4,)),
    ((), (2, 3)),
    ((), ()),
    ((2, 1, 3), (2, 4, 3)),
    ((1, 1), (5, 1, 3)),
    ((3, 1), (2, 3, 2)),
    ((3, 1), (0, 3, 2)),
    ((2, 3), (2, 3)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", BROADCASTS, ids=str)
def test_broadcast(case, dtype, rng):
    src, dst = case
    x = uniform(rng, src, dtype)
    result = run_op(tape.BroadcastOp, x, shape=dst)
    assert_exact(result, ref.broadcast(x, dst))
    if result.size:
        result.reshape(-1)[0] = 42.0  # a fresh array: writing it leaves the input alone
        assert 42.0 not in x


RESHAPES = [  # input shape, shape as given, the shape it means
    ((2, 3), (3, 2), (3, 2)),
    ((2, 3), (6,), (6,)),
    ((2, 3, 4), (4, -1), (4, 6)),
    ((2, 3, 4), (-1,), (24,)),
    ((), (1, 1), (1, 1)),
    ((1,), (), ()),
    ((1, 1, 1), (), ()),
    ((0, 3), (3, 0), (3, 0)),
    ((24,), (2, 3, 2, 2), (2, 3, 2, 2)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", RESHAPES, ids=str)
def test_reshape(case, dtype, rng):
    src, given, meant = case
    x = uniform(rng, src, dtype)
    result = run_op(tape.ReshapeOp, x, shape=given)
    assert_exact(result, ref.reshape(x, meant))


PERMUTES = [
    ((2, 3), (1, 0)),
    ((2, 3, 4), (2, 0, 1)),
    ((2, 3, 4), (0, 1, 2)),
    ((2, 3, 4), (1, 2, 0)),
    ((1, 2, 1, 3), (3, 1, 0, 2)),
    ((5,), (0,)),
    ((), ()),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", PERMUTES, ids=str)
def test_permute(case, dtype, rng):
    shape, perm = case
    x = uniform(rng, shape, dtype)
    assert_exact(run_op(tape.PermuteOp, x, perm=perm), ref.permute(x, perm))


PADS = [  # shape, low, high, value
    ((3,), (1,), (2,), 0.0),
    ((3,), (0,), (0,), 5.0),
    ((2, 3), (1, 0), (0, 2), -INF),
    ((4, 5), (-1, -2), (-1, 0), 0.0),
    ((4, 5), (2, -3), (-1, 1), 2.5),
    ((4, 5), (-3, 0), (2, -5), 0.1),
    ((3,), (-3,), (0,), 0.0),
    ((3,), (-3,), (2,), 7.0),
    ((3,), (-1,), (-2,), 7.0),
    ((2, 3, 4), (0, 1, -1), (1, -2, 2), -INF),
    ((1, 1), (0, 0), (0, 0), 0.0),
    ((0, 2), (1, 0), (1, 0), 3.0),
    ((2, 2), (1, 1), (1, 1), NAN),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", PADS, ids=str)
def test_pad(case, dtype, rng):
    shape, low, high, value = case
    x = uniform(rng, shape, dtype)
    result = run_op(tape.PadOp, x, low=low, high=high, value=value)
    assert_exact(result, ref.pad(x, low, high, value))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_pad_rank0(dtype):
    x = np.array(1.5, dtype)
    assert_exact(run_op(tape.PadOp, x, low=(), high=(), value=0.0), x)


SLICES = [  # shape, start, stop, step
    ((5,), (0,), (5,), (1,)),
    ((5,), (0,), (5,), (2,)),
    ((5,), (1,), (5,), (3,)),
    ((5,), (2,), (2,), (1,)),
    ((5,), (5,), (5,), (1,)),
    ((1,), (0,), (1,), (5,)),
    ((4, 6), (1, 0), (4, 6), (2, 4)),
    ((4, 6), (0, 3), (4, 3), (1, 2)),
    ((3, 4, 5), (0, 1, 2), (3, 4, 5), (1, 2, 7)),
    ((3, 4, 5), (2, 0, 1), (3, 4, 4), (5, 3, 2)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", SLICES, ids=str)
def test_slice(case, dtype, rng):
    shape, start, stop, step = case
    x = uniform(rng, shape, dtype)
    result = run_op(tape.SliceOp, x, start=start, stop=stop, step=step)
    assert_exact(result, ref.slice_(x, start, stop, step))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_slice_rank0(dtype):
    x = np.array(1.5, dtype)
    assert_exact(run_op(tape.SliceOp, x, start=(), stop=(), step=()), x)


WINDOWS = [  # input shape, kernel, stride, dilation
    ((7,), (3,), (1,), (1,)),
    ((2, 9), (2,), (3,), (1,)),
    ((10,), (3,), (2,), (2,)),
    ((6,), (1,), (4,), (1,)),
    ((5, 6), (2, 3), (1, 2), (1, 1)),
    ((3, 4), (3, 4), (1, 1), (1, 1)),
    ((1, 1), (1, 1), (1, 1), (1, 1)),
    ((2, 3, 7, 6), (3, 2), (2, 1), (2, 2)),
    ((1, 2, 8, 5), (2, 2), (3, 3), (1, 2)),
    ((4, 5, 6), (2, 2, 3), (1, 2, 1), (1, 1, 1)),
    ((2, 5, 5, 6), (2, 1, 2), (3, 1, 2), (2, 1, 2)),
]


def _window_ids(case) -> str:
    shape, kernel, stride, dilation = case
    return f"x{list(shape)}-k{list(kernel)}-s{list(stride)}-d{list(dilation)}"


def _unfolded_shape(shape, kernel, stride, dilation):
    k = len(kernel)
    windows = [ref._count(*a) for a in zip(shape[-k:], kernel, stride, dilation, strict=True)]
    return (*shape[: len(shape) - k], *windows, *kernel)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", WINDOWS, ids=_window_ids)
def test_unfold(case, dtype, rng):
    shape, kernel, stride, dilation = case
    x = uniform(rng, shape, dtype)
    result = run_op(tape.UnfoldOp, x, kernel=kernel, stride=stride, dilation=dilation)
    assert_exact(result, ref.unfold(x, kernel, stride, dilation))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", WINDOWS, ids=_window_ids)
def test_fold(case, dtype, rng):
    shape, kernel, stride, dilation = case
    spatial = shape[len(shape) - len(kernel):]
    y = uniform(rng, _unfolded_shape(shape, kernel, stride, dilation), dtype)
    result = run_op(tape.FoldOp, y, kernel=kernel, stride=stride, dilation=dilation,
                    spatial=spatial)
    assert_close(result, ref.fold(y, kernel, stride, dilation, spatial), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", WINDOWS, ids=_window_ids)
def test_unfold_fold_adjoint(case, dtype, rng):
    """<unfold(x), y> == <x, fold(y)>: fold is the transpose of unfold."""
    shape, kernel, stride, dilation = case
    spatial = shape[len(shape) - len(kernel):]
    params = {"kernel": kernel, "stride": stride, "dilation": dilation}
    x = uniform(rng, shape, dtype)
    y = uniform(rng, _unfolded_shape(shape, kernel, stride, dilation), dtype)
    ux = run_op(tape.UnfoldOp, x, **params)
    fy = run_op(tape.FoldOp, y, spatial=spatial, **params)
    lhs = float(np.sum(ux.astype(np.float64) * y))
    rhs = float(np.sum(x.astype(np.float64) * fy))
    scale = float(np.sum(np.abs(ux.astype(np.float64) * y))) + 1.0
    assert abs(lhs - rhs) <= tolerance(dtype)["rtol"] * scale


def test_fold_counts_overlaps():
    """Folding ones gives, at every position, the number of windows that read it."""
    y = np.ones((3, 3, 2, 2), np.float64)  # a 4x4 input, 2x2 windows with stride 1
    result = run_op(tape.FoldOp, y, kernel=(2, 2), stride=(1, 1), dilation=(1, 1), spatial=(4, 4))
    rows = np.array([1.0, 2.0, 2.0, 1.0])
    assert_exact(result, np.outer(rows, rows))
    # stride > kernel: positions between windows are read by none
    y = np.ones((2, 1), np.float32)
    result = run_op(tape.FoldOp, y, kernel=(1,), stride=(3,), dilation=(1,), spatial=(5,))
    assert_exact(result, np.array([1.0, 0.0, 0.0, 1.0, 0.0], np.float32))


CONCATS = [  # operand shapes, axis
    ([(2, 3, 4)], 0),
    ([(1, 3, 4), (3, 3, 4), (2, 3, 4)], 0),
    ([(2, 1, 4), (2, 3, 4), (2, 0, 4), (2, 2, 4)], 1),
    ([(2, 3, 1), (2, 3, 2), (2, 3, 3)], 2),
    ([(2, 3, 1), (2, 3, 2)], -1),
    ([(2, 3, 4), (5, 3, 4)], -3),
    ([(1,), (2,), (1,), (3,), (1,)], 0),
    ([(0, 2), (0, 2)], 0),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", CONCATS, ids=str)
def test_concat(case, dtype, rng):
    shapes, axis = case
    xs = [uniform(rng, s, dtype) for s in shapes]
    result = run_op(tape.ConcatOp, *xs, axis=axis)
    assert_exact(result, ref.concat(xs, axis % len(shapes[0])))


def test_concat_same_operand_twice(rng):
    x = uniform(rng, (2, 2), np.float32)
    arg_type = tape.tensor_type(x.shape, x.dtype)
    block = Block(arg_types=[arg_type])
    op = tape.ConcatOp.build(block.args[0], block.args[0], axis=1)
    block.add_ops([op, func.ReturnOp(op.results[0])])
    module = ModuleOp([func.FuncOp("f", ([arg_type], [op.results[0].type]), Region(block))])
    module.verify()
    (result,) = tapeml.interpret(module, "f", x)
    assert_exact(result, ref.concat([x, x], 1))


# ----------------------------------------------------------------------------------------------
# Reductions

AXIS_SUBSETS = [s for r in range(4) for s in itertools.combinations(range(3), r)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("keepdims", [False, True], ids=["drop", "keep"])
@pytest.mark.parametrize("axes", AXIS_SUBSETS, ids=str)
def test_sum(axes, keepdims, dtype, rng):
    x = uniform(rng, (2, 3, 4), dtype)
    result = run_op(tape.SumOp, x, axes=axes, keepdims=keepdims)
    assert_close(result, ref.sum_(x, axes, keepdims), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("keepdims", [False, True], ids=["drop", "keep"])
@pytest.mark.parametrize("axes", AXIS_SUBSETS, ids=str)
def test_max(axes, keepdims, dtype, rng):
    distinct = uniform(rng, (2, 3, 4), dtype)
    ties = rng.integers(-3, 4, size=(2, 3, 4)).astype(dtype)  # a coarse grid: ties are common
    for x in (distinct, ties):
        result = run_op(tape.MaxOp, x, axes=axes, keepdims=keepdims)
        assert_exact(result, ref.max_(x, axes, keepdims))


REDUCE_EDGES = [  # shape, axes as given, normalized axes, keepdims
    ((), (), (), False),
    ((), (), (), True),
    ((1, 3, 1), (0, 2), (0, 2), False),
    ((1, 3, 1), (1,), (1,), True),
    ((4,), (0,), (0,), False),
    ((4,), (0,), (0,), True),
    ((2, 3, 4), -1, (2,), False),
    ((2, 3, 4), (-1, 0), (0, 2), True),
    ((2, 3, 4), (2, 1), (1, 2), False),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", REDUCE_EDGES, ids=str)
@pytest.mark.parametrize("op_type", [tape.SumOp, tape.MaxOp], ids=["sum", "max"])
def test_reduce_edges(op_type, case, dtype, rng):
    shape, axes, normal, keepdims = case
    x = uniform(rng, shape, dtype)
    result = run_op(op_type, x, axes=axes, keepdims=keepdims)
    if op_type is tape.SumOp:
        assert_close(result, ref.sum_(x, normal, keepdims), dtype)
    else:
        assert_exact(result, ref.max_(x, normal, keepdims))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_sum_over_empty_axis_is_zero(dtype):
    x = np.zeros((0, 3), dtype)
    assert_exact(run_op(tape.SumOp, x, axes=(0,), keepdims=False), np.zeros(3, dtype))
    assert_exact(run_op(tape.SumOp, x, axes=(0, 1), keepdims=True), np.zeros((1, 1), dtype))
    assert_exact(run_op(tape.MaxOp, x, axes=(1,), keepdims=False), np.zeros(0, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_max_propagates_nan_and_infinities(dtype):
    x = np.array([[1.0, NAN, 3.0], [-INF, -INF, -INF], [-INF, INF, 0.0]], dtype)
    result = run_op(tape.MaxOp, x, axes=(1,), keepdims=False)
    assert_exact(result, np.array([NAN, -INF, INF], dtype))
    assert_exact(result, ref.max_(x, (1,), False))
    assert_exact(run_op(tape.MaxOp, x, axes=(0, 1), keepdims=False), np.array(NAN, dtype))
    assert_exact(run_op(tape.SumOp, x[1:], axes=(0,), keepdims=False),
                 np.array([-INF, NAN, -INF], dtype))


# ----------------------------------------------------------------------------------------------
# Contraction, convolution, pooling

MATMULS = [
    ((2, 3), (3, 4)),
    ((1, 1), (1, 1)),
    ((3, 1), (1, 2)),
    ((1, 5), (5, 1)),
    ((2, 0), (0, 3)),
    ((2, 3, 4), (2, 4, 5)),
    ((1, 2, 3), (1, 3, 1)),
    ((3, 2, 2), (3, 2, 2)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", MATMULS, ids=str)
def test_matmul(case, dtype, rng):
    a_shape, b_shape = case
    a, b = uniform(rng, a_shape, dtype), uniform(rng, b_shape, dtype)
    assert_close(run_op(tape.MatmulOp, a, b), ref.matmul(a, b), dtype)


CONVS = [  # input, weight, stride, padding [top, left, bottom, right], dilation, groups
    ((1, 1, 5, 5), (1, 1, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((2, 3, 6, 7), (4, 3, 3, 2), (2, 1), (1, 0, 2, 1), (1, 1), 1),
    ((1, 2, 7, 7), (3, 2, 3, 3), (1, 1), (1, 1, 1, 1), (2, 2), 1),
    ((2, 4, 5, 6), (6, 2, 3, 3), (1, 2), (0, 1, 1, 0), (1, 1), 2),
    ((1, 3, 6, 6), (3, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 3),
    ((1, 2, 5, 5), (4, 1, 2, 2), (1, 1), (0, 0, 1, 1), (1, 2), 2),
    ((1, 1, 3, 4), (2, 1, 1, 1), (3, 3), (0, 0, 0, 0), (1, 1), 1),
    ((1, 1, 2, 2), (1, 1, 3, 3), (1, 1), (2, 2, 2, 2), (1, 1), 1),
    ((1, 2, 4, 9), (2, 2, 2, 3), (1, 3), (0, 2, 0, 1), (1, 2), 1),
    ((3, 1, 1, 1), (2, 1, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
]


def _conv_id(case) -> str:
    x, w, s, p, d, g = case
    return f"x{list(x)}-w{list(w)}-s{list(s)}-p{list(p)}-d{list(d)}-g{g}"


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", CONVS, ids=_conv_id)
def test_conv2d(case, dtype, rng):
    x_shape, w_shape, stride, padding, dilation, groups = case
    x, w = uniform(rng, x_shape, dtype), uniform(rng, w_shape, dtype)
    params = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    result = run_op(tape.Conv2dOp, x, w, **params)
    assert_close(result, ref.conv2d(x, w, **params), dtype)


def test_conv2d_padding_sides():
    """A 1x1 kernel makes the padding visible: zeros exactly on the named sides."""
    x = np.ones((1, 1, 2, 3), np.float64)
    w = np.full((1, 1, 1, 1), 2.0)
    result = run_op(tape.Conv2dOp, x, w, stride=(1, 1), padding=(1, 0, 0, 2), dilation=(1, 1),
                    groups=1)
    expected = np.array([[0, 0, 0, 0, 0], [2, 2, 2, 0, 0], [2, 2, 2, 0, 0]], np.float64)
    assert_exact(result, expected[None, None])


POOLS = [  # input, kernel, stride, padding [top, left, bottom, right]
    ((1, 1, 4, 4), (2, 2), (2, 2), (0, 0, 0, 0)),
    ((2, 3, 5, 6), (3, 2), (1, 2), (1, 0, 1, 1)),
    ((1, 2, 5, 5), (3, 3), (2, 2), (1, 1, 1, 1)),
    ((1, 1, 3, 3), (3, 3), (1, 1), (2, 2, 2, 2)),
    ((1, 1, 4, 7), (1, 3), (3, 4), (0, 1, 2, 0)),
    ((1, 1, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    ((2, 1, 3, 5), (2, 4), (1, 1), (0, 2, 1, 0)),
]


def _pool_id(case) -> str:
    x, k, s, p = case
    return f"x{list(x)}-k{list(k)}-s{list(s)}-p{list(p)}"


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", POOLS, ids=_pool_id)
def test_maxpool2d(case, dtype, rng):
    shape, kernel, stride, padding = case
    # all negative, so a padding wrongly counted as zero would show
    x = uniform(rng, shape, dtype, -3.0, -0.5)
    result = run_op(tape.MaxPool2dOp, x, kernel=kernel, stride=stride, padding=padding)
    assert_exact(result, ref.maxpool2d(x, kernel, stride, padding))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", POOLS, ids=_pool_id)
def test_avgpool2d(case, dtype, rng):
    shape, kernel, stride, padding = case
    x = uniform(rng, shape, dtype, 0.5, 3.0)
    result = run_op(tape.AvgPool2dOp, x, kernel=kernel, stride=stride, padding=padding)
    assert_close(result, ref.avgpool2d(x, kernel, stride, padding), dtype)


def test_pool_padding_literals():
    x = np.ones((1, 1, 2, 2), np.float32)
    params = {"kernel": (2, 2), "stride": (1, 1), "padding": (1, 1, 0, 0)}
    # avg: zeros count, and the divisor stays 4 even where the window is mostly padding
    avg = run_op(tape.AvgPool2dOp, x, **params)
    assert_exact(avg, np.array([[[[0.25, 0.5], [0.5, 1.0]]]], np.float32))
    # max: padding is -inf, never 0
    neg = -x
    mx = run_op(tape.MaxPool2dOp, neg, **params)
    assert_exact(mx, np.full((1, 1, 2, 2), -1.0, np.float32))
    # a window made of padding only is -inf
    mx = run_op(tape.MaxPool2dOp, neg, kernel=(1, 1), stride=(1, 1), padding=(1, 0, 0, 0))
    assert_exact(mx, np.array([[[[-INF, -INF], [-1.0, -1.0], [-1.0, -1.0]]]], np.float32))


BOOL_LAYOUT = [  # layout ops move i1 tensors too
    (tape.BroadcastOp, [(3, 1)], {"shape": (2, 3, 4)},
     lambda x, p: ref.broadcast(x[0], p["shape"])),
    (tape.ReshapeOp, [(2, 6)], {"shape": (3, 4)}, lambda x, p: ref.reshape(x[0], p["shape"])),
    (tape.PermuteOp, [(2, 3, 4)], {"perm": (2, 0, 1)}, lambda x, p: ref.permute(x[0], p["perm"])),
    (tape.SliceOp, [(5, 6)], {"start": (1, 0), "stop": (5, 5), "step": (2, 3)},
     lambda x, p: ref.slice_(x[0], p["start"], p["stop"], p["step"])),
    (tape.ConcatOp, [(2, 1), (2, 3), (2, 2)], {"axis": 1}, lambda x, p: ref.concat(x, p["axis"])),
]


@pytest.mark.parametrize("case", BOOL_LAYOUT, ids=lambda c: c[0].name)
def test_layout_ops_on_i1(case, rng):
    op_type, shapes, params, reference = case
    xs = [rng.random(s) < 0.5 for s in shapes]
    result = run_op(op_type, *xs, **params)
    assert_exact(result, reference(xs, params))


NON_CONTIGUOUS = [  # op, params; each runs on a strided, transposed view of a larger array
    (tape.NegOp, {}),
    (tape.ReshapeOp, {"shape": (12,)}),
    (tape.PermuteOp, {"perm": (1, 0)}),
    (tape.PadOp, {"low": (1, -1), "high": (0, 2), "value": 0.0}),
    (tape.SliceOp, {"start": (0, 1), "stop": (4, 3), "step": (3, 1)}),
    (tape.UnfoldOp, {"kernel": (2, 2), "stride": (1, 1), "dilation": (2, 1)}),
    (tape.SumOp, {"axes": (0,), "keepdims": False}),
    (tape.MaxOp, {"axes": (1,), "keepdims": True}),
]


@pytest.mark.parametrize("case", NON_CONTIGUOUS, ids=lambda c: c[0].name)
def test_non_contiguous_inputs(case, rng):
    """Arguments that are views with odd strides give the same result as their copies."""
    op_type, params = case
    view = uniform(rng, (3, 8), np.float64)[:, ::2].T  # shape (4, 3), neither C nor F order
    assert not view.flags.c_contiguous and not view.flags.f_contiguous
    assert_exact(run_op(op_type, view, **params), run_op(op_type, view.copy(), **params))
