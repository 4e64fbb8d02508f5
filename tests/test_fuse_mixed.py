"""tape-fuse over mixed element types (issue 17, part 5): compares feeding selects, casts inside
float chains, integer index arithmetic, and iotas, which a group computes as `tape.index` (its
loop's position) instead of reading a buffer. Every fused program is checked against the
interpreter on the unfused program bit for bit: the fused program interpreted, the CPU at 1 and
2 threads, the emulated GPU, and its PTX through ptxas; and the fused IR's shape (how many
groups, what is left outside them, no intermediate buffer once lowered), so a regression that
splits a group or materializes a mask shows."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter

import numpy as np
import pytest
from bits import assert_same_bits
from edge_values import cpu_threads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from real_gpu import GPU, run_on_gpu
from xdsl.dialects import memref

import tapeml
from tapeml import Spec, ops
from tapeml.codegen import get_backend
from tapeml.dialects import tape
from tapeml.errors import ShapeError
from tapeml.transforms.differentiate import differentiate
from tapeml.transforms.fuse import fuse
from tapeml.transforms.to_loops import lower_module

MLIR = {np.dtype(np.bool_): "i1", np.dtype(np.int32): "i32", np.dtype(np.int64): "i64",
        np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
DTYPE = {v: k for k, v in MLIR.items()}


# ----------------------------------------------------------------------------------------------
# Running a program everywhere


def _copy(program: tapeml.Program) -> tapeml.Program:
    """A copy, not a print-parse round trip: dense<[0.0, -0.0]> prints as a splat (xDSL's
    printer compares the values, constants.py's print_dense keeps that form)."""
    return tapeml.Program(program.module.clone(), program.name)


def _fused(program: tapeml.Program) -> tapeml.Program:
    fused = _copy(program)
    fuse(fused.module)
    fused.module.verify()
    return fused


def _interpret(program: tapeml.Program, args) -> list[np.ndarray]:
    return list(tapeml.interpret(program.module, program.name, *args))


def _same(got, expected, stage: str) -> None:
    assert len(got) == len(expected), stage
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert_same_bits(g, e, context=f"{stage}, result {k}")


def check_everywhere(program: tapeml.Program, args, gpu: bool = True) -> tapeml.Program:
    """The unfused program's interpretation is the answer; the fused program interpreted, on the
    CPU (1 and 2 threads, every parallel loop threaded) and on the emulated GPU give its bits.
    Returns the fused program."""
    expected = _interpret(program, args)
    fused = _fused(program)
    _same(_interpret(fused, args), expected, "fused, interpreted")
    for threads in (1, 2):
        with cpu_threads(threads):
            _same(get_backend("cpu").compile(program.module)(*args), expected,
                  f"cpu, {threads} threads")
    if gpu:
        _same(get_backend("cuda", emulate=True, gemm_tile=4).compile(program.module)(*args),
              expected, "emulated gpu")
        if GPU:
            _same(run_on_gpu(program.module, *args), expected, "gpu")
    return fused


def _ops_outside(program: tapeml.Program) -> Counter[str]:
    """The ops of the function's body (a group counts as one), return left out."""
    return Counter(op.name for op in program.function.body.ops if op.name != "func.return")


def _groups(program: tapeml.Program) -> list[tape.FusedOp]:
    return [op for op in program.function.body.ops if isinstance(op, tape.FusedOp)]


def _allocations(program: tapeml.Program) -> int:
    """memref.allocs left once the fused program is lowered (outputs are arguments, so none
    means no intermediate buffer)."""
    lowered = _copy(program)
    lower_module(lowered.module)
    return sum(isinstance(op, memref.AllocOp) for op in lowered.module.walk())


def _assembles(program: tapeml.Program, tmp_path) -> str:
    stages = get_backend("cuda", arch="sm_90").compile(program.module, stages=True).stages
    (tmp_path / "k.ptx").write_text(stages["ptx"])
    subprocess.run(["ptxas", "--gpu-name", "sm_90", str(tmp_path / "k.ptx"), "-o",
                    str(tmp_path / "k.cubin")], check=True)
    return stages["ptx"]


needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")


# ----------------------------------------------------------------------------------------------
# The programs a GPT-style model makes

T = 8
FLOATS = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 0.5, -0.5,
                   1e30, -1e30, 3e-39, 7.0], np.float32)


