"""tape.take and tape.scatter (issue 17, indexing): their semantics against numpy written plainly
(an index i in [-n, n) is i mod n; take clamps the others, scatter drops them; a scatter set's
last update in row-major order wins), every stage against the interpreter bit for bit, and the
passes that must leave them alone. Their pullbacks: test_gather_scatter_grad.py."""

from __future__ import annotations

import math
import shutil
import subprocess

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from bits import assert_same_bits
from edge_values import cpu_threads, ieee_maximum, ieee_minimum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from real_gpu import GPU, run_on_gpu

import tapeml
from tapeml.codegen import get_backend
from tapeml.dialects import tape
from tapeml.errors import ShapeError
from tapeml.frontend.flops import op_flops
from tapeml.interpreters.tape import evaluate
from tapeml.transforms.fuse import fuse
from tapeml.transforms.outline_parallel import outline_parallel_loops
from tapeml.transforms.to_loops import lower_module

KINDS = ("set", "add", "max", "min")
MLIR = {np.dtype(np.bool_): "i1", np.dtype(np.int32): "i32", np.dtype(np.int64): "i64",
        np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}


# ----------------------------------------------------------------------------------------------
# The reference: one element at a time, in plain Python over numpy scalars


def _position(i: int, n: int) -> int | None:
    """Where index i lands along an axis of n, or None when it is outside [-n, n)."""
    i = int(i)
    return i + n if -n <= i < 0 else i if 0 <= i < n else None


def reference_take(x: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    n = x.shape[axis]
    out = np.zeros((*x.shape[:axis], *indices.shape, *x.shape[axis + 1:]), x.dtype)
    for where in np.ndindex(out.shape):
        i = int(indices[where[axis:axis + indices.ndim]])
        k = _position(i, n)
        k = k if k is not None else (0 if i < 0 else n - 1)  # clamped
        out[where] = x[(*where[:axis], k, *where[axis + indices.ndim:])]
    return out


def _combine(kind: str, old, new):
    if kind == "set":
        return new
    if kind == "add":
        with np.errstate(over="ignore", invalid="ignore"):
            return (np.asarray(old) + np.asarray(new))[()]  # numpy's wrapping, IEEE's sum
    if np.asarray(old).dtype.kind == "f":
        return (ieee_maximum if kind == "max" else ieee_minimum)(old, new)
    return max(old, new) if kind == "max" else min(old, new)


def reference_scatter(x: np.ndarray, indices: np.ndarray, updates: np.ndarray, kind: str,
                      axis: int) -> np.ndarray:
    """Each update element in row-major order, applied where its index is in range."""
    n = x.shape[axis]
    out = x.copy()
    for where in np.ndindex(updates.shape):
        k = _position(indices[where[axis:axis + indices.ndim]], n)
        if k is None:
            continue
        target = (*where[:axis], k, *where[axis + indices.ndim:])
        out[target] = _combine(kind, out[target], updates[where])
    return out


# ----------------------------------------------------------------------------------------------
# Data: edge values of each dtype, indices in range, negative and out of range both ways


def _data(dtype: np.dtype) -> st.SearchStrategy:
    if dtype.kind == "f":
        info = np.finfo(dtype)
        special = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, float(info.max),
                   float(info.min), float(info.tiny)]
        return st.one_of(st.sampled_from(special), st.floats(-4, 4, width=info.bits))
    if dtype.kind == "b":
        return st.booleans()
    info = np.iinfo(dtype)
    return st.one_of(st.sampled_from([int(info.min), int(info.max), 0, -1, 1]),
                     st.integers(-9, 9))


def _indices(n: int, dtype: np.dtype) -> st.SearchStrategy:
    info = np.iinfo(dtype)
    return st.one_of(st.integers(-n, max(n - 1, -n)),  # in range (repeats likely: few values)
                     st.integers(-n - 3, n + 3),  # just out of range, both ways
                     st.sampled_from([int(info.min), int(info.max), -n - 1, n]))


