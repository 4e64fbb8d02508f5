"""An op that adds a bias to a convolution's or a matmul's result, or takes its relu, folds into
the product's kernel.gemm as its epilogue (tapeml/transforms/loops/epilogues.py): the same bits
as the two ops apart, on the CPU and on the interpreter, and no fold where it would change
what is computed."""

from __future__ import annotations

import numpy as np
import pytest
from bits import assert_same_bits

import tapeml
from tapeml import nn, ops
from tapeml.tracing.pytree import flatten
from tapeml.transforms.fuse import fuse
from tapeml.transforms.to_loops import lower_module

EDGES = [np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 2.5, -3.0]


def _values(shape, dtype, seed, edges=False):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    if edges:  # the bias: every edge value, shuffled
        flat = x.reshape(-1)
        flat[:] = np.resize(np.array(EDGES, dtype), flat.size)
        rng.shuffle(flat)
    return x


def _relu(y):
    return ops.relu(y)


def _max0(y):
    return ops.maximum(y, 0.0)


CONV = {  # name: (x shape, w shape, conv keywords)
    "3x3": ((2, 5, 9, 9), (7, 5, 3, 3), {"padding": 1}),
    "stride 2": ((1, 3, 17, 17), (8, 3, 3, 3), {"stride": 2}),
    "pointwise": ((3, 6, 5, 5), (4, 6, 1, 1), {}),
    "image groups": ((2, 16, 64, 64), (16, 16, 3, 3), {"padding": 1}),  # im2col over 2 MB
}

MATMUL = {  # name: (x shape, w shape, bias shape, w transposed)
    "columns": ((37, 50), (50, 65), (65,), False),
    "columns 1xn": ((5, 300), (300, 33), (1, 33), False),
    "rows": ((40, 20), (20, 9), (40, 1), False),
    "batched": ((3, 17, 24), (24, 19), (19,), False),
    "transposed": ((16, 70), (70, 130), (130,), True),
}

EPILOGUES = {  # name: (adds a bias, adds a residual, the activation or None)
    "bias+relu": (True, False, _relu),
    "bias+maximum0": (True, False, _max0),
    "bias": (True, False, None),
    "relu": (False, False, _relu),
    "bias+residual+relu": (True, True, _relu),
    "residual": (False, True, None),
}


def _cases():
    for product in [*CONV, *MATMUL]:
        for epilogue in EPILOGUES:
            yield product, epilogue


