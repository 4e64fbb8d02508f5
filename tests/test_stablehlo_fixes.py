"""StableHLO out through IREE, where it differed from the interpreter: scatter indices below
-n (IREE wrote them out of bounds), depthwise convolutions (IREE's im2col of one fails to
compile), results that share a buffer, argmax/argmin of booleans, a program of no results,
names that hold a newline, and a function named as one of IREE's own modules. Each against the
interpreter, numpy or the cpu backend."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("iree.compiler", reason="IREE is in the test extra (make test installs it)")

import tapeml  # noqa: E402
from tapeml import nn, ops  # noqa: E402
from tapeml.codegen import iree  # noqa: E402
from tapeml.tracing.pytree import flatten  # noqa: E402

I64 = np.iinfo(np.int64)


def _leaves(result: object) -> list[np.ndarray]:
    return [np.asarray(x) for x in flatten(result)[0]]


def _iree_opt_parses(text: str, tmp_path: Path) -> None:
    source = tmp_path / "program.mlir"
    source.write_text(text)
    done = subprocess.run([str(Path(sys.executable).with_name("iree-opt")), str(source)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# ----------------------------------------------------------------------------------------------
# Indices out of range


def _numpy_scatter(t: np.ndarray, indices: np.ndarray, u: np.ndarray, kind: str,
                   axis: int) -> np.ndarray:
    """tape's rule in numpy: an index in [-n, 0) counts from the end, any other out of [0, n)
    drops its update; the updates land in row-major order."""
    n, out = t.shape[axis], np.moveaxis(t.copy(), axis, 0)
    moved = np.moveaxis(u, axis, 0).reshape(indices.size, *out.shape[1:])
    for i, row in zip(indices.reshape(-1), moved, strict=True):
        if -n <= i < n:
            out[i] = {"add": out[i] + row, "set": row, "max": np.maximum(out[i], row),
                      "min": np.minimum(out[i], row)}[kind]
    return np.moveaxis(out, 0, axis)


SCATTER_INDICES = {
    "below -n": (np.array([-5]), 0),  # the reported case: it overwrote t - 1.0's last row
    "around the ends": (np.array([[-4, 1], [3, -3]]), 0),
    "extremes, axis 1": (np.array([I64.min, -6, -5, 4, I64.max, -1]), 1),
}


@pytest.mark.parametrize("where", list(SCATTER_INDICES))
@pytest.mark.parametrize("kind", ["add", "set", "max", "min"])
@pytest.mark.parametrize("at_run_time", [False, True], ids=["constant", "argument"])
def test_a_scatter_drops_every_index_out_of_range_on_iree(where, kind, at_run_time):
    """An index outside [-n, n) was brought to i + n, still negative below -n, and IREE wrote
    the update before the operand: over another result (t - 1.0), or a crash."""
    indices, axis = SCATTER_INDICES[where]
    t = np.arange(20, dtype=np.float32).reshape(4, 5)[:3]
    shape = (*t.shape[:axis], *indices.shape, *t.shape[axis + 1:])
    u = np.full(shape, 1000.0, np.float32) - np.arange(np.prod(shape)).reshape(shape)

    def constant(t, u):
        return t - 1.0, getattr(ops.at(t)[(slice(None),) * axis + (indices,)], kind)(u)

    def argument(t, u, i):
        return t - 1.0, getattr(ops.at(t)[(slice(None),) * axis + (i,)], kind)(u)

    fn, args = (argument, (t, u, indices)) if at_run_time else (constant, (t, u))
    got = tapeml.jit(fn, backend="iree")(*args)
    want = tapeml.jit(fn, backend="interp")(*args)
    np.testing.assert_array_equal(got[0], t - 1.0)
    np.testing.assert_array_equal(got[1], _numpy_scatter(t, indices, u, kind, axis))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_a_take_clamps_every_index_out_of_range_on_iree(dtype):
    """README's rule for gathers: an index in [-n, n) counts from the end when negative, any
    other is clamped into [0, n - 1], to the integer extremes."""
    info = np.iinfo(dtype)
    indices = np.array([info.min, -5, -4, -3, -1, 0, 2, 3, 4, info.max], dtype)
    t = np.arange(12, dtype=np.float32).reshape(3, 4)
    n = t.shape[0]
    wide = indices.astype(np.int64)
    expected = np.take(t, np.where((wide >= -n) & (wide < 0), wide + n, np.clip(wide, 0, n - 1)),
                       axis=0)

    def f(t, i):
        return ops.take(t, i, axis=0), ops.take(t.T, i.reshape(2, 5), axis=1)

    got = tapeml.jit(f, backend="iree")(t, indices)
    np.testing.assert_array_equal(got[0], expected)
    np.testing.assert_array_equal(got[1], np.moveaxis(expected.reshape(2, 5, 4), 2, 0))
    for g, w in zip(got, tapeml.jit(f, backend="interp")(t, indices), strict=True):
        np.testing.assert_array_equal(g, w)


# ----------------------------------------------------------------------------------------------
# Depthwise convolutions


def test_a_depthwise_convolution_and_its_gradients_run_on_iree():
    """groups = channels, one output per group: IREE 3.13's im2col of it fails to compile
    (a linalg.batch_matvec of the wrong shape), so such a program is compiled without it."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 9, 8)).astype(np.float32)
    w = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)

    def loss(x, w):
        return ops.sum(ops.tanh(nn.conv2d(x, w, groups=4, padding=1)))

    for fn in (lambda x, w: nn.conv2d(x, w, groups=4, padding=1),
               tapeml.grad(loss, argnums=(0, 1))):
        got = _leaves(tapeml.jit(fn, backend="iree")(x, w))
        for g, e in zip(got, _leaves(tapeml.jit(fn, backend="interp")(x, w)), strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("channels", "outputs", "groups", "im2col"), [
    (4, 4, 4, False), (4, 8, 4, True), (4, 4, 2, True), (3, 6, 1, True), (1, 1, 1, True)])