@st.composite
def cases(draw, kind: str | None = None):
    """(x, indices, axis) for take, or (x, indices, updates, axis) for a scatter `kind`."""
    dtypes = ["bool", "int32", "int64", "float32", "float64"]
    if kind not in (None, "set"):
        dtypes.remove("bool")
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    shape = draw(st.lists(st.integers(0 if kind else 1, 3), min_size=1, max_size=3))
    axis = draw(st.integers(0, len(shape) - 1))
    n = shape[axis]
    index_dtype = np.dtype(draw(st.sampled_from(["int32", "int64"])))
    index_shape = draw(st.lists(st.integers(0, 3), max_size=2))
    indices = draw(hnp.arrays(index_dtype, index_shape, elements=_indices(n, index_dtype)))
    x = draw(hnp.arrays(dtype, shape, elements=_data(dtype)))
    if kind is None:
        return x, indices, axis
    gathered = (*shape[:axis], *index_shape, *shape[axis + 1:])
    return x, indices, draw(hnp.arrays(dtype, gathered, elements=_data(dtype))), axis


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_take_is_numpy_take_clamped(case):
    x, indices, axis = case
    got = evaluate(tape.TakeOp, x, indices, axis=axis)
    assert_same_bits(got, reference_take(x, indices, axis))
    n = x.shape[axis]
    if ((indices >= -n) & (indices < n)).all():  # numpy's own take agrees where it is defined
        assert_same_bits(got, np.take(x, indices, axis=axis))


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_scatter_applies_updates_in_row_major_order(kind, data):
    x, indices, updates, axis = data.draw(cases(kind))
    got = evaluate(tape.ScatterOp, x, indices, updates, kind=kind, axis=axis)
    assert_same_bits(got, reference_scatter(x, indices, updates, kind, axis))


def test_scatter_agrees_with_numpy_ufunc_at_on_integers():
    """Integer add, max and min do not depend on the order: numpy's ufunc.at is a reference
    written another way (indices normalized, the dropped ones left out)."""
    rng = np.random.default_rng(0)
    x = rng.integers(-2**31, 2**31, (4, 7), dtype=np.int64).astype(np.int32)
    indices = rng.integers(-9, 9, (3, 5)).astype(np.int64)
    updates = rng.integers(-2**31, 2**31, (4, 3, 5), dtype=np.int64).astype(np.int32)
    keep = (indices >= -7) & (indices < 7)
    for kind, ufunc in [("add", np.add), ("max", np.maximum), ("min", np.minimum)]:
        expected = x.copy()
        with np.errstate(over="ignore"):
            ufunc.at(expected, (slice(None), indices[keep] % 7), updates[:, keep])
        got = evaluate(tape.ScatterOp, x, indices, updates, kind=kind, axis=1)
        assert_same_bits(got, expected)


def test_the_rules_on_literals():
    x = np.array([10.0, 20.0, 30.0], np.float32)
    take = evaluate(tape.TakeOp, x, np.array([0, -1, -3, 3, -4, 2**31 - 1, -2**31], np.int32),
                    axis=0)
    assert take.tolist() == [10, 30, 10, 30, 10, 30, 10]
    indices = np.array([1, -2, 3, -4, 0, 2], np.int64)
    updates = np.array([1.0, 2.0, 5.0, 7.0, np.nan, -0.0], np.float32)
    set_ = evaluate(tape.ScatterOp, x, indices, updates, kind="set", axis=0)
    assert_same_bits(set_, np.array([np.nan, 2.0, -0.0], np.float32))  # the last one wins
    add = evaluate(tape.ScatterOp, x, indices, updates, kind="add", axis=0)
    assert_same_bits(add, np.array([np.nan, 23.0, 30.0], np.float32))
    top = evaluate(tape.ScatterOp, np.array([-0.0, 1.0], np.float32), np.array([0, 0]),
                   np.array([0.0, -0.0], np.float32), kind="max", axis=0)
    assert_same_bits(top, np.array([0.0, 1.0], np.float32))  # IEEE: -0 < +0
    wrapped = evaluate(tape.ScatterOp, np.array([2**31 - 1], np.int32), np.array([0, 0]),
                       np.array([1, 1], np.int32), kind="add", axis=0)
    assert wrapped.tolist() == [-2**31 + 1]


# ----------------------------------------------------------------------------------------------
# Shape rules


def _t(shape, dtype) -> object:
    return tape.tensor_type(shape, dtype)


def test_shapes_and_types():
    x, i = _t((2, 5, 3), np.float32), _t((4, 1), np.int32)
    assert tape.TakeOp.infer(x, i, axis=1) == _t((2, 4, 1, 3), np.float32)
    assert tape.TakeOp.infer(x, _t((), np.int64), axis=2) == _t((2, 5), np.float32)
    assert tape.ScatterOp.infer(x, i, _t((2, 4, 1, 3), np.float32), kind="min", axis=1) == x
    assert tape.TakeOp.normalize([x, i], {"axis": -1}) == {"axis": 2}
    empty = tape.TakeOp.infer(_t((0, 3), np.float32), _t((2,), np.int32), axis=1)
    assert empty == _t((0, 2), np.float32)  # an empty axis, but nothing to take