def _program(product: str, epilogue: str, dtype):
    """(folded: the product and its epilogue, apart: the same with the product also returned
    (so it is made, and the epilogue is the loops of its own op), the arguments)."""
    bias_added, residual_added, activation = EPILOGUES[epilogue]
    if product in CONV:
        x_shape, w_shape, keywords = CONV[product]
        bias_shape = (w_shape[0], 1, 1) if product != "pointwise" else (1, w_shape[0], 1, 1)

        def make(x, w):
            return nn.conv2d(x, w, **keywords)
    else:
        x_shape, w_shape, bias_shape, transposed = MATMUL[product]
        if transposed:
            w_shape = w_shape[::-1]

        def make(x, w):
            return ops.matmul(x, ops.transpose(w) if transposed else w)

    def finish(y, b, r):
        if bias_added:
            y = y + b
        if residual_added:  # the shortcut on the left, as an ONNX ResNet adds it
            y = r + y
        return activation(y) if activation else y

    x, w = _values(x_shape, dtype, 1), _values(w_shape, dtype, 2)
    x.reshape(-1)[::7] *= 1e30  # sums that overflow to ±inf (and NaN from inf - inf)
    shortcut = _values(tapeml.trace(make, x, w).shapes.shape, dtype, 4)
    shortcut.reshape(-1)[::5] = np.resize(np.array(EDGES, dtype), shortcut.reshape(-1)[::5].size)
    args = (x, w, _values(bias_shape, dtype, 3, edges=True), shortcut)

    def folded(x, w, b, r):
        return finish(make(x, w), b, r)

    def apart(x, w, b, r):
        y = make(x, w)
        return finish(y, b, r), y

    return folded, apart, args


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("product,epilogue", list(_cases()))
def test_a_folded_epilogue_gives_the_bits_of_the_ops_apart(monkeypatch, threads, dtype,
                                                            product, epilogue):
    """Compiled for the CPU: the product with its epilogue folded in gives the bits the product
    and the elementwise op give apart (the product then also returned, so not folded), for
    convolutions (padded, strided, pointwise, a group of images at a time) and matmuls (a
    bias per column, per row, batched, a transpose read in place), with a bias holding NaN,
    ±inf and ±0 and sums that overflow, at 1 and 2 threads."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    folded, apart, args = _program(product, epilogue, dtype)
    step = tapeml.jit(folded)
    loops = step.lower(*args)["loops"]
    bias_added, residual_added, activation = EPILOGUES[epilogue]
    assert ('bias = "' in loops) == bias_added
    assert ("residual = true" in loops) == residual_added
    assert ("relu = true" in loops) == (activation is not None)
    assert "tape.fused" not in loops and "relu = true" not in tapeml.jit(apart).lower(
        *args)["loops"]
    assert_same_bits(step(*args), tapeml.jit(apart)(*args)[0])


@pytest.mark.parametrize("product,epilogue", [("3x3", "bias+relu"), ("pointwise", "bias"),
                                              ("columns", "bias+maximum0"), ("rows", "relu"),
                                              ("batched", "bias+relu"),
                                              ("stride 2", "bias+residual+relu"),
                                              ("transposed", "residual")])
def test_a_folded_epilogue_on_the_interpreter(product, epilogue):
    """The lowered loops on xDSL's interpreter (kernel.gemm as numpy's matmul, its epilogue as
    numpy): folded, the bits of the lowering without folding."""
    folded, _, args = _program(product, epilogue, np.float32)
    results = []
    for fold in (True, False):
        program = tapeml.trace(folded, *args)
        fuse(program.module)
        lower_module(program.module, libm=True, gemm_epilogues=fold)
        text = str(program)
        assert "kernel.gemm" in text and any(
            f in text for f in ('bias = "', "relu = true", "residual = true")) == fold
        shapes = flatten(tapeml.trace(folded, *args).shapes)[0]
        outs = [np.zeros(int(np.prod(s.shape)), s.dtype) for s in shapes]
        tapeml.interpret(program.module, program.name,
                         *[np.ascontiguousarray(a).reshape(-1) for a in args], *outs)
        results.append(outs[0])
    assert_same_bits(results[0], results[1])


def _unfolded(f, *args) -> str:
    loops = tapeml.jit(f).lower(*args)["loops"]
    assert not any(f in loops for f in ('bias = "', "relu = true", "residual = true"))
    return loops


def test_what_does_not_fold_is_computed_as_it_was():
    """No fold where the epilogue would change what is computed: a product used twice, a
    bias varying along two axes, a residual added before the bias (another order of sums),
    maximum with -0.0 (-0 stays -0), an op doing more than add and relu, a grouped
    convolution (direct loops, no GEMM). Each still gives the interpreter's values."""
    x, w, b = _values((2, 4, 6, 6), np.float64, 1), _values((4, 4, 3, 3), np.float64, 2), \
        _values((4, 1, 1), np.float64, 3)
    residual = _values((2, 4, 6, 6), np.float64, 4)
    m, v = _values((8, 5), np.float64, 5), _values((5, 6), np.float64, 6)
    def used_twice(x, w, b):
        y = nn.conv2d(x, w, padding=1)
        return ops.relu(y + b), ops.sum(y)

    cases = [
        (used_twice, (x, w, b)),
        (lambda x, w, r: ops.relu(nn.conv2d(x, w, padding=1) + r[:, :, :1]), (x, w, residual)),
        (lambda x, w, b, r: ops.relu(nn.conv2d(x, w, padding=1) + r + b), (x, w, b, residual)),
        (lambda m, v: ops.maximum(ops.matmul(m, v), -0.0), (m, v)),
        (lambda x, w, b: ops.relu(nn.conv2d(x, w, padding=1) * 2.0 + b), (x, w, b)),
        (lambda x, w, b: ops.relu(nn.conv2d(x, w[:, :2], padding=1, groups=2) + b), (x, w, b)),
    ]
    for f, args in cases:
        _unfolded(f, *args)
        got = flatten(tapeml.jit(f)(*args))[0]
        expected = flatten(tapeml.jit(f, backend="interp")(*args))[0]
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


