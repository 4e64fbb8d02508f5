"""Edge values through every tape op on every stage: each op alone, as a one-op program, on
inputs built from NaN, +-inf, +-0, subnormals, the largest finite values, +-1 and exact ties, in
f32 and f64, against an independent reference (reference.py, or the IEEE rules written out in
edge_values.py), bitwise where the order of the arithmetic is the same and within the
tolerance table (tolerances.py) where it is not. The stages are listed in edge_values.py.

Cases whose reference is `None` take the interpreter's result as the truth (the interpreter is
checked against a reference elsewhere for those: the fused group, whose ops each are here).
Known defects are marked xfail(strict) in `KNOWN`, so that a fix shows up as a failure that asks
for the mark to go."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import reference as ref
from bits import assert_same_bits, assert_within
from edge_values import (
    DTYPE_IDS,
    DTYPES,
    INF,
    KIND,
    NAN,
    STAGES,
    edge_values,
    elementwise,
    ieee_max_reduce,
    ieee_maximum,
    ieee_minimum,
    maxpool2d,
    maxpool2d_backward,
    pairs,
    run_interp,
    s_exp,
    s_log,
    s_pow,
    s_sqrt,
    s_tanh,
    sigmoid,
    tame_values,
    traced,
    unary_values,
    zero_padded,
)
from isolated import run_isolated
from tolerances import tolerance

import tapeml
from tapeml import ops
from tapeml.codegen.gemm import PARALLEL_FLOPS
from tapeml.dialects import tape
from tapeml.tracing.trace import bind


@dataclass(frozen=True)
class Case:
    """A function over `inputs` and what it must compute: `reference(*inputs)` gives the exact
    results (already in the results' dtypes) or, for a `tolerance` row with a relative bound,
    f64 results; `magnitude(*inputs)` the sum of the absolute terms behind each result (the
    scale of a reordered sum's rounding). `reference=None`: the interpreter's results."""

    name: str
    fn: Callable
    inputs: tuple[np.ndarray, ...]
    reference: Callable[..., tuple] | None
    row: str
    magnitude: Callable[..., tuple] | None = None


def one_op(op_type: type, **params: Any) -> Callable:
    return lambda *xs: bind(op_type, *xs, **params)


def _abs(xs) -> list[np.ndarray]:
    return [np.abs(x) for x in xs]


BINARY_REF = {"add": ref.s_add, "sub": ref.s_sub, "mul": ref.s_mul, "div": ref.s_div,
              "maximum": ieee_maximum, "minimum": ieee_minimum, "pow": s_pow}
UNARY_REF = {"neg": ref.s_neg, "exp": s_exp, "log": s_log, "tanh": s_tanh,
             "relu": lambda a: ieee_maximum(a, 0.0), "sqrt": s_sqrt, "sin": ref.s_sin,
             "cos": ref.s_cos}


def elementwise_cases(dt) -> list[Case]:
    a, b = pairs(dt)
    cases = []
    for op_type in tape.ELEMENTWISE_BINARY:
        name = op_type.name.removeprefix("tape.")
        fn = BINARY_REF[name]
        cases.append(Case(name, one_op(op_type), (a, b),
                          lambda a, b, fn=fn: (elementwise(fn, a.dtype, a, b),), name))
    x = unary_values(dt)
    for op_type in tape.ELEMENTWISE_UNARY:
        name = op_type.name.removeprefix("tape.")
        if name == "sigmoid":
            reference = lambda x: (sigmoid(x),)  # noqa: E731
        else:
            reference = lambda x, fn=UNARY_REF[name]: (elementwise(fn, x.dtype, x),)  # noqa: E731
        cases.append(Case(name, one_op(op_type), (x,), reference, name))
    if dt == np.float64:  # the worst found by a scan of 2.4M arguments against numpy
        for name, worst in [("sigmoid", [-36.798810341313796, -36.88743391689553]),
                            ("tanh", [-0.519023670607555, -0.532680122700141])]:
            op_type = {"sigmoid": tape.SigmoidOp, "tanh": tape.TanhOp}[name]
            reference = (lambda x: (sigmoid(x),)) if name == "sigmoid" else \
                (lambda x: (elementwise(s_tanh, x.dtype, x),))
            cases.append(Case(f"{name}-accuracy", one_op(op_type), (np.array(worst),),
                              reference, name))
    cases.append(Case("abs", ops.abs, (x,), lambda x: (elementwise(
        lambda v: NAN if v != v else abs(v), x.dtype, x),), "abs"))
    v = edge_values(dt)[:12]  # NaN, +-inf, +-0, the subnormals, the smallest normal, max
    c, d = (x.reshape(-1).copy() for x in np.meshgrid(v, v, indexing="ij"))
    cases.append(Case("cmp", lambda a, b: tuple(bind(tape.CmpOp, a, b, predicate=p)
                                                for p in tape.CMP_PREDICATES), (c, d),
                      lambda a, b: tuple(ref.cmp(a, b, p) for p in tape.CMP_PREDICATES),
                      "cmp"))
    # select on a comparison's result (a program's arguments are floats): a < b, NaN false
    cases.append(Case("select", lambda a, b: bind(tape.SelectOp, bind(
        tape.CmpOp, a, b, predicate="lt"), a, b), (a, b),
        lambda a, b: (ref.select(ref.cmp(a, b, "lt"), a, b),), "select"))
    value = edge_values(dt).reshape(3, 6)
    cases.append(Case("constant", lambda: bind(tape.ConstantOp, value=value), (),
                      lambda: (value.copy(),), "constant"))
    return cases


def cast_inputs(dt) -> np.ndarray:
    """For f64 -> f32: where rounding to f32 overflows, ties to even, goes subnormal or to 0."""
    if dt == np.float32:
        return edge_values(np.float32)
    eps = 2.0**-24
    tiny = 2.0**-149
    f32max = float(np.finfo(np.float32).max)
    return np.concatenate([edge_values(np.float64), np.array([
        f32max, 3.4028235677973366e38, np.nextafter(3.4028235677973366e38, 0), -3.5e38,
        1 + eps, 1 + 3 * eps, -(1 + eps), tiny / 2, np.nextafter(tiny / 2, 1), 0.75 * tiny,
        1.5 * tiny, -1.5 * tiny, 2.0**-126 * (1 - eps), 1e-300, -1e-300, 1e300])])


def layout_cases(dt) -> list[Case]:
    v = edge_values(dt)
    grid = v.reshape(3, 6)
    cube = np.concatenate([v, v[::-1]]).reshape(3, 3, 4)
    other = dict(f32=np.float64, f64=np.float32)[DTYPE_IDS[DTYPES.index(dt)]]
    cases = [
        Case("cast", one_op(tape.CastOp, dtype=other), (cast_inputs(dt),),
             lambda x: (ref.cast(x, other),), "cast"),
        Case("broadcast", one_op(tape.BroadcastOp, shape=(2, 3, 6)), (grid[:1],),
             lambda x: (ref.broadcast(x, (2, 3, 6)),), "broadcast"),
        Case("reshape", one_op(tape.ReshapeOp, shape=(2, 9)), (grid,),
             lambda x: (ref.reshape(x, (2, 9)),), "reshape"),
        Case("permute", one_op(tape.PermuteOp, perm=(2, 0, 1)), (cube,),
             lambda x: (ref.permute(x, (2, 0, 1)),), "permute"),
        Case("slice", one_op(tape.SliceOp, start=(0, 1), stop=(3, 6), step=(2, 2)), (grid,),
             lambda x: (ref.slice_(x, (0, 1), (3, 6), (2, 2)),), "slice"),
        Case("concat", one_op(tape.ConcatOp, axis=1), (grid, grid[:, :2], grid[:, ::-1]),
             lambda *xs: (ref.concat(xs, 1),), "concat"),
        Case("unfold", one_op(tape.UnfoldOp, kernel=(2, 3), stride=(1, 2), dilation=(1, 1)),
             (grid,), lambda x: (ref.unfold(x, (2, 3), (1, 2), (1, 1)),), "unfold"),
        # alone (its operand's buffer) and inside a group (the identity on each element)
        Case("stop_gradient", lambda x: (ops.stop_gradient(x),
                                         ops.negative(ops.stop_gradient(x))),
             (grid,), lambda x: (x.copy(), np.negative(x)), "stop_gradient"),
    ]
    # the pad value itself is an edge value; negative amounts crop
    pads = [(-0.0, (1, -1), (0, 2)), (NAN, (0, 2), (1, 0)), (-INF, (2, 0), (-1, 1)),
            (float(np.finfo(dt).smallest_subnormal), (0, 0), (1, 1))]
    cases.append(Case("pad", lambda x: tuple(ops.pad(x, tuple(zip(lo, hi, strict=True)), value)
                                             for value, lo, hi in pads), (grid,),
                      lambda x: tuple(ref.pad(x, lo, hi, value) for value, lo, hi in pads),
                      "pad"))
    # fold: kernel 2, stride 1 along one axis, so each position sums at most two taps (a
    # two-term sum is the same in any order): bitwise but for the sign of a zero
    windows = np.stack([v, v[::-1], v[3:].tolist() + v[:3].tolist()]).reshape(3, 9, 2)
    cases.append(Case("fold", one_op(tape.FoldOp, kernel=(2,), stride=(1,), dilation=(1,),
                                     spatial=(10,)), (windows,),
                      lambda y: (ref.fold(y, (2,), (1,), (1,), (10,)),), "fold",
                      lambda y: (ref.fold(np.abs(y), (2,), (1,), (1,), (10,)),)))
    return cases


def reduction_cases(dt) -> list[Case]:
    fi = np.finfo(dt)
    tiny, big = fi.smallest_subnormal, fi.max
    # max: ties of -0 and +0 in both orders, NaN first, last and alone, all -inf
    ties = np.array([[-0.0, 0.0, -0.0], [0.0, -0.0, -0.0], [-0.0, -0.0, -0.0], [NAN, 1.0, 2.0],
                     [1.0, 2.0, NAN], [-INF, -INF, -INF], [-INF, NAN, -INF], [big, INF, big],
                     [tiny, -tiny, 0.0], [-tiny, -0.0, -tiny], [-big, -big, -INF]], dt)
    cases = [Case(f"max-axes{axes}", one_op(tape.MaxOp, axes=axes, keepdims=False), (ties,),
                  lambda x, axes=axes: (ieee_max_reduce(x, axes, False),), "max")
             for axes in [(1,), (0,)]]
    cases.append(Case("max-of-zeros", one_op(tape.MaxOp, axes=(0, 1), keepdims=True),
                      (ties[:3],), lambda x: (ieee_max_reduce(x, (0, 1), True),), "max"))
    # sum: each row's terms chosen so that no order of adding them overflows differently
    rows = np.array([[NAN, 1.0, 2.0, 0.0], [INF, -INF, 1.0, 0.0], [INF, big, 1.0, -1.0],
                     [big, -big, 1.0, tiny], [big, big, 0.0, 0.0], [tiny, tiny, -tiny, tiny],
                     [-0.0, -0.0, -0.0, -0.0], [1.0, -1.0, 0.5, -0.5], [-big, 0.5, -0.0, -INF],
                     [fi.smallest_normal, -tiny, 0.0, 0.0]], dt)
    for axes in [(1,), (0,), (0, 1)]:
        cases.append(Case(f"sum-axes{axes}", one_op(tape.SumOp, axes=axes, keepdims=True),
                          (rows,), lambda x, axes=axes: (ref.sum_(x, axes, True),), "sum",
                          lambda x, axes=axes: (ref.sum_(np.abs(x), axes, True),)))
    return cases


def contraction_cases(dt) -> list[Case]:
    v, t = edge_values(dt), tame_values(dt)
    # two-term dot products: every edge value against tame ones (no product overflows)
    a = np.stack([v, np.roll(v, 5)], axis=1)  # (18, 2)
    b = np.stack([t[[0, 1, 4, 8]], t[[3, 2, 5, 6]]])  # (2, 4): NaN, +-inf, +-0, tiny, 1, 0.5
    cases = [
        Case("matmul-edge-x-tame", ops.matmul, (a, b), lambda a, b: (ref.matmul(a, b),),
             "matmul", lambda a, b: (ref.matmul(np.abs(a), np.abs(b)),)),
        Case("matmul-tame-x-edge", ops.matmul, (b.T.copy(), a.T.copy()),
             lambda a, b: (ref.matmul(a, b),), "matmul",
             lambda a, b: (ref.matmul(np.abs(a), np.abs(b)),)),
    ]
    x = v.reshape(1, 2, 3, 3)
    w = np.resize(t, (2, 2, 2, 2))
    for groups, padding in [(1, (1, 0, 0, 1)), (2, (1, 1, 1, 1))]:
        wg = w[:, : 2 // groups].copy()
        p = {"stride": (1, 1), "padding": padding, "dilation": (1, 1), "groups": groups}
        cases.append(Case(
            f"conv2d-g{groups}", one_op(tape.Conv2dOp, **p), (x, wg),
            lambda x, w, p=p: (ref.conv2d(zero_padded(x, p["padding"]), w, p["stride"],
                                          (0, 0, 0, 0), p["dilation"], p["groups"]),),
            "conv2d",
            lambda x, w, p=p: (ref.conv2d(zero_padded(np.abs(x), p["padding"]), np.abs(w),
                                          p["stride"], (0, 0, 0, 0), p["dilation"],
                                          p["groups"]),)))
    # the defect of issue 15: a grouped convolution's padded taps (0 * inf is NaN)
    p = {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 2}
    cases.append(Case("conv2d-padding-times-inf", one_op(tape.Conv2dOp, **p),
                      (np.ones((1, 2, 1, 1), dt), np.full((2, 1, 1, 1), INF, dt)),
                      lambda x, w: (np.where(np.pad(np.ones((1, 2, 1, 1)), ((0, 0), (0, 0),
                                                    (1, 1), (1, 1))) > 0, INF, NAN),),
                      "conv2d", lambda x, w: (np.full((1, 2, 3, 3), INF),)))
    ct = np.resize(t, (1, 2, 3, 3))
    p = {"stride": (1, 1), "padding": (1, 0, 0, 1), "dilation": (1, 1), "groups": 1}
    cases.append(Case(
        "conv2d_backward_input", one_op(tape.Conv2dBackwardInputOp, **p, spatial=(3, 3)),
        (ct, np.resize(v, (2, 2, 2, 2)).astype(dt)),
        lambda ct, w: (ref.conv2d_backward_input(ct, w, (1, 1), p["padding"], (1, 1), 1,
                                                 (3, 3)),), "conv2d",
        lambda ct, w: (ref.conv2d_backward_input(np.abs(ct), np.abs(w), (1, 1), p["padding"],
                                                 (1, 1), 1, (3, 3)),)))
    cases.append(Case(
        "conv2d_backward_weight", one_op(tape.Conv2dBackwardWeightOp, **p, kernel=(2, 2)),
        (x, ct),
        lambda x, ct: (ref.conv2d_backward_weight(zero_padded(x, p["padding"]), ct, (1, 1),
                                                  (0, 0, 0, 0), (1, 1), 1, (2, 2)),), "conv2d",
        lambda x, ct: (ref.conv2d_backward_weight(zero_padded(np.abs(x), p["padding"]),
                                                  np.abs(ct), (1, 1), (0, 0, 0, 0), (1, 1), 1,
                                                  (2, 2)),)))
    return cases


def pool_cases(dt) -> list[Case]:
    v, t = edge_values(dt), tame_values(dt)
    # windows of ties (-0 and +0 both ways), NaN, all -inf, the padding's -inf against -inf
    x = np.array([[-0.0, 0.0, 1.0, 1.0], [0.0, -0.0, 1.0, -INF], [NAN, 2.0, -INF, -INF],
                  [3.0, 3.0, -INF, -INF]], dt)[None, None]
    x = np.concatenate([x, v[:16].reshape(1, 1, 4, 4)], axis=1)  # (1, 2, 4, 4)
    cases = []
    for padding in [(0, 0, 0, 0), (1, 1, 0, 0)]:
        p = {"kernel": (2, 2), "stride": (2, 2), "padding": padding}
        cases.append(Case(f"maxpool2d-p{padding[0]}", one_op(tape.MaxPool2dOp, **p), (x,),
                          lambda x, p=p: (maxpool2d(x, **p),), "maxpool2d"))
        ct = np.resize(t[::-1], maxpool2d(x, **p).shape).astype(dt)
        cases.append(Case(f"maxpool2d_backward-p{padding[0]}",
                          one_op(tape.MaxPool2dBackwardOp, **p), (x, ct),
                          lambda x, ct, p=p: (maxpool2d_backward(x, ct, **p),),
                          "maxpool2d_backward",
                          lambda x, ct, p=p: (maxpool2d_backward(np.abs(x), np.abs(ct), **p),)))
    p = {"kernel": (2, 2), "stride": (1, 1), "padding": (1, 0, 0, 1)}
    cases.append(Case("avgpool2d", one_op(tape.AvgPool2dOp, **p), (x,),
                      lambda x: (ref.avgpool2d(x, **p),), "avgpool2d",
                      lambda x: (ref.avgpool2d(np.abs(x), **p),)))
    ct = np.resize(v[::-1], (1, 2, 4, 4)).astype(dt)
    cases.append(Case("avgpool2d_backward", one_op(tape.AvgPool2dBackwardOp, **p,
                                                   spatial=(4, 4)), (ct,),
                      lambda ct: (ref.avgpool2d_backward(ct, spatial=(4, 4), **p),),
                      "avgpool2d",
                      lambda ct: (ref.avgpool2d_backward(np.abs(ct), spatial=(4, 4), **p),)))
    return cases


def fused_case(dt) -> Case:
    """One tape.fused group (broadcasting its operands), the interpreter's result the truth."""
    v = edge_values(dt)

    def group(a, b, c):
        return ops.where(a > c, ops.tanh(a * b + c), ops.maximum(a, -c) / b)

    specs = (v.reshape(3, 6), np.roll(v, 7)[:6].copy(), v[[4, 5, 13]].reshape(3, 1).copy())
    program = traced(group, specs, fused=True)
    assert "tape.fused" in str(program)
    return Case("fused", lambda a, b, c: program(a, b, c), specs, None, "fused")


def all_cases(dt) -> list[Case]:
    return [*elementwise_cases(dt), *layout_cases(dt), *reduction_cases(dt),
            *contraction_cases(dt), *pool_cases(dt), fused_case(dt)]


CASES = {(dt, case.name): case for dt in DTYPES for case in all_cases(dt)}


# ----------------------------------------------------------------------------------------------
# Checking one case on one stage


def expected_results(case: Case) -> list[np.ndarray]:
    if case.reference is None:
        return run_interp(case.fn, case.inputs)
    return [np.asarray(r) for r in case.reference(*case.inputs)]


def check(case: Case, stage: str, dtype: Any) -> None:
    """The stage's results against the case's reference, as the tolerance table says."""
    got = STAGES[stage](case.fn, case.inputs)
    tol = tolerance(case.row, KIND[stage], dtype)
    with np.errstate(all="ignore"):  # the references meet inf - inf, overflow, ... as IEEE does
        expected = run_interp(case.fn, case.inputs) if tol.against == "interp" else \
            expected_results(case)
        magnitudes = case.magnitude(*case.inputs) if case.magnitude else [None] * len(expected)
        # a reference computed in f64, rounded once
        expected = [e.astype(g.dtype) if e.dtype.kind == "f" else e
                    for g, e in zip(got, expected, strict=True)]
    assert len(got) == len(expected)
    for i, (g, e, m) in enumerate(zip(got, expected, magnitudes, strict=True)):
        context = f"{case.name} [{np.dtype(dtype)}] on {stage}, result {i}"
        if e.dtype.kind != "f" or tol.bitwise or tol.ulp:
            assert_same_bits(g, e, ulp=tol.ulp, context=context)
            continue
        scale = np.abs(e.astype(np.float64)) if m is None else np.asarray(m, np.float64)
        # terms whose magnitudes overflow f64 still bound the error, by the largest double
        scale = np.where(np.isfinite(scale), scale, np.finfo(np.float64).max)
        bound = tol.rtol * scale + tol.atol
        assert_within(g, e, bound, context=context)


# ----------------------------------------------------------------------------------------------
# The tests

KNOWN: list[tuple[Callable[[str, str, Any], bool], str]] = []
"""(matches(case name, stage, dtype), reason): the cases that fail today, each marked
xfail(strict) with its reason."""


LIBM = {"tape.exp", "tape.log", "tape.tanh", "tape.sigmoid", "tape.pow", "tape.fused",
        "tape.sin", "tape.cos"}


def stages_for(case: Case) -> list[str]:
    """Every stage; the unfused CPU and GPU stages only where tape-fuse changes the program
    (a one-op program is the same either way), cpu-libm only where libm is called."""
    program = traced(case.fn, case.inputs)
    same = str(program) == str(traced(case.fn, case.inputs, fused=True))
    libm = any(op.name in LIBM for op in program.function.body.ops)
    return [s for s in STAGES if not (same and "unfused" in s) and (libm or s != "cpu-libm")]


def _params():
    for (dt, name), case in CASES.items():
        for stage in stages_for(case):
            marks = [pytest.mark.xfail(strict=True, reason=reason)
                     for match, reason in KNOWN if match(name, stage, dt)]
            yield pytest.param(dt, name, stage, id=f"{name}-{np.dtype(dt)}-{stage}", marks=marks)


@pytest.mark.parametrize(("dtype", "name", "stage"), list(_params()))
def test_edge_values(dtype, name, stage):
    check(CASES[(dtype, name)], stage, dtype)


def test_every_op_is_a_case():
    used = set()
    for case in CASES.values():
        used |= {type(op) for op in traced(case.fn, case.inputs).function.body.ops}
    integer_ops = {*tape.INTEGER_BINARY, *tape.INTEGER_UNARY}  # tests/test_integer_tensors.py
    integer_ops |= {*tape.NUMERIC_UNARY}  # their edge values: tests/test_numeric_ops.py
    integer_ops |= {*tape.NUMERIC_BINARY}  # fmod's edge values: tests/test_fmod.py
    integer_ops |= {tape.TakeOp, tape.ScatterOp}  # integer indices: test_gather_scatter.py
    integer_ops |= {*tape.SCANS}  # argmax, argmin, cumsum, iota: tests/test_numeric_ops.py
    integer_ops |= {tape.LayerNormOp, tape.LayerNormBackwardOp, tape.SoftmaxOp,
                    tape.SoftmaxBackwardOp}  # their edge rows: tests/test_normalization.py
    assert set(tape.OPS) - integer_ops <= used, set(tape.OPS) - integer_ops - used


def test_the_references_agree_with_the_literal_ieee_rules():
    """The hand-written rules that the cases expect, on literals."""
    assert str(ieee_maximum(-0.0, 0.0)) == "0.0" and str(ieee_maximum(0.0, -0.0)) == "0.0"
    assert str(ieee_minimum(-0.0, 0.0)) == "-0.0" and str(ieee_minimum(0.0, -0.0)) == "-0.0"
    assert np.isnan(ieee_maximum(NAN, 1.0)) and np.isnan(ieee_minimum(1.0, NAN))
    x = np.array([[NAN, 1.0], [2.0, 2.0]], np.float32)
    assert_same_bits(maxpool2d_backward(x[None, None], np.ones((1, 1, 1, 1)), (2, 2), (2, 2),
                                        (0, 0, 0, 0)), np.full((1, 1, 2, 2), NAN))
    assert s_pow(-0.0, -1.0) == -INF and s_pow(0.0, -0.5) == INF and np.isnan(s_pow(-8, 0.5))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_a_gemm_split_between_threads_on_edge_values(dtype):
    """A product big enough for the GEMM to share it out (PARALLEL_FLOPS), with edge values in
    its first rows of A and columns of B: the same bits on 1 and 2 threads (README), and the
    reference within the matmul row's bound, NaN and infinities exact."""
    n = 128
    assert 2 * n**3 >= PARALLEL_FLOPS
    rng = np.random.default_rng(15)
    edges = edge_values(dtype)
    a, b = rng.uniform(-1, 1, (n, n)).astype(dtype), rng.uniform(-1, 1, (n, n)).astype(dtype)
    # rows of A and columns of B: a NaN, an infinity, and finite edge values (no +-max, so
    # neither a product nor a sum overflows)
    finite = edges[np.isfinite(edges) & (np.abs(edges) < np.finfo(dtype).max)]
    a[0, 0], a[1, 1], b[5, 1], b[7, 2] = NAN, INF, -INF, NAN
    a[2, : finite.size], b[: finite.size, 0] = finite, finite[::-1]
    alone = STAGES["cpu-fused-t1"](ops.matmul, (a, b))[0]
    shared = STAGES["cpu-fused-t2"](ops.matmul, (a, b))[0]
    assert_same_bits(shared, alone, context="2 threads against 1")
    tol = tolerance("matmul", "arith", dtype)
    wide = np.longdouble  # numpy's own loops (not BLAS), in x87 extended precision
    with np.errstate(all="ignore"):
        expected = (a.astype(wide) @ b.astype(wide)).astype(dtype)
        bound = tol.rtol * (np.abs(a).astype(wide) @ np.abs(b).astype(wide)).astype(np.float64) \
            + tol.atol
    assert np.isnan(expected).any() and np.isinf(expected).any() and np.isfinite(expected).any()
    assert_within(shared, expected, bound, context="against the reference")


def test_two_threads_hand_even_tiny_loops_to_the_pool():
    """What the *-t2 stages test: the pool's path, though every array here is tiny."""
    case = CASES[(np.float32, "add")]
    with tapeml.profile() as stages:
        STAGES["cpu-fused-t2"](case.fn, case.inputs)
    (outlined,) = [s for s in stages if s.name == "outline-parallel-loops"]
    assert outlined.detail.endswith("outlined for the thread pool")
    assert not outlined.detail.startswith("0 ")


CHILDREN = {
    "tapeml.exp": "f, libm = tapeml.exp, True",
    "def pow": "def pow(a):\n    return a ** a\nf, libm = pow, False",
}


@pytest.mark.parametrize("name", list(CHILDREN))
def test_a_program_named_like_the_libm_function_it_calls(name):
    """In a child process, so that a crash fails only this test."""
    out = run_isolated("import numpy as np, tapeml\n" + CHILDREN[name] + "\n"
                       "x = np.array([0.5, 2.0])\n"
                       "print(tapeml.jit(f, libm=libm)(x).tolist(), f(x).tolist(), sep='|')")
    got, expected = out.strip().split("|")
    assert got == expected