@pytest.mark.parametrize(("build", "message"), [
    (lambda: tape.TakeOp.infer(_t((2, 3), np.float32), _t((2,), np.float32), axis=0),
     "tape.take: indices must be a statically shaped tensor of i32 or i64, got tensor<2xf32>"),
    (lambda: tape.TakeOp.infer(_t((2, 3), np.float32), _t((2,), np.int32), axis=2),
     "tape.take: axis 2 is out of range for x tensor<2x3xf32>"),
    (lambda: tape.TakeOp.infer(_t((2, 0), np.float32), _t((1,), np.int32), axis=1),
     "tape.take: cannot take tensor<1xi32> positions from axis 1 of x tensor<2x0xf32>"),
    (lambda: tape.ScatterOp.infer(_t((3,), np.bool_), _t((2,), np.int32), _t((2,), np.bool_),
                                  kind="add", axis=0),
     "tape.scatter: x of a scatter add must be a statically shaped tensor of i32, i64, f32 or "
     "f64, got tensor<3xi1>"),
    (lambda: tape.ScatterOp.infer(_t((3, 4), np.float32), _t((2,), np.int64),
                                  _t((2, 4), np.float32), kind="set", axis=1),
     "tape.scatter: updates must have shape [3, 2]"),
    (lambda: tape.ScatterOp.infer(_t((3,), np.float32), _t((2,), np.int64),
                                  _t((2,), np.float64), kind="set", axis=0),
     "tape.scatter: updates must have x's element type; got x tensor<3xf32> and updates "
     "tensor<2xf64>"),
    (lambda: tape.ScatterOp.infer(_t((3,), np.float32), _t((2,), np.int64),
                                  _t((2,), np.float32), kind="mul", axis=0),
     "tape.scatter: kind must be one of set, add, max, min, got 'mul'"),
])
def test_shape_errors_name_the_op_and_the_shapes(build, message):
    with pytest.raises(ShapeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build()


def test_flops():
    x = tape.ConstantOp.build(value=np.zeros((4, 3), np.float32))
    i = tape.ConstantOp.build(value=np.zeros((5,), np.int32))
    u = tape.ConstantOp.build(value=np.zeros((5, 3), np.float32))
    assert op_flops(tape.TakeOp.build(x, i, axis=0)) == 0
    assert op_flops(tape.ScatterOp.build(x, i, u, kind="add", axis=0)) == 15
    assert op_flops(tape.ScatterOp.build(x, i, u, kind="set", axis=0)) == 0


# ----------------------------------------------------------------------------------------------
# Every stage against the interpreter, bit for bit

I32, I64 = np.iinfo(np.int32), np.iinfo(np.int64)
# repeats, negatives, out of range both ways (by one and by far), the extremes
INDEX_2x3 = np.array([[1, -3, 1], [7, -4, I32.min]], np.int32)  # axes of 2 and 3
INDEX_6 = np.array([3, -1, 3, 4, -5, I64.max], np.int64)  # axes of 4 and 5
INDEX_RANK0 = np.array(-2, np.int32)


def _edge_data(dtype: np.dtype, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype.kind == "f":
        info = np.finfo(dtype)
        pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, info.max, info.min,
                         info.tiny, 2.5, -0.5], dtype)
    elif dtype.kind == "b":
        pool = np.array([True, False])
    else:
        info = np.iinfo(dtype)
        pool = np.array([info.min, info.max, 0, 1, -1, 7, -7], dtype)
    return rng.choice(pool, size=shape)