def test_a_training_steps_bias_and_relu_fold_into_its_forward_product():
    """relu's pullback reads relu's result, not its input (the same mask: result > 0 exactly
    where input > 0, NaN and -0 included), so the backward pass keeps no pre-activation and a
    layer's bias and relu fold into its product in a gradient too; the value and gradients
    are the interpreter's (NaN and infinities among the biases)."""
    x, w, b = _values((16, 12), np.float64, 1), _values((12, 20), np.float64, 2), \
        _values((20,), np.float64, 3, edges=True)
    v = _values((20, 3), np.float64, 4)

    def loss(w, b, x, v):  # a hidden layer, then the next layer's product
        return ops.sum(ops.matmul(ops.relu(ops.matmul(x, w) + b), v))

    step = tapeml.value_and_grad(loss, argnums=(0, 1))
    loops = tapeml.jit(step).lower(w, b, x, v)["loops"]
    assert 'bias = "columns"' in loops and "relu = true" in loops
    got = flatten(tapeml.jit(step)(w, b, x, v))[0]
    expected = flatten(tapeml.jit(step, backend="interp")(w, b, x, v))[0]
    for g, e in zip(got, expected, strict=True):  # (sums in another order)
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


TWO_PRODUCTS = {  # name: (the first product, the second, its operands' shapes, a bias shape)
    "convolutions": (lambda x, w: nn.conv2d(x, w, padding=1),
                     lambda x, w: nn.conv2d(x, w, stride=2),
                     [(2, 5, 9, 9), (7, 5, 3, 3), (2, 6, 17, 17), (7, 6, 1, 1)], (7, 1, 1)),
    "matmuls": (ops.matmul, ops.matmul, [(33, 40), (40, 50), (33, 20), (20, 50)], (50,)),
}


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(TWO_PRODUCTS))
@pytest.mark.parametrize("activation", [None, _relu, _max0])
def test_two_products_summed_fold_into_both(monkeypatch, threads, dtype, name, activation):
    """Two products' biased results summed (a ResNet block that projects its shortcut), then
    relu or not: the first made with its bias, the second's kernel adding its own, then the
    first's result, then the activation; no loops of their own for the sum. The bits of the
    ops apart (the products then also returned), with biases holding NaN, ±inf and ±0 and sums
    that overflow, at 1 and 2 threads."""
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    first, second, shapes, bias_shape = TWO_PRODUCTS[name]
    x, w, y, v = (_values(s, dtype, seed) for seed, s in enumerate(shapes))
    x.reshape(-1)[::7] *= 1e30
    b, c = _values(bias_shape, dtype, 5, edges=True), _values(bias_shape, dtype, 6, edges=True)

    def summed(p, q, b, c):
        z = (p + b) + (q + c)
        return activation(z) if activation else z

    def folded(x, w, y, v, b, c):
        return summed(first(x, w), second(y, v), b, c)

    def apart(x, w, y, v, b, c):
        p, q = first(x, w), second(y, v)
        return summed(p, q, b, c), p, q

    args = (x, w, y, v, b, c)
    step = tapeml.jit(folded)
    loops = step.lower(*args)["loops"]
    assert loops.count('bias = "') == 2 and loops.count("residual = true") == 1
    assert ("relu = true" in loops) == (activation is not None)
    assert "tape.fused" not in loops
    assert "residual = true" not in tapeml.jit(apart).lower(*args)["loops"]
    assert_same_bits(step(*args), tapeml.jit(apart)(*args)[0])