def test_only_a_program_with_a_depthwise_convolution_goes_without_im2col(channels, outputs,
                                                                          groups, im2col):
    """Every other convolution keeps IREE's im2col (W4's step: 124 -> 49 ms with it), and
    its gradients too; a depthwise one's input gradient is depthwise as well."""
    x = np.ones((2, channels, 6, 6), np.float32)
    w = np.ones((outputs, channels // groups, 3, 3), np.float32)
    forward = tapeml.trace(lambda x, w: nn.conv2d(x, w, groups=groups, padding=1), x, w)
    assert (iree.IM2COL in iree._flags(forward.as_stablehlo())) is im2col
    input_grad = tapeml.trace(tapeml.grad(
        lambda x, w: ops.sum(ops.tanh(nn.conv2d(x, w, groups=groups)))), x, w).as_stablehlo()
    assert "stablehlo.convolution" in input_grad
    assert (iree.IM2COL in iree._flags(input_grad)) is im2col


# ----------------------------------------------------------------------------------------------
# Results


def same_value(x):
    y = x * 2.0
    return {"out": y, "cache": y}


def equal_computations(x):
    return ops.exp(x), ops.exp(x)


def an_argument_twice(x):
    return x, x + 0.0, x


@pytest.mark.parametrize("fn", [same_value, equal_computations, an_argument_twice])
def test_iree_returns_a_fresh_array_for_every_result(fn):
    """IREE returned one buffer for results that are one value (or two computations it
    merged): writing one result changed the other."""
    x = np.arange(4, dtype=np.float32)
    got = _leaves(tapeml.jit(fn, backend="iree")(x))
    want = _leaves(tapeml.jit(fn, backend="interp")(x))
    for i, a in enumerate(got):
        assert not any(np.shares_memory(a, b) for b in got[:i] + [x])
    got[0] += 100.0
    for g, w in zip(got[1:], want[1:], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    np.testing.assert_array_equal(x, np.arange(4, dtype=np.float32))


@pytest.mark.parametrize("fn", [lambda x: (), lambda x: {}], ids=["tuple", "dict"])
def test_a_program_of_no_results(fn, tmp_path):
    """The text ended in `func.return  : `, which no parser reads."""
    x = np.ones(2, np.float32)
    text = tapeml.trace(fn, x).as_stablehlo()
    assert "    func.return\n  }\n}\n" in text
    _iree_opt_parses(text, tmp_path)
    assert tapeml.jit(fn, backend="iree")(x) == tapeml.jit(fn, backend="interp")(x)


# ----------------------------------------------------------------------------------------------
# Booleans


@pytest.mark.parametrize("axis", [0, 1])
def test_argmax_and_argmin_of_booleans_are_numpys_on_iree(axis):
    """argmax/argmin of booleans had no StableHLO (numpy's iinfo knows no bool): True is the
    larger, the first index wins a tie."""
    b = np.array([[False, True, True], [False, False, False], [True, False, True],
                  [True, True, True]])

    def f(p):
        return (ops.argmax(p, axis=axis), ops.argmin(p, axis=axis),
                ops.argmax(p, axis=axis, keepdims=True))

    got = tapeml.jit(f, backend="iree")(b)
    np.testing.assert_array_equal(got[0], np.argmax(b, axis=axis))
    np.testing.assert_array_equal(got[1], np.argmin(b, axis=axis))
    np.testing.assert_array_equal(got[2], np.argmax(b, axis=axis, keepdims=True))
    for g, w in zip(got, tapeml.jit(f, backend="interp")(b), strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


# ----------------------------------------------------------------------------------------------
# Names


def test_a_name_with_a_newline_stays_in_its_comment(tmp_path):
    """A pytree key (any string) is written into the `//` line that heads the text: a newline
    ended it, and the rest was read as ops. And a function's quoted name (from a parsed
    program) holds MLIR's escapes."""
    key = "first line\nsecond line\r\\ and \u2028"
    x = np.ones(2, np.float32)

    def f(d):
        return {key: d[key] * 2.0}

    text = tapeml.trace(f, {key: x}).as_stablehlo()
    assert text.splitlines()[0] == ("// @f(d.first line\\nsecond line\\r\\\\ and \\u2028) -> "
                                    "(result.first line\\nsecond line\\r\\\\ and \\u2028), "
                                    "from tapeml")
    assert text.split("\n")[1] == "module @f {"
    _iree_opt_parses(text, tmp_path)
    np.testing.assert_array_equal(tapeml.jit(f, backend="iree")({key: x})[key], x * 2.0)
    odd = tapeml.Program.parse('func.func @"odd\\0Aname \\22q\\22 \\\\\\0D"(%x: tensor<2xf32>) '
                               "-> tensor<2xf32> {\n  func.return %x : tensor<2xf32>\n}")
    text = odd.as_stablehlo()
    assert text.split("\n")[:2] == ['// @odd\\nname "q" \\\\\\r(x) -> (x), from tapeml',
                                    'module @"odd\\0Aname \\"q\\" \\\\\\0D" {']
    _iree_opt_parses(text, tmp_path)


@pytest.mark.parametrize("name", ["hal", "hal_loader", "io_parameters", "vmvx"])
def test_a_function_may_be_named_as_an_iree_module(name):
    """IREE's module was named after the function, beside IREE's own: `hal` collided
    ("Attempt to register duplicate VmModule")."""
    def f(x):
        return x * 2.0

    f.__name__ = f.__qualname__ = name
    x = np.arange(4, dtype=np.float32)
    assert tapeml.trace(f, x).as_stablehlo().startswith(f"// @{name}(x)")
    np.testing.assert_array_equal(tapeml.jit(f, backend="iree")(x), x * 2.0)