def _stage_program(dtype: np.dtype) -> tuple[tapeml.Program, tuple[np.ndarray, ...]]:
    """Takes along each axis (the indices of rank 2, 1 and 0) and scatters of every kind the
    dtype takes along each axis, one of them on a rank-1 x (no parallel dims: one loop)."""
    t = MLIR[dtype]
    x, x1 = f"tensor<2x4x3x{t}>", f"tensor<5x{t}>"
    i2, i1, i0 = "tensor<2x3xi32>", "tensor<6xi64>", "tensor<i32>"
    u0, u1, u2 = f"tensor<2x3x4x3x{t}>", f"tensor<2x6x3x{t}>", f"tensor<2x4x2x3x{t}>"
    lines = [f"%t0 = tape.take %x, %i2 axis = 0 : {x}, {i2} -> {u0}",
             f"%t1 = tape.take %x, %i1 axis = 1 : {x}, {i1} -> {u1}",
             f"%t2 = tape.take %x, %i0 axis = 2 : {x}, {i0} -> tensor<2x4x{t}>"]
    results = [u0, u1, f"tensor<2x4x{t}>"]
    kinds = ["set"] if dtype.kind == "b" else list(KINDS)
    for k in kinds:
        lines += [f"%{k}0 = tape.scatter {k}, %x, %i2, %u0 axis = 0 : {x}, {i2}, {u0} -> {x}",
                  f"%{k}1 = tape.scatter {k}, %x, %i1, %u1 axis = 1 : {x}, {i1}, {u1} -> {x}",
                  f"%{k}2 = tape.scatter {k}, %x, %i2, %u2 axis = 2 : {x}, {i2}, {u2} -> {x}",
                  f"%{k}3 = tape.scatter {k}, %x1, %i1, %v axis = 0 : {x1}, {i1}, "
                  f"tensor<6x{t}> -> {x1}"]
        results += [x, x, x, x1]
    names = [line.split(" = ")[0] for line in lines]
    text = (f"func.func @f(%x: {x}, %x1: {x1}, %i2: {i2}, %i1: {i1}, %i0: {i0}, %u0: {u0}, "
            f"%u1: {u1}, %u2: {u2}, %v: tensor<6x{t}>) -> ({', '.join(results)}) {{\n  "
            + "\n  ".join(lines)
            + f"\n  func.return {', '.join(names)} : {', '.join(results)}\n}}\n")
    args = (_edge_data(dtype, (2, 4, 3), 1), _edge_data(dtype, (5,), 2), INDEX_2x3, INDEX_6,
            INDEX_RANK0, _edge_data(dtype, (2, 3, 4, 3), 3), _edge_data(dtype, (2, 6, 3), 4),
            _edge_data(dtype, (2, 4, 2, 3), 5), _edge_data(dtype, (6,), 6))
    return tapeml.Program.parse(text), args


def _lowered(program: tapeml.Program, args, *, outlined: bool = False):
    """tape-to-loops (and outline-parallel-loops with every loop outlined), interpreted."""
    lowered = tapeml.Program.parse(str(program))
    shapes = [r.type for r in lowered.function.body.block.last_op.arguments]
    lower_module(lowered.module, libm=True, row_reductions=outlined)
    if outlined:
        outline_parallel_loops(lowered.module, min_work=0)
        assert "kernel.parallel_for" in str(lowered)
    lowered.module.verify()
    outs = [np.zeros(max(1, math.prod(s.get_shape())), tape.dtype_of(s)) for s in shapes]
    tapeml.interpret(lowered.module, lowered.name, *(a.reshape(-1) for a in args), *outs)
    return [o.reshape(s.get_shape()) for o, s in zip(outs, shapes, strict=True)]


def _cpu(program, args, threads: int):
    with cpu_threads(threads):
        return get_backend("cpu").compile(program.module)(*args)


STAGES = {  # the plain loops are interpreted inside "outlined" too (make test's time)
    "outlined": lambda p, a: _lowered(p, a, outlined=True),
    "cpu-t1": lambda p, a: _cpu(p, a, 1),
    "cpu-t2": lambda p, a: _cpu(p, a, 2),
    "cpu-unfused": lambda p, a: get_backend("cpu", fuse=False).compile(p.module)(*a),
    "gpu": lambda p, a: get_backend("cuda", emulate=True, gemm_tile=4).compile(p.module)(*a),
} | ({"device": lambda p, a: run_on_gpu(p.module, *a)} if GPU else {})
DTYPES = [np.dtype(d) for d in ("bool", "int32", "int64", "float32", "float64")]


@pytest.mark.parametrize("stage", list(STAGES))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: MLIR[d])
def test_every_stage_agrees_with_the_interpreter_bit_for_bit(dtype, stage):
    program, args = _stage_program(dtype)
    expected = tapeml.interpret(program.module, program.name, *args)
    # the interpreter is the reference written plainly (checked above), on these cases too
    assert_same_bits(expected[1], reference_take(args[0], INDEX_6, 1))
    assert_same_bits(expected[3], reference_scatter(args[0], INDEX_2x3, args[5], "set", 0))
    got = STAGES[stage](program, args)
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert_same_bits(g, e, context=f"result {k}")


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")
@pytest.mark.parametrize("dtype", [np.dtype(np.int32), np.dtype(np.float32),
                                   np.dtype(np.float64)], ids=lambda d: MLIR[d])
def test_the_ptx_assembles(dtype, tmp_path):
    program, _ = _stage_program(dtype)
    stages = get_backend("cuda", arch="sm_90").compile(program.module, stages=True).stages
    (tmp_path / "k.ptx").write_text(stages["ptx"])
    subprocess.run(["ptxas", "--gpu-name", "sm_90", str(tmp_path / "k.ptx"), "-o",
                    str(tmp_path / "k.cubin")], check=True)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases("add"), kind=st.sampled_from(KINDS))