def _floats(shape, seed: int = 0, dtype=np.float32) -> np.ndarray:
    """Edge values (NaN, +-inf, +-0, a subnormal, huge) among ordinary ones."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype) * 4
    flat = x.reshape(-1)
    flat[: min(flat.size, FLOATS.size)] = FLOATS[: flat.size].astype(dtype)
    return flat[rng.permutation(flat.size)].reshape(shape)


def _causal(scores):
    """GPT attention's causal mask: a query sees the keys up to its own position."""
    t = scores.shape[-1]
    keep = ops.iota((t, t), 0) >= ops.iota((t, t), 1)
    return ops.where(keep, scores * 0.125, -np.inf)


def _trace(fn, *args) -> tapeml.Program:
    return tapeml.trace(fn, *(Spec(a.shape, a.dtype) for a in args))


def test_a_causal_mask_is_one_loop_without_a_mask_buffer(tmp_path):
    s = _floats((2, 3, T, T))
    program = _trace(_causal, s)
    assert _ops_outside(program)["tape.iota"] == 2  # the traced form: two iotas, a broadcast mask
    fused = check_everywhere(program, [s])
    assert _ops_outside(fused) == Counter({"tape.fused": 1})
    (group,) = _groups(fused)
    body = Counter(op.name for op in group.body.block.ops)
    assert body["tape.index"] == 2 and body["tape.cmp"] == 1 and body["tape.select"] == 1
    # the (T, T) mask's axes are the last two of the (2, 3, T, T) group
    assert sorted(op.params["axis"] for op in group.body.block.ops
                  if isinstance(op, tape.IndexOp)) == [2, 3]
    assert _allocations(fused) == 0
    if shutil.which("ptxas"):
        _assembles(program, tmp_path)


def test_tril_and_triu_fuse_their_iotas():
    x = _floats((3, 5, 7))
    program = _trace(lambda x: (ops.tril(x, -1), ops.triu(x, 2)), x)
    fused = check_everywhere(program, [x])
    assert _ops_outside(fused) == Counter({"tape.fused": 2})
    assert _allocations(fused) == 0


def test_one_hot_compares_labels_with_its_position():
    labels = np.array([[0, 3, -1], [9, 2, 5]], np.int64)
    w = _floats((2, 3, 6))
    program = _trace(lambda labels, w: ops.one_hot(labels, 6) * w, labels, w)
    fused = check_everywhere(program, [labels, w])
    assert "tape.iota" not in _ops_outside(fused)
    assert _ops_outside(fused)["tape.fused"] == 1


def test_casts_inside_a_float_chain_are_one_group(tmp_path):
    x = _floats((4, 33))
    y = _floats((4, 33), 1, np.float64)

    def f(x, y):
        truncated = ops.astype(ops.astype(x, np.int32), np.float32)
        wide = ops.astype(x, np.float64) * y
        bits = ops.astype(ops.astype(x * 1e10, np.int64), np.float32)
        return (truncated - x) * 2.0 + ops.astype(wide, np.float32) + bits

    program = _trace(f, x, y)
    fused = check_everywhere(program, [x, y])
    assert _ops_outside(fused) == Counter({"tape.fused": 1})
    (group,) = _groups(fused)
    assert Counter(op.name for op in group.body.block.ops)["tape.cast"] == 6
    assert _allocations(fused) == 0
    if shutil.which("ptxas"):
        _assembles(program, tmp_path)


def test_index_arithmetic_feeding_a_take_is_one_group():
    """where/add/clip/mul on i64 then a gather (an embedding lookup's index math), and the
    gathered rows plus the positions' rows."""
    tokens = np.array([3, -1, 40, 2**62, -2**63, 7, 0, 11], np.int64)
    table = _floats((12, 5))
    positions = _floats((T, 5), 2)

    def f(tokens, table, positions):
        i = ops.where(tokens < 0, tokens + 12, tokens)
        i = ops.clip(i * 3 + 1, 0, 11)
        return ops.take(table, i, axis=0) + positions

    program = _trace(f, tokens, table, positions)
    fused = check_everywhere(program, [tokens, table, positions])
    outside = _ops_outside(fused)
    assert outside["tape.take"] == 1 and outside["tape.fused"] == 1
    (group,) = _groups(fused)
    assert {arg.type.get_element_type() for arg in group.body.block.args} == \
        {tape.element_type(np.int64)}


