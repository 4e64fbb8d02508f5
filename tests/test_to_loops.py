"""tape-to-loops: the lowered program (loops over flat buffers) still runs on xDSL's interpreter
and computes what the tape program computes."""

from __future__ import annotations

import numpy as np
import pytest
from bits import assert_same_bits
from hypothesis import given, settings
from hypothesis import strategies as st
from test_naturality import generated_program

import tapeml
from tapeml import Spec, nn, ops
from tapeml.tracing.pytree import flatten
from tapeml.transforms.differentiate import differentiate
from tapeml.transforms.fuse import fuse
from tapeml.transforms.scf_to_cf import loops_to_cf
from tapeml.transforms.to_gpu import outline_module
from tapeml.transforms.to_loops import lower_module


def run_lowered(program: tapeml.Program, *args, libm: bool = True, cf: bool = False,
                gpu: bool = False):
    """Lower a copy of `program` and interpret it on `args`: the flat results, reshaped.
    With libm, exp/tanh/sigmoid are the math dialect's ops, which the interpreter computes as
    numpy does (bit for bit); without, the vectorizable arithmetic (transcendentals.py).
    `gpu`: the GPU form (convert-loops-to-gpu, 4x4 GEMM tiles), on the emulated GPU."""
    lowered = tapeml.Program.parse(str(program))
    shapes = [s for s in flatten(lowered.shapes)[0]]
    plan = lower_module(lowered.module, libm=libm)
    if gpu:
        outline_module(lowered.module, gemm_tile=4)
        assert "scf.parallel" not in str(lowered)
    if cf:  # the next stage too: branches instead of structured loops
        loops_to_cf(lowered.module)
        assert "scf." not in str(lowered)
    lowered.module.verify()
    leaves = [np.ascontiguousarray(a).reshape(-1) for a in flatten(args)[0]]
    outs = [np.zeros(max(1, int(np.prod(s.shape))), s.dtype) for s in shapes]
    tapeml.interpret(lowered.module, lowered.name, *leaves, *outs)
    return [o.reshape(s.shape) for o, s in zip(outs, shapes, strict=True)], plan, lowered


def check(program: tapeml.Program, *args, exact: bool = True, cf: bool = False,
          gpu: bool = False):
    expected = flatten(program(*args))[0]
    got, plan, _ = run_lowered(program, *args, cf=cf, gpu=gpu)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype
        if exact:
            assert_same_bits(g, e)
        else:  # the loops sum in order, numpy pairwise
            np.testing.assert_allclose(g, e, rtol=1e-5 if g.dtype == np.float32 else 1e-12,
                                       atol=1e-6 if g.dtype == np.float32 else 1e-12)
    return plan


RNG = np.random.default_rng(3)