def test_generated_scatters_and_takes_compile_to_the_same_bits(case, kind):
    """Shapes, axes, dtypes and indices drawn, the CPU at 2 threads (every loop threaded)."""
    x, indices, updates, axis = case
    if x.shape[axis] == 0 and updates.size:
        indices = np.zeros(0, indices.dtype)  # a take needs a non-empty axis for a non-empty
        # result
        updates = np.zeros((*x.shape[:axis], *indices.shape, *x.shape[axis + 1:]), x.dtype)
    t = MLIR[x.dtype]
    xt, it = f"tensor<{'x'.join(map(str, x.shape))}x{t}>", \
        f"tensor<{''.join(f'{d}x' for d in indices.shape)}{MLIR[indices.dtype]}>"
    ut = f"tensor<{''.join(f'{d}x' for d in updates.shape)}{t}>"
    program = tapeml.Program.parse(
        f"func.func @f(%x: {xt}, %i: {it}, %u: {ut}) -> ({xt}, {ut}) {{\n"
        f"  %s = tape.scatter {kind}, %x, %i, %u axis = {axis} : {xt}, {it}, {ut} -> {xt}\n"
        f"  %t = tape.take %x, %i axis = {axis} : {xt}, {it} -> {ut}\n"
        f"  func.return %s, %t : {xt}, {ut}\n}}\n")
    expected = tapeml.interpret(program.module, program.name, x, indices, updates)
    assert_same_bits(expected[0], reference_scatter(x, indices, updates, kind, axis))
    for got, e in zip(_cpu(program, (x, indices, updates), 2), expected, strict=True):
        assert_same_bits(got, e)


def test_fusion_leaves_them_alone():
    """tape-fuse groups the elementwise ops around a take and a scatter, not them (exact ops
    only, so the CPU's fused loops give the same bits)."""
    program = tapeml.Program.parse("""
func.func @f(%x: tensor<4x3xf32>, %i: tensor<5xi32>, %u: tensor<5x3xf32>) -> tensor<4x3xf32> {
  %a = tape.mul %x, %x : tensor<4x3xf32>
  %b = tape.sub %a, %x : tensor<4x3xf32>
  %t = tape.take %b, %i axis = 0 : tensor<4x3xf32>, tensor<5xi32> -> tensor<5x3xf32>
  %c = tape.relu %t : tensor<5x3xf32>
  %d = tape.add %c, %u : tensor<5x3xf32>
  %s = tape.scatter max, %b, %i, %d axis = 0
      : tensor<4x3xf32>, tensor<5xi32>, tensor<5x3xf32> -> tensor<4x3xf32>
  %e = tape.neg %s : tensor<4x3xf32>
  func.return %e : tensor<4x3xf32>
}""")
    rng = np.random.default_rng(3)
    args = (rng.standard_normal((4, 3)).astype(np.float32), np.array([1, -1, 1, 9, -9], np.int32),
            rng.standard_normal((5, 3)).astype(np.float32))
    expected = tapeml.interpret(program.module, program.name, *args)
    fused = tapeml.Program.parse(str(program))
    fuse(fused.module)
    text = str(fused)
    assert "tape.fused" in text and "tape.take" in text and "tape.scatter max" in text
    assert_same_bits(tapeml.interpret(fused.module, fused.name, *args)[0], expected[0])
    assert_same_bits(get_backend("cpu").compile(program.module)(*args)[0], expected[0])


def test_two_threads_do_not_race_on_a_set():
    """Many updates to few elements: each column's updates apply in order on one thread, so
    the last one wins everywhere, with every loop threaded at 2 threads and on the GPU."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 16)).astype(np.float32)
    indices = rng.integers(-2, 2, 50).astype(np.int32)
    updates = rng.standard_normal((50, 16)).astype(np.float32)
    program = tapeml.Program.parse(
        "func.func @f(%x: tensor<2x16xf32>, %i: tensor<50xi32>, %u: tensor<50x16xf32>)"
        " -> tensor<2x16xf32> {\n"
        "  %r = tape.scatter set, %x, %i, %u axis = 0 : tensor<2x16xf32>, tensor<50xi32>, "
        "tensor<50x16xf32> -> tensor<2x16xf32>\n  func.return %r : tensor<2x16xf32>\n}\n")
    expected = reference_scatter(x, indices, updates, "set", 0)
    assert_same_bits(_cpu(program, (x, indices, updates), 2)[0], expected)
    assert_same_bits(get_backend("cuda", emulate=True).compile(program.module)(
        x, indices, updates)[0], expected)
