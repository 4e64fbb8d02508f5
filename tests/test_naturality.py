"""Generated programs: evaluating then forgetting values equals propagating shapes
(`shape(program(x)) == eval_shape(fn, shape(x))`), and the traced program computes exactly what
the same function computes eagerly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from bits import assert_same_bits
from hypothesis import given, settings
from hypothesis import strategies as st

import tapeml
from tapeml import Spec, ops

UNARY = [ops.exp, ops.tanh, ops.sigmoid, ops.relu, ops.negative, ops.square, ops.abs,
         lambda x: ops.softmax(x, axis=-1) if x.ndim else x]
BINARY = [ops.add, ops.subtract, ops.multiply, ops.maximum, ops.minimum,
          lambda a, b: ops.where(ops.greater(a, b), a, b)]


def _step(data: st.DataObject, shapes: list[tuple[int, ...]]) -> tuple[Callable, list[int]]:
    """One random op over the values so far (by shape): the op and the indices it reads."""
    i = data.draw(st.integers(0, len(shapes) - 1))
    shape = shapes[i]
    kind = data.draw(st.sampled_from(["unary", "binary", "scalar", "reduce", "transpose",
                                      "reshape", "matmul"]))
    if kind == "binary":
        # a partner whose shape broadcasts with this one, if there is any
        partners = [j for j, s in enumerate(shapes) if _broadcasts(s, shape)]
        j = data.draw(st.sampled_from(partners))
        return data.draw(st.sampled_from(BINARY)), [i, j]
    if kind == "scalar":
        c = data.draw(st.floats(-2, 2, allow_nan=False, width=32))
        return data.draw(st.sampled_from([lambda x: ops.add(x, c), lambda x: ops.multiply(c, x),
                                          lambda x: ops.divide(x, c or 1.0)])), [i]
    if kind == "reduce" and shape:
        axes = data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=2))
        keep = data.draw(st.booleans())
        fn = data.draw(st.sampled_from([ops.sum, ops.max, ops.mean]))
        return (lambda x: fn(x, axis=tuple(axes), keepdims=keep)), [i]
    if kind == "transpose" and len(shape) >= 2:
        perm = data.draw(st.permutations(range(len(shape))))
        return (lambda x: ops.transpose(x, perm)), [i]
    if kind == "reshape":
        return (lambda x: ops.reshape(x, (-1,))), [i]
    if kind == "matmul" and len(shape) == 2:
        partners = [j for j, s in enumerate(shapes) if len(s) in (1, 2) and s[0] == shape[1]]
        if partners:
            return ops.matmul, [i, data.draw(st.sampled_from(partners))]
    return data.draw(st.sampled_from(UNARY)), [i]


def _broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    try:
        np.broadcast_shapes(a, b)
    except ValueError:
        return False
    return True


def _replay(steps: list[tuple[Callable, list[int]]], n_outputs: int) -> Callable:
    def fn(*inputs: Any) -> Any:
        values = list(inputs)
        for op, reads in steps:
            values.append(op(*(values[r] for r in reads)))
        return tuple(values[-n_outputs:])

    return fn


def generated_program(data: st.DataObject, dtype, max_dim: int = 4, max_steps: int = 8
                      ) -> tuple[Callable, list[np.ndarray]]:
    """A random program of 1 to `max_steps` ops over 1 to 3 random inputs (the ops chosen by
    shape, each step run eagerly to know the next shapes), and its inputs. Shared by the tests
    that compare a program's forms: traced, lowered, compiled."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    input_shapes = data.draw(st.lists(st.lists(st.integers(1, max_dim), max_size=3).map(tuple),
                                      min_size=1, max_size=3))
    inputs = [rng.uniform(-1, 1, s).astype(dtype) for s in input_shapes]
    shapes, steps, values = list(input_shapes), [], list(inputs)
    for _ in range(data.draw(st.integers(1, max_steps))):
        op, reads = _step(data, shapes)
        value = op(*(values[r] for r in reads))  # eager: also gives the next shape
        steps.append((op, reads))
        values.append(value)
        shapes.append(tuple(value.shape))
    return _replay(steps, data.draw(st.integers(1, len(steps)))), inputs


@settings(max_examples=60, deadline=None)
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64]))
def test_evaluating_then_forgetting_values_is_propagating_shapes(data, dtype):
    fn, inputs = generated_program(data, dtype)
    specs = [Spec(x.shape, x.dtype) for x in inputs]
    program = tapeml.trace(fn, *specs)
    traced = program(*inputs)
    eager = fn(*inputs)
    assert tapeml.eval_shape(fn, *specs) == tuple(Spec(v.shape, v.dtype) for v in traced)
    assert program.shapes == tuple(Spec(v.shape, v.dtype) for v in eager)
    for t, e in zip(traced, eager, strict=True):
        assert_same_bits(t, e)