def r(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("gpu", [False, True], ids=["loops", "gpu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_elementwise_ops_and_groups_lower_exactly(dtype, gpu):
    def f(a, b, c):
        x = ops.where(a > b, ops.sigmoid(a) * ops.exp(b), ops.tanh(a - b))
        y = ops.relu(x) / (ops.sqrt(ops.abs(c) + 1.0)) + ops.log(ops.abs(a) + 2.0)
        return (ops.maximum(y, -x), ops.minimum(a, c), ops.power(ops.abs(a) + 0.5, b),
                ops.astype(ops.astype(a, np.float32), np.float64) * 1.5)

    args = (r(3, 4, dtype=dtype), r(4, dtype=dtype), r(3, 1, dtype=dtype))
    program = tapeml.trace(f, *args)
    check(program, *args, gpu=gpu)
    fuse(program.module)
    assert "tape.fused" in str(program)
    check(program, *args, gpu=gpu)


def test_vectorizable_transcendentals_interpret_within_their_bound():
    x = np.concatenate([np.linspace(-12, 12, 61), [0.0, -0.0, np.inf, -np.inf, np.nan]])
    program = tapeml.trace(lambda x: (ops.exp(x), ops.tanh(x), ops.sigmoid(x)),
                           x.astype(np.float32))
    got, _, lowered = run_lowered(program, x.astype(np.float32), libm=False)
    assert "math.tanh" not in str(lowered) and "arith.bitcast" in str(lowered)
    for g, e in zip(got, program(x.astype(np.float32)), strict=True):
        np.testing.assert_array_max_ulp(g, e, maxulp=4)


@pytest.mark.parametrize("gpu", [False, True], ids=["loops", "gpu"])
def test_layout_ops_lower_exactly(gpu):
    def f(a, b):
        return (ops.transpose(ops.reshape(a, (2, 2, 6)), (2, 0, 1)),
                ops.pad(a, ((1, -1), (2, 3)), -np.inf)[:, ::3],
                ops.concatenate([a, b, a], axis=1),
                ops.broadcast_to(b, (2, 4, 2)),
                a[1:, 2:7:2],
                np.arange(24, dtype=np.float32).reshape(4, 6) - a)

    args = (r(4, 6), r(4, 2))
    check(tapeml.trace(f, *args), *args, gpu=gpu)


@pytest.mark.parametrize("gpu", [False, True], ids=["loops", "gpu"])
def test_reductions_and_matmuls_lower_within_rounding(gpu):
    def f(a, b, c):
        return (ops.sum(a, axis=0), ops.max(a, axis=(0, 1)), ops.sum(a, axis=1, keepdims=True),
                a @ b, ops.matmul(c, ops.transpose(c, (0, 2, 1))), ops.mean(a))

    args = (r(5, 3), r(3, 4), r(2, 3, 4))
    check(tapeml.trace(f, *args), *args, exact=False, gpu=gpu)


@pytest.mark.parametrize("fused", [False, True])
def test_an_mlp_training_step_lowers_and_its_cf_form_too(fused):
    params = nn.mlp_init(RNG, [4, 8, 3], dtype=np.float64)
    x, y = r(6, 4, dtype=np.float64), np.eye(3)[[0, 1, 2, 0, 1, 2]]
    step = tapeml.trace(lambda p, x, y: nn.softmax_cross_entropy(nn.mlp(p, x), y), params, x, y)
    differentiate(step.function, wrt=(0, 1, 2, 3))
    if fused:
        fuse(step.module)
    plan = check(step, params, x, y, exact=False, cf=fused)
    assert 0 < plan.peak_bytes < plan.total_bytes


def test_an_mlp_training_step_runs_on_the_emulated_gpu():
    params = nn.mlp_init(RNG, [4, 8, 3], dtype=np.float32)
    x, y = r(6, 4), np.eye(3, dtype=np.float32)[[0, 1, 2, 0, 1, 2]]
    step = tapeml.trace(lambda p, x, y: nn.softmax_cross_entropy(nn.mlp(p, x), y), params, x, y)
    differentiate(step.function, wrt=(0, 1, 2, 3))
    fuse(step.module)
    check(step, params, x, y, exact=False, gpu=True)


def test_buffers_are_freed_after_their_last_use():
    program = tapeml.trace(lambda a: ops.sum(ops.exp(ops.tanh(a) * 2.0) + 1.0), r(8))
    _, plan, lowered = run_lowered(program, r(8))
    text = str(lowered)
    assert text.count("memref.alloc") == text.count("memref.dealloc") > 0
    assert plan.peak_bytes < plan.total_bytes


WINDOWS = [  # x, w, stride, padding, dilation, groups, pool kernel and padding: tiny shapes,
    # the interpreter runs the loops one scalar op at a time (the CPU tests take real sizes)
    ((1, 1, 4, 3), (2, 1, 2, 2), (1, 1), (1, 0, 1, 1), (1, 1), 1, 2, 0),
    ((1, 2, 4, 4), (2, 1, 2, 1), (2, 1), (0, 1, 1, 0), (1, 2), 2, 2, 1),
]


@pytest.mark.parametrize("gpu", [False, True], ids=["loops", "gpu"])
@pytest.mark.parametrize("case", WINDOWS, ids=str)
@pytest.mark.parametrize("fused", [False, True])
def test_window_ops_and_their_gradients_lower(case, fused, gpu):
    xs, ws, stride, padding, dilation, groups, pool_kernel, pool_pad = case

    def loss(x, w):
        y = nn.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
        return ops.sum(nn.max_pool2d(y, pool_kernel, 1, pool_pad) * 0.5
                       + nn.avg_pool2d(y, pool_kernel, 1, pool_pad))

    args = (r(*xs, dtype=np.float64), r(*ws, dtype=np.float64))
    step = tapeml.trace(loss, *args)
    differentiate(step.function)
    if fused:
        fuse(step.module)
        names = {op.name for op in step.function.body.ops}
        assert "tape.maxpool2d_backward" in names
        assert ("tape.conv2d_backward_input" in names) == (groups == 1)  # grouped: unfolded
    check(step, *args, exact=False, gpu=gpu)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]), gpu=st.booleans())
