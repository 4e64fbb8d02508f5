"""tapeml.jit on the CPU backend: compiled code against the interpreter, argument checking,
the cache and its explanations, every stage as text."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from bits import assert_same_bits, assert_within
from hypothesis import given, settings
from hypothesis import strategies as st
from test_naturality import generated_program

import tapeml
from tapeml import Spec, nn, ops
from tapeml.codegen.gemm import host_threads
from tapeml.tracing.pytree import flatten
from tapeml.transforms.loops import reductions

RNG = np.random.default_rng(11)


def r(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def close(got, expected):
    """Compiled code calls libm for exp/log/tanh/pow where numpy has its own kernels, and sums in
    order where numpy sums pairwise: a few ulps apart."""
    for g, e in zip(flatten(got)[0], flatten(expected)[0], strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        f32 = g.dtype == np.float32
        np.testing.assert_allclose(g, e, rtol=2e-6 if f32 else 1e-13, atol=1e-6 if f32 else 1e-13)


def both(fn, *args):
    return tapeml.jit(fn)(*args), tapeml.jit(fn, backend="interp")(*args)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_elementwise_layout_and_reductions_match_the_interpreter(dtype):
    def f(a, b, c):
        x = ops.where(a > b, ops.sigmoid(a) * ops.exp(b), ops.tanh(a - b))
        return (ops.relu(x) / (ops.sqrt(ops.abs(c) + 1.0)) + ops.log(ops.abs(a) + 2.0),
                ops.power(ops.abs(a) + 0.5, b), ops.maximum(a, -x), ops.minimum(x, c),
                ops.transpose(ops.pad(a, ((1, -1), (2, 0)), -1.0))[::2],
                ops.concatenate([a, ops.broadcast_to(b, (3, 4))], axis=0),
                ops.sum(a, axis=0), ops.max(a, axis=1, keepdims=True), a @ ops.transpose(a),
                ops.astype(a, np.float32 if dtype == np.float64 else np.float64))

    close(*both(f, r(3, 4, dtype=dtype), r(4, dtype=dtype), r(3, 1, dtype=dtype)))


def test_nan_and_inf_propagate_as_in_numpy():
    a = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0], np.float32)
    b = np.array([1.0, np.nan, 2.0, -0.0, 0.0, np.inf], np.float32)

    def f(a, b):
        return ops.maximum(a, b), ops.minimum(a, b), a / b, ops.relu(a), ops.max(a), a > b

    for got, expected in zip(*both(f, a, b), strict=True):
        assert_same_bits(got, expected)  # bit for bit: -0.0 is not +0.0


def test_jit_of_value_and_grad_of_an_mlp_is_one_compiled_program():
    params = nn.mlp_init(RNG, [6, 16, 3])
    x, y = r(8, 6), np.eye(3, dtype=np.float32)[RNG.integers(0, 3, 8)]

    def loss(p, x, y):
        return nn.softmax_cross_entropy(nn.mlp(p, x), y)

    step = tapeml.jit(tapeml.value_and_grad(loss))
    close(step(params, x, y), tapeml.value_and_grad(loss)(params, x, y))
    stages = step.lower(params, x, y)
    outlined = ["outlined loops"] if host_threads() > 1 else []  # the pool's share
    assert list(stages) == ["tape", "fused tape", "loops", *outlined, "arena",
                            "llvm dialect", "llvm ir", "optimized llvm ir", "assembly"]
    assert "tape.fused" in stages["fused tape"] and "scf.for" in stages["loops"]
    assert "memref.alloc" in stages["loops"] and "memref.alloc" not in stages["arena"]
    assert "memref.view %arena" in stages["arena"]
    assert "llvm.getelementptr" in stages["llvm dialect"] and "define void" in stages["llvm ir"]
    assert "inttoptr" not in stages["llvm ir"]
    # lower() compiles afresh with the stages printed; the cached compilation keeps no text
    assert len(step.cache) == 1 and "(first call)" in step.explain()
    ((_, compiled),) = step.cache.values()
    assert compiled.stages == {}


def test_every_defined_function_asks_for_the_widest_vectors():
    """The host tunings may prefer 256-bit vectors (Sapphire Rapids); every function the
    program defines asks for 512, the out-of-line ones (noinline: merge-loop-nests' shared
    nests, the thread pool's parts) too."""
    a, b = r(64, 32), r(64, 32)
    stages = tapeml.jit(lambda a, b: (ops.sum(a, axis=0), ops.sum(b, axis=0))).lower(a, b)
    defines = [line for line in stages["llvm ir"].splitlines() if line.startswith("define ")]
    assert any(" noinline" in line for line in defines)  # the two sums: one nest, called twice
    assert all(line.endswith('"prefer-vector-width"="512"') for line in defines)


def test_arguments_are_checked_before_any_memory_is_touched():
    f = tapeml.jit(lambda a, b: a * b)
    a, b = r(3, 4), r(3, 4)
    f(a, b)
    compiled = f.cache[next(reversed(f.cache))][1]  # what a cached signature calls
    with pytest.raises(TypeError, match=r"argument `b` must be float32, got float64"):
        compiled(a, b.astype(np.float64))
    with pytest.raises(ValueError, match=r"argument `a` must have shape \(3, 4\), got \(4, 3\)"):
        compiled(a.T.copy(), b)
    with pytest.raises(TypeError, match="takes 2 arrays, got 1"):
        compiled(a)
    assert_same_bits(f(np.asfortranarray(a), b[:, ::1]), a * b)  # copied first


def test_outputs_are_fresh_arrays_every_call():
    f = tapeml.jit(lambda a: a + 1.0)
    a = r(5)
    first, second = f(a), f(a)
    assert not np.shares_memory(first, second) and not np.shares_memory(first, a)
    first[:] = 0
    assert_same_bits(second, a + np.float32(1))


def test_the_cache_and_its_explanations():
    calls = []

    def g(a, scale):
        calls.append(1)
        return a * scale

    f = tapeml.jit(g, static_argnums=(1,), cache_size=2)
    f(r(3), 2.0), f(r(3), 2.0)
    assert len(calls) == 1
    f(r(4), 2.0)
    f(r(4), 3.0)
    log = f.explain().splitlines()
    assert log[0].startswith("g: compiled for ((...,), {}) with float32[3] (first call)")
    assert "shapes or dtypes changed (`a`: float32[3] -> float32[4])" in log[1]
    assert "static arguments changed from (2.0,) to (3.0,)" in log[2]
    assert len(f.cache) == 2  # bounded
    np.testing.assert_allclose(f(np.ones(4, np.float32), 3.0), 3.0)


def test_two_threads_may_call_one_jitted_function():
    f = tapeml.jit(lambda a: ops.sum(ops.tanh(a)))
    inputs = [r(1000) for _ in range(8)]
    f(inputs[0])
    results = [None] * len(inputs)

    def work(i):
        for _ in range(20):
            results[i] = f(inputs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for x, got in zip(inputs, results, strict=True):
        np.testing.assert_allclose(got, np.sum(np.tanh(x)), rtol=1e-5)


def test_jit_of_value_and_grad_of_a_cnn_runs_on_the_cpu():
    def loss(params, x, labels):
        h = nn.max_pool2d(ops.relu(nn.conv2d(x, params["c1"]["W"], params["c1"]["b"],
                                             padding=1)), 2)
        h = nn.avg_pool2d(ops.relu(nn.conv2d(h, params["c2"]["W"], params["c2"]["b"],
                                             padding=(1, 0, 2, 1), stride=2, groups=2)),
                          2, padding=1)
        return nn.softmax_cross_entropy(nn.linear(params["out"], ops.reshape(h, (3, -1))),
                                        labels)

    params = {"c1": nn.conv2d_init(RNG, 1, 4, 3), "c2": nn.conv2d_init(RNG, 4, 8, 3, groups=2),
              "out": nn.linear_init(RNG, 32, 10)}
    x, labels = r(3, 1, 8, 8), np.eye(10, dtype=np.float32)[[1, 2, 3]]
    step = tapeml.jit(tapeml.value_and_grad(loss))
    close(step(params, x, labels), tapeml.value_and_grad(loss)(params, x, labels))
    fused = step.lower(params, x, labels)["fused tape"]
    assert "tape.conv2d " in fused and "tape.maxpool2d_backward" in fused


CONVS = [  # x, w, stride, padding, dilation, groups
    ((2, 3, 9, 8), (4, 3, 3, 2), (1, 1), (1, 0, 1, 1), (1, 1), 1),
    ((1, 4, 11, 10), (6, 2, 2, 3), (2, 1), (0, 2, 1, 0), (2, 1), 2),
    ((2, 4, 7, 7), (4, 1, 3, 3), (3, 3), (1, 1, 1, 1), (1, 1), 4),
    # groups 1, C*kh*kw >= 16: the weight gradient as one product over (b, y, x), strided and
    # dilated, cropped and padded; and below 16, a product per image
    ((3, 2, 11, 10), (5, 2, 3, 3), (2, 1), (0, 2, 1, 0), (2, 1), 1),
    ((2, 1, 7, 7), (3, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 2), 1),
    # more than UNROLLED_TAPS (25) taps: im2col and col2im as one nest with bounds checks (an
    # audio model's 1 x 64 filter, strided, padded unevenly), or, at most COLUMN_NESTS (11)
    # columns, a nest per kernel column (a 7 x 8 one, dilated; a strided 7 x 7 stem)
    ((2, 3, 2, 70), (4, 3, 1, 64), (1, 2), (0, 5, 1, 3), (1, 1), 1),
    ((1, 2, 9, 12), (2, 2, 7, 8), (1, 1), (3, 3, 3, 4), (1, 2), 1),
    ((2, 3, 15, 14), (4, 3, 7, 7), (2, 2), (3, 2, 3, 4), (1, 1), 1),
    # 1 x 1, stride 1, no padding: the GEMMs read x itself (no im2col), the input cotangent is
    # the product itself; the weight gradient too below 16 channels, over runs at 20
    ((2, 5, 4, 6), (3, 5, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((3, 20, 3, 5), (7, 20, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
]


@pytest.mark.parametrize("case", CONVS, ids=str)
@pytest.mark.parametrize("fused", [False, True])
def test_convolutions_pools_and_their_gradients_compile(case, fused):
    from tapeml.codegen.cpu import CPUBackend
    from tapeml.transforms.differentiate import differentiate

    xs, ws, stride, padding, dilation, groups = case

    def loss(x, w):
        y = nn.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
        pooled = nn.avg_pool2d(y, 2, 1, 1)[:, :, 1:, 1:]  # the shape of y again
        return ops.sum(ops.tanh(nn.max_pool2d(y, 2, 1, 1))) + ops.sum(pooled * y)

    args = (r(*xs, dtype=np.float64), r(*ws, dtype=np.float64))
    step = tapeml.trace(loss, *args)
    differentiate(step.function)
    close(CPUBackend(fuse=fused).compile(step.module)(*args), step(*args))


@pytest.mark.parametrize("weight_runs", [False, True])
def test_a_wide_weight_gradient_either_way(weight_runs, monkeypatch):
    """C * kh * kw >= RUN_COLUMNS: products over runs of images or one per image, as the host's
    Target says (tape-to-loops' weight_runs); the same gradients either way."""
    import dataclasses

    from tapeml.codegen.cpu import CPUBackend
    from tapeml.codegen.gemm import Target
    from tapeml.transforms.differentiate import differentiate

    host = Target.host()
    monkeypatch.setattr(Target, "host", staticmethod(
        lambda: dataclasses.replace(host, weight_runs=weight_runs)))

    def loss(x, w):
        return ops.sum(ops.tanh(nn.conv2d(x, w, stride=(2, 1), padding=(1, 0, 2, 1))))

    args = (r(3, 20, 9, 7, dtype=np.float64), r(5, 20, 3, 3, dtype=np.float64))
    step = tapeml.trace(loss, *args)
    differentiate(step.function)
    compiled = CPUBackend().compile(step.module, stages=True)
    # over runs, the weight gradient's A is ct' [o][b][y][x]: rows of 3 * 5 * 6 = 90
    assert ("a_strides = array<i64: 30, 90, 1>" in compiled.stages["loops"]) == weight_runs
    close(compiled(*args), step(*args))


@settings(max_examples=15, deadline=None)
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]))
def test_generated_programs_compile_to_what_the_interpreter_computes(data, dtype):
    fn, inputs = generated_program(data, dtype, max_dim=5, max_steps=6)
    close(tapeml.jit(fn)(*inputs), tapeml.trace(fn, *(Spec(x.shape, x.dtype) for x in inputs))(
        *inputs))


def test_zero_size_arrays_compile_and_run():
    def f(x, y):
        return ops.sum(x, axis=0), x * 2.0, ops.exp(x) @ y, ops.max(y, axis=0)

    x, y = np.zeros((0, 3), np.float32), np.zeros((3, 0), np.float32)
    for got, expected in zip(*both(f, x, y), strict=True):
        assert_same_bits(got, expected)


def test_a_long_f32_sum_keeps_its_small_terms():
    # summed in f32 one after another, 2**24 terms of 0.1 would stop growing at 2**21
    x = np.full(2**24, 0.1, np.float32)
    np.testing.assert_allclose(tapeml.jit(ops.mean)(x), 0.1, rtol=1e-6)
    np.testing.assert_allclose(tapeml.jit(ops.sum)(x), 2**24 * np.float64(x[0]), rtol=1e-7)


def test_a_jitted_function_called_while_tracing_joins_the_trace():
    inner = tapeml.jit(lambda a: ops.sum(ops.tanh(a) * a))
    x = r(2, 3)
    expected = 2.0 * (np.tanh(x) + x * (1.0 - np.tanh(x) ** 2))
    close(tapeml.grad(lambda a: inner(a) * 2.0)(x), expected)
    close(tapeml.jit(tapeml.grad(lambda a: inner(a) * 2.0))(x), expected)
    assert inner.explain() == "not compiled yet"  # it ran inline both times


def test_jit_of_a_jitted_function_compiles_with_its_own_options():
    inner = tapeml.jit(lambda a, n: a * n)
    x = np.array([1e-40, 1.0], np.float32)  # a subnormal: what IREE flushes and LLVM keeps
    assert inner(x, 1.5)[0] != 0
    outer = tapeml.jit(inner, backend="interp")
    close(outer(x, 1.5), x * np.float32(1.5))
    assert outer.cache is not inner.cache and outer.backend is not inner.backend
    assert type(outer.backend).__name__ == "InterpBackend" and len(inner.cache) == 1
    static = tapeml.jit(inner, static_argnums=1)
    static(x, 2.0)
    assert "(first call)" in static.explain() and "weak" not in static.explain()
    product = tapeml.jit(lambda a, w: (a @ w).sum(1))
    generic = tapeml.jit(product, batch_argnums=0)
    w = r(64, 8)
    for a in (r(16, 64), r(9, 64)):
        np.testing.assert_allclose(generic(a, w), (a.astype(np.float64) @ w).sum(1), rtol=1e-4,
                                   atol=1e-4)
    assert "an instance of the compiled program" in generic.explain(), generic.explain()
    assert product.explain() == "not compiled yet"
    assert generic.__name__ == inner.__name__ == "<lambda>"


def test_an_unknown_backend_option_names_the_backends_options():
    with pytest.raises(TypeError, match=r"the cpu backend has no option dtype \(its options: "
                       r"fuse, libm\)"):
        tapeml.jit(lambda a: a, dtype=np.float32)
    with pytest.raises(TypeError, match="the interp backend takes no options"):
        tapeml.jit(lambda a: a, backend="interp", fuse=False)


def test_static_argnums_take_an_int_or_count_from_the_end():
    x = r(2, 3)
    for numbers in (1, -1, (1,), [-1]):
        f = tapeml.jit(lambda a, n: a * n, static_argnums=numbers)
        close(f(x, 3.0), x * np.float32(3.0))
        assert "(first call)" in f.explain()
    with pytest.raises(TypeError, match="static_argnums 5 is out of range for a call with 2 "):
        tapeml.jit(lambda a, n: a * n, static_argnums=5)(x, 1.0)
    with pytest.raises(TypeError, match="static_argnums must be an int or a sequence of ints, "
                                        "got 'a'"):
        tapeml.jit(lambda a: a, static_argnums="a")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,axes", [((256, 512), (0,)), ((5, 7, 33), (1,)),
                                        ((6, 4, 9, 16), (0, 2)), ((300, 7), (0,)),
                                        ((4, 130), (1,)), ((3, 5, 40), (0, 1)),
                                        ((19, 64), (1,)), ((2, 11, 6, 5), (0, 2, 3)),
                                        ((16, 4, 8, 64), (3,)), ((16, 64, 128), (0, 1)),
                                        ((4, 300, 24), (1,)), ((97, 40), (0,)),
                                        ((40, 3, 16), (0, 1)), ((3, 5, 21), (2,)),
                                        ((6, 2, 3, 9), (2, 3)), ((7, 130), (1,)),
                                        ((4, 3, 7, 9), (0, 2, 3)), ((5, 2, 16), (0, 2))])
@pytest.mark.parametrize("threads", ["1", "2"])
def test_sums_and_maxes_add_in_order_whatever_the_loop_nest(monkeypatch, threads, dtype, shape,
                                                           axes):
    """The CPU folds a row of accumulators at a time when the last axes are kept (a bias
    gradient), else one accumulator per output, eight outputs side by side where there are
    eight (and the rest one by one): either way each output is its terms added one after
    another in row-major order (f32 in f64, rounded once), the same bits as a sequential sum,
    and the max is numpy's. Where such rows are few, the terms are added in groups of
    consecutive ones (`row_groups`, a function of the shape alone) and the groups' sums then
    in order; an output whose terms are contiguous sums them in LANES partial sums, combined
    in halves, then its last terms, and an output whose terms lie in contiguous runs (each
    image's plane of a channel) the same, run after run into the same partial sums, then each
    run's last terms: the same bits at any thread count."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    x = RNG.standard_normal(shape).astype(dtype)
    sums, maxes = tapeml.jit(lambda x: (tapeml.sum(x, axes), tapeml.max(x, axes)))(x)
    kept = [i for i in range(len(shape)) if i not in axes]
    terms = np.transpose(x, [*axes, *kept]).reshape(-1, *[shape[i] for i in kept])
    last = max(axes)
    first_run = [a for i, a in enumerate(axes) if axes[:i + 1] == tuple(range(axes[0], a + 1))]
    groups = 1 if math.prod(shape[last + 1:]) < reductions.ROW_WIDTH else reductions.row_groups(
        math.prod(shape[i] for i in kept if i < last), math.prod(shape[a] for a in first_run),
        math.prod(shape[last + 1:]))
    total = None
    for group in np.split(terms.astype(np.float64), groups):
        partial = np.cumsum(group, axis=0)[-1]
        total = partial if total is None else total + partial
    run = [a for a in axes if set(range(a, len(shape))) <= set(axes)]  # the contiguous runs'
    runs = math.prod(shape[a] for a in run)
    if run and runs >= 2 * reductions.LANES:  # terms one after another in memory, in runs
        outer = [a for a in axes if a not in run]
        by_run = np.transpose(x, [*outer, *run, *kept]).reshape(
            -1, runs, *[shape[i] for i in kept])
        total = _in_lanes(by_run.astype(np.float64), reductions.LANES)
    assert_same_bits(sums, total.astype(dtype))
    assert_same_bits(maxes, x.max(axis=axes))
    if shape in ((256, 512), (16, 64, 128), (4, 300, 24)):
        assert groups > 1  # the cases that fold their rows in groups


def _in_lanes(runs: np.ndarray, lanes: int) -> np.ndarray:
    """Each output (the trailing axes) of `runs` (runs x terms of a run x outputs) summed as
    the CPU sums contiguous terms: term i of each run into partial i % lanes, run after run,
    the partials combined in halves, then each run's terms past its last whole `lanes`, run
    after run."""
    whole = runs.shape[1] // lanes * lanes
    blocks = runs[:, :whole].reshape(-1, lanes, *runs.shape[2:])  # (run, block) in order
    partials = list(np.cumsum(blocks, axis=0)[-1])
    while len(partials) > 1:
        half = len(partials) // 2
        partials = [partials[i] + partials[i + half] for i in range(half)]
    total = partials[0]
    for run in runs[:, whole:]:
        for term in run:
            total = total + term
    return total


POOLS = [  # (input shape, kernel, stride, padding): rows inside the input 4 to 55 wide
    ((2, 3, 9, 9), 3, 2, 0), ((1, 2, 27, 27), 3, 2, 0), ((1, 2, 28, 28), 2, 2, 0),
    ((1, 2, 17, 17), 3, 1, 1), ((1, 2, 36, 35), 2, 1, 0), ((1, 1, 111, 111), 3, 2, 0),
    ((1, 2, 12, 13), 3, 2, 1), ((1, 1, 7, 6), 2, 2, 0),
    # windows that overlap along a row (max by columns: phases of the stride, kept in scratch)
    ((2, 3, 23, 40), (3, 5), (2, 3), (1, 2)), ((1, 2, 19, 33), (2, 4), (3, 3), 0),
    ((1, 3, 30, 70), (4, 3), (1, 1), 2), ((3, 2, 9, 9), 3, 2, 1),
    ((1, 2, 9, 12), (2, 3), (1, 2), 3),  # windows wholly in the padding: -inf
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", POOLS, ids=str)
@pytest.mark.parametrize("threads", ["1", "2"])
def test_pools_of_every_row_width_are_the_interpreters_bits(monkeypatch, threads, case, dtype):
    """A row of a pool's windows inside the input is computed in blocks of a vector's width,
    the last block moved back over outputs already computed (windows.py's `_block_start`):
    every output, the overlapped ones too, is the interpreter's (the max bit for bit, with
    NaN, signed zeros and infinities in the windows; the mean, summed in the window's order
    in the element type, within rounding of the interpreter's unfold + sum)."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    shape, kernel, stride, padding = case
    x = RNG.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    edge = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf], dtype)
    flat[RNG.choice(flat.size, size=max(1, flat.size // 10), replace=False)] = RNG.choice(
        edge, size=max(1, flat.size // 10))

    def pools(x):
        return (nn.max_pool2d(x, kernel, stride, padding), nn.avg_pool2d(x, kernel, stride,
                                                                          padding))

    (maxima, means), (expected_maxima, expected_means) = both(pools, x)
    assert_same_bits(maxima, expected_maxima)
    assert_within(means, expected_means, 1e-6 if dtype == np.float32 else 1e-15)


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("batch", [1, 2])
def test_a_concat_of_its_operands_ops_written_in_place(monkeypatch, threads, batch):
    """A fire module's concat (squeezenet): at batch 1 each operand is one contiguous block of
    the result, so the ops that make them (a fused bias + ReLU, a convolution, a pool) write
    there through kernel.views and nothing is copied; an operand also used elsewhere, an
    argument, and the concat returned itself (the caller's buffer) keep their values. Batch 2
    is copied as before. The interpreter's values either way (within rounding: the
    convolutions and sums add in another order)."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    f64 = np.float64  # in f32 a 72-term sum near cancellation rounds past close()'s bound
    x, w1, w3 = r(batch, 8, 12, 12, dtype=f64), r(6, 8, 1, 1, dtype=f64), r(5, 8, 3, 3, dtype=f64)
    b1, b3 = r(6, 1, 1, dtype=f64), r(5, 1, 1, dtype=f64)

    def fire(x, w1, w3, b1, b3):
        left = ops.relu(nn.conv2d(x, w1) + b1)
        right = ops.relu(nn.conv2d(x, w3, padding=1) + b3)
        joined = ops.concatenate([left, right, nn.max_pool2d(x, 3, 1, 1)], axis=1)
        shared = ops.tanh(nn.conv2d(x, w1))  # also used below: not in place
        kept = ops.concatenate([shared, x], axis=1)
        return ops.sum(joined * 2.0, axis=(2, 3)), kept, shared, ops.concatenate(
            [left * 3.0, right - 1.0], axis=1)

    step = tapeml.jit(fire)
    loops = step.lower(x, w1, w3, b1, b3)["loops"]
    assert ("kernel.view" in loops) == (batch == 1)
    close(*both(fire, x, w1, w3, b1, b3))


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("batch", [2, 3])
def test_a_batch_of_convolutions_written_into_their_concat(monkeypatch, threads, batch):
    """At batch > 1 a concat along channels whose operands all come from convolutions (a fire
    module's relu(conv + b), a plain one, a pointwise one, a large one a group of images at a
    time) has each convolution write its images into their parts of the concat's buffer:
    its kernel.gemm (its batch stride the concat's image), or, a convolution over windows,
    the copy of the product's columns that it makes anyway; a concat with a pool among its
    operands is copied. The interpreter's values (within rounding)."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    f64 = np.float64
    x, big = r(batch, 8, 12, 12, dtype=f64), r(batch, 16, 40, 40, dtype=f64)
    w1, w3, wb = r(6, 8, 1, 1, dtype=f64), r(5, 8, 3, 3, dtype=f64), r(32, 16, 3, 3, dtype=f64)
    b1, b3, bb = r(6, 1, 1, dtype=f64), r(5, 1, 1, dtype=f64), r(32, 1, 1, dtype=f64)

    def f(x, big, w1, w3, wb, b1, b3, bb):
        fire = ops.concatenate([ops.relu(nn.conv2d(x, w1) + b1),
                                ops.relu(nn.conv2d(x, w3, padding=1) + b3),
                                nn.conv2d(x, w3[:, :, ::-1], padding=1)], axis=1)
        large = ops.concatenate([nn.conv2d(big, wb, padding=1),
                                 ops.relu(nn.conv2d(big, wb, padding=1) + bb)], axis=1)
        pooled = ops.concatenate([nn.conv2d(x, w1), nn.max_pool2d(x, 3, 1, 1)], axis=1)
        return ops.sum(fire * 2.0, axis=(2, 3)), fire, ops.sum(large, axis=(2, 3)), pooled

    args = (x, big, w1, w3, wb, b1, b3, bb)
    loops = tapeml.jit(f).lower(*args)["loops"]
    # the fire module's three convolutions; the large ones over windows, a group of images
    # at a time (their products' rows 42 wide, the padding's columns dropped as they are
    # copied into the concat)
    assert loops.count(f"c_batch_stride = {16 * 12 * 12} : i64") == 3
    assert loops.count(f"c_batch_stride = {32 * 40 * 42} : i64") == 2
    assert loops.count("a_taps") == 2
    got, expected = both(f, *args)
    close([got[i] for i in (0, 1, 3)], [expected[i] for i in (0, 1, 3)])
    # the sums of 1600 terms that cancel: within the bound of two summation orders
    terms = tapeml.jit(lambda *a: ops.concatenate(
        [nn.conv2d(a[1], a[4], padding=1), ops.relu(nn.conv2d(a[1], a[4], padding=1) + a[7])],
        axis=1), backend="interp")(*args)
    bound = 2 * 40 * 40 * np.finfo(f64).eps * np.abs(terms).sum(axis=(2, 3))
    assert np.all(np.abs(got[2] - expected[2]) <= bound)


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("batch,size,stride,padding", [(4, 40, 1, 1), (3, 64, 2, 0),
                                                        (5, 40, 1, (2, 0))])
def test_a_large_convolution_a_group_of_images_at_a_time(monkeypatch, threads, batch, size,
                                                        stride, padding):
    """An im2col matrix over 2 MB whose images' products are worth threads is written a group
    of images at a time (as many as threads, or the largest divisor of the batch below) and
    each group's product taken through kernel.views of x and the result: the interpreter's
    convolution, and its gradients (not grouped) in the same program."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    x, w = r(batch, 16, size, size, dtype=np.float64), r(32, 16, 3, 3, dtype=np.float64)

    def f(x, w):
        y = nn.conv2d(x, w, stride=stride, padding=padding)
        return y, tapeml.grad(lambda x, w: ops.sum(ops.tanh(nn.conv2d(
            x, w, stride=stride, padding=padding))), argnums=(0, 1))(x, w)

    step = tapeml.jit(f)
    assert "kernel.view" in step.lower(x, w)["loops"]
    close(step(x, w), tapeml.jit(f, backend="interp")(x, w))