def test_boolean_logic_feeding_a_float_select(tmp_path):
    a, b = (np.array([3, -7, 2**31 - 1, -2**31, 0, 5, 5, -1], np.int32) for _ in range(2))
    b = b[::-1].copy()
    x = _floats((8,))

    def f(a, b, x):
        inside = (a < b) & ~(a == 0) | ((a ^ b) >= 4)
        shifted = (a >> 3) + (b // 7) - (a % 5)
        return ops.where(inside, x, ops.astype(shifted, np.float32)), ops.astype(inside, np.int32)

    program = _trace(f, a, b, x)
    fused = check_everywhere(program, [a, b, x])
    # the mask is read by two groups: it is made once and read twice (not recomputed)
    assert _ops_outside(fused)["tape.fused"] <= 3
    if shutil.which("ptxas"):
        _assembles(program, tmp_path)


def test_a_masked_softmax_and_its_gradient():
    """grad(fuse(p)) == fuse(grad(p)) == grad(p) with the mask inside the groups."""
    s = _floats((2, T, T)).clip(-3, 3)

    def loss(s):
        p = ops.softmax(_causal(s), axis=-1)
        return ops.sum(p * p)

    program = tapeml.trace(loss, Spec(s.shape, s.dtype))
    differentiate(program.function)
    expected = _interpret(program, [s])
    fused = _fused(program)
    _same(_interpret(fused, [s]), expected, "fuse(grad)")
    assert "tape.iota" not in _ops_outside(fused)
    # grad(fuse(p)): the pullback of a group replays its tape.index as an iota
    forward = tapeml.trace(loss, Spec(s.shape, s.dtype))
    fuse(forward.module)
    assert any(isinstance(op, tape.IndexOp) for op in forward.module.walk())
    differentiate(forward.function)
    forward.module.verify()
    got = _interpret(forward, [s])
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# Where an iota must stay outside, and the verifier


def test_an_iota_along_a_broadcast_dim_is_not_taken_in():
    """iota of shape (1, 5) along axis 0 is all zeros; broadcast to (4, 5) it must stay zeros,
    which a position along the group's axis 0 would not be."""
    program = tapeml.Program.parse("""
func.func @f(%x: tensor<4x5xi64>) -> tensor<4x5xi64> {
  %i = tape.iota axis = 0 : tensor<1x5xi64>
  %b = tape.broadcast %i : tensor<1x5xi64> -> tensor<4x5xi64>
  %y = tape.add %b, %x : tensor<4x5xi64>
  func.return %y : tensor<4x5xi64>
}""")
    x = np.arange(20, dtype=np.int64).reshape(4, 5)
    fused = check_everywhere(program, [x])
    assert _ops_outside(fused)["tape.iota"] == 1
    assert not any(isinstance(op, tape.IndexOp) for op in fused.module.walk())


def test_a_mask_alone_keeps_its_iotas_as_inputs():
    """A group needs an input to span its shape: a mask that is itself a result keeps one of its
    iotas as an input (the other is its position)."""
    program = _trace(lambda x: (ops.iota((T, T), 0) >= ops.iota((T, T), 1), x + 1.0),
                     np.zeros(3, np.float32))
    fused = check_everywhere(program, [np.zeros(3, np.float32)])
    assert _ops_outside(fused)["tape.iota"] == 1


def test_splat_constants_are_splats_by_their_bits():
    """[0.0, -0.0] is not a splat (np.unique calls them equal): it stays a constant."""
    program = tapeml.Program.parse("""
func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  %c = tape.constant dense<[0.000000e+00, -0.000000e+00]> : tensor<2xf32>
  %y = tape.mul %x, %c : tensor<2xf32>
  %z = tape.neg %y : tensor<2xf32>
  func.return %z : tensor<2xf32>
}""")
    fused = check_everywhere(program, [np.array([1.0, 1.0], np.float32)])
    assert _ops_outside(fused)["tape.constant"] == 1


@pytest.mark.parametrize("text, message", [
    ("%i = tape.index axis = 2 : tensor<i64>", "tape.index axis = 2 must be a dim of the "
     "result's shape"),
    ("%i = tape.index axis = 0 : tensor<i1>", "tape.index: result must be .* of i32, i64, "
     "f32 or f64, got tensor<i1>"),
])
def test_the_verifier_places_tape_index(text, message):
    with pytest.raises(ShapeError, match=message):
        tapeml.Program.parse(f"""
func.func @f(%x: tensor<2x3xi64>) -> tensor<2x3xi64> {{
  %y = tape.fused %x : tensor<2x3xi64> -> tensor<2x3xi64> {{
  ^bb0(%a: tensor<i64>):
    {text}
    %s = tape.add %a, %a : tensor<i64>
    tape.yield %s : tensor<i64>
  }}
  func.return %y : tensor<2x3xi64>
}}""")


def test_tape_index_lives_in_a_fused_body_only():
    with pytest.raises(Exception, match="tape.fused"):
        tapeml.Program.parse("""
func.func @f() -> tensor<i64> {
  %i = tape.index axis = 0 : tensor<i64>
  func.return %i : tensor<i64>
}""")


# ----------------------------------------------------------------------------------------------
# Generated mixed-type chains: one group, the interpreter's bits everywhere

SHAPE = (3, 5)
INT_EDGES = {"i32": [0, 1, -1, 7, -7, 2**31 - 1, -2**31, 31, 32, -33],
             "i64": [0, 1, -1, 7, -7, 2**63 - 1, -2**63, 63, 64, -65]}
EXACT_FLOAT_UNARY = ("neg", "abs", "sign", "floor", "ceil", "round", "sqrt", "relu")
INT_UNARY = ("neg", "abs", "sign", "relu", "not", "floor")
NUMERIC_BINARY = ("add", "sub", "mul", "maximum", "minimum")
INT_BINARY = ("floordiv", "rem", "and", "or", "xor", "shl", "shr")
PREDICATES = ("lt", "le", "gt", "ge", "eq", "ne")
LEAVES = {"tape.broadcast", "tape.constant", "tape.iota"}


def _tensor(t: str) -> str:
    return f"tensor<{'x'.join(map(str, SHAPE))}x{t}>"


@st.composite
def chains(draw, depth: int = 4):
    """A tree of elementwise ops over mixed types (each intermediate used once), its leaves
    the arguments (full or a broadcast row), splat constants of edge values and iotas: MLIR
    text and the result type."""
    lines: list[str] = []
    counter = iter(range(10**6))

    def fresh() -> str:
        return f"%v{next(counter)}"

    def leaf(t: str) -> str:
        kind = draw(st.sampled_from(["arg", "arg", "row", "constant", "iota"]))
        if kind == "iota" and t != "i1":
            v = fresh()
            lines.append(f"{v} = tape.iota axis = {draw(st.integers(0, 1))} : {_tensor(t)}")
            return v
        if kind == "constant":
            if t == "i1":
                literal = draw(st.sampled_from(["true", "false"]))
            elif t in INT_EDGES:
                literal = str(draw(st.sampled_from(INT_EDGES[t])))
            else:
                value = draw(st.sampled_from([0.0, -0.0, 1.0, -2.5, 1e30, np.inf, -np.inf]))
                literal = {np.inf: '"0x7F800000"' if t == "f32" else '"0x7FF0000000000000"',
                           -np.inf: '"0xFF800000"' if t == "f32" else '"0xFFF0000000000000"'
                           }.get(value, f"{value:e}")
            v = fresh()
            lines.append(f"{v} = tape.constant dense<{literal}> : {_tensor(t)}")
            return v
        if kind == "row":
            v = fresh()
            lines.append(f"{v} = tape.broadcast %row_{t} : tensor<{SHAPE[1]}x{t}> -> "
                         f"{_tensor(t)}")
            return v
        return f"%x_{t}"

    def expr(t: str, d: int, root: bool = False) -> str:
        if d == 0 or (not root and draw(st.integers(0, 4)) == 0):
            return leaf(t)
        choices = ["select", "cast"]
        if t == "i1":
            choices += ["cmp", "and", "or", "xor", "not"]
        elif t.startswith("i"):
            choices += [*NUMERIC_BINARY, *INT_BINARY, *INT_UNARY]
        else:
            choices += [*NUMERIC_BINARY, "div", *EXACT_FLOAT_UNARY]
        op = draw(st.sampled_from(choices))
        v = fresh()
        if op == "select":
            c, a, b = expr("i1", d - 1), expr(t, d - 1), expr(t, d - 1)
            lines.append(f"{v} = tape.select {c}, {a}, {b} : {_tensor('i1')}, {_tensor(t)}, "
                         f"{_tensor(t)} -> {_tensor(t)}")
        elif op == "cast":
            s = draw(st.sampled_from([u for u in MLIR.values() if u != t]))
            a = expr(s, d - 1)
            lines.append(f"{v} = tape.cast {a} : {_tensor(s)} -> {_tensor(t)}")
        elif op == "cmp":
            s = draw(st.sampled_from(list(MLIR.values())))
            a, b = expr(s, d - 1), expr(s, d - 1)
            lines.append(f"{v} = tape.cmp {draw(st.sampled_from(PREDICATES))}, {a}, {b} : "
                         f"{_tensor(s)} -> {_tensor('i1')}")
        elif op in (*EXACT_FLOAT_UNARY, *INT_UNARY):
            lines.append(f"{v} = tape.{op} {expr(t, d - 1)} : {_tensor(t)}")
        else:
            a, b = expr(t, d - 1), expr(t, d - 1)
            lines.append(f"{v} = tape.{op} {a}, {b} : {_tensor(t)}")
        return v

    out_t = draw(st.sampled_from(list(MLIR.values())))
    result = expr(out_t, depth, root=True)
    params = ", ".join([*(f"%x_{t}: {_tensor(t)}" for t in MLIR.values()),
                        *(f"%row_{t}: tensor<{SHAPE[1]}x{t}>" for t in MLIR.values())])
    body = "\n  ".join(lines)
    text = (f"func.func @f({params}) -> {_tensor(out_t)} {{\n  {body}\n"
            f"  func.return {result} : {_tensor(out_t)}\n}}")
    return text, out_t


def _edge_array(t: str, shape, rng: np.random.Generator) -> np.ndarray:
    dtype = DTYPE[t]
    if t == "i1":
        return rng.integers(0, 2, shape).astype(bool)
    if t in INT_EDGES:
        return rng.choice(np.array(INT_EDGES[t], dtype), shape)
    return rng.choice(FLOATS.astype(dtype), shape)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=chains(), seed=st.integers(0, 2**16))