def test_generated_programs_lower_to_the_same_values(data, dtype, gpu):
    fn, inputs = generated_program(data, dtype, max_steps=6)
    program = tapeml.trace(fn, *(Spec(x.shape, x.dtype) for x in inputs))
    if data.draw(st.booleans()):
        fuse(program.module)
    check(program, *inputs, exact=False, gpu=gpu)


def test_coalesce_merges_dims_that_every_buffer_runs_on_across():
    """A walk over fewer dims, the same elements in the same order: dims merge where each
    buffer's step runs on (contiguous, or broadcast along both), ones drop, kept dims stay."""
    from tapeml.transforms.loops.emitter import coalesce, strides

    shape = [2, 3, 4]
    assert coalesce(shape, [strides(shape), strides(shape)]) == ([24], [[1], [1]], {})
    bias = [0, 0, 1]  # a row broadcast down the first two dims
    assert coalesce(shape, [bias, strides(shape)]) == ([6, 4], [[0, 1], [4, 1]], {})
    column = [1, 0, 0]  # one element per leading index
    assert coalesce(shape, [column, strides(shape)]) == ([2, 12], [[1, 0], [12, 1]], {})
    assert coalesce([1, 5, 1], [[5, 1, 1]]) == ([5], [[1]], {})
    assert coalesce([1, 5, 1], [[5, 1, 1]], keep=[0]) == ([1, 5], [[5, 1]], {0: 0})
    assert coalesce(shape, [strides(shape)], keep=[1]) == ([2, 3, 4], [[12, 4, 1]], {1: 1})
    assert coalesce([], [[]]) == ([], [[]], {})

    def visits(shape, steps):  # the offsets a row-major walk reads, in order
        return [sum(i * s for i, s in zip(index, steps, strict=True))
                for index in np.ndindex(*shape)]

    rng = np.random.default_rng(0)
    for _ in range(200):
        shape = [int(d) for d in rng.integers(1, 4, rng.integers(0, 5))]
        buffers = [[int(s) if rng.random() < 0.7 else 0 for s in strides(shape)]
                   for _ in range(3)]
        merged, steps, _ = coalesce(shape, buffers)
        for before, after in zip(buffers, steps, strict=True):
            assert visits(merged, after) == visits(shape, before)


def test_an_elementwise_chain_over_one_shape_is_one_loop():
    x = np.ones((4, 5, 6), np.float32)
    program = tapeml.trace(lambda x, y: ops.tanh(x * y + 1.0), x, x)
    module = program.module.clone()
    fuse(module)
    lower_module(module)
    loops = [op for op in module.walk() if op.name in ("scf.parallel", "scf.for")]
    assert len(loops) == 1 and len(loops[0].body.block.args) == 1