def test_generated_mixed_chains_are_one_group_with_the_interpreters_bits(case, seed):
    text, _ = case
    program = tapeml.Program.parse(text)
    rng = np.random.default_rng(seed)
    args = [_edge_array(t, SHAPE, rng) for t in MLIR.values()]
    args += [_edge_array(t, SHAPE[1:], rng) for t in MLIR.values()]
    with np.errstate(all="ignore"):
        fused = check_everywhere(program, args)
    # a tree of elementwise ops is one group (or one op, where nothing joined it). Left outside
    # are only leaves it cannot take in and still span its shape (a group's shape is its
    # inputs'): a broadcast row, a splat or an iota where every other input is one too; they
    # are the only buffers the lowering allocates
    outside = _ops_outside(fused)
    leaves = sum(n for name, n in outside.items() if name in LEAVES)
    assert sum(outside.values()) - leaves == 1, (outside, str(fused.module))
    assert _allocations(fused) == leaves


@needs_ptxas
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=chains(depth=3))
def test_generated_mixed_chains_assemble(case, tmp_path_factory):
    text, _ = case
    _assembles(tapeml.Program.parse(text), tmp_path_factory.mktemp("ptx"))



@pytest.mark.parametrize("array", [
    np.full((3, 4), -0.0, np.float32),  # a splat: one element stored
    np.array([np.float32(np.nan), 1.0], np.float32).view(np.uint32).__or__(1).view(np.float32),
    np.array([[True, False]]),
    np.array([np.iinfo(np.int64).min, 0]),
    np.full((2, 2), np.inf),
], ids=["splat -0.0", "NaN payload", "bool", "int64 min", "splat inf f64"])
def test_first_element_is_the_literals_first_element_bit_for_bit(array):
    """tape.first_element (a group's splat constant, read from the literal's bytes) against
    the array's own first element."""
    got = tape.first_element(tape.numpy_to_dense(array))
    expected = array.reshape(-1)[0]
    assert got.shape == () and got.dtype == array.dtype
    assert got.tobytes() == expected.tobytes()
