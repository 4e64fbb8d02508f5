"""tape-to-loops' `share` (the CPU pipeline's): ops whose loops are the same (a model's repeated
layers) call one function holding them, lowered once (and from EVERY_OP_FUNCTIONS such ops on,
every op is a function); ops that differ in anything their loops depend on (an op, a shape, a
parameter, which operands are the same value, a fused group's body) are lowered apart; the loops
compute the same bits shared or not, interpreted and compiled."""

from __future__ import annotations

import numpy as np
import pytest
from test_merge_nests import _interpret  # the loops form on the interpreter
from xdsl.dialects import func

import tapeml
from tapeml import nn, ops
from tapeml.tracing.pytree import flatten
from tapeml.transforms.fuse import fuse
from tapeml.transforms.to_loops import lower_module


def _layers(count=3):
    rng = np.random.default_rng(0)
    params = [nn.linear_init(rng, 8, 8) for _ in range(count)]
    x = rng.standard_normal((4, 8)).astype(np.float32)

    def f(params, x):
        for p in params:  # the same layer again: the same ops over other buffers
            x = ops.tanh(nn.linear(p, x)) * 0.5 + ops.transpose(x.T)
        return ops.sum(x * x)

    return tapeml.value_and_grad(f), (params, x)


def _loops(fn, args, share, fused=True):
    program = tapeml.trace(fn, *args)
    module = program.module.clone()
    if fused:
        fuse(module)
    lower_module(module, row_reductions=True, share=share)
    module.verify()
    return program, module


def _calls(module):
    return [op.callee.root_reference.data for op in module.walk() if isinstance(op, func.CallOp)]


@pytest.mark.parametrize("fused", [True, False])
def test_repeated_layers_call_one_function_per_distinct_op(fused):
    fn, args = _layers()
    program, shared = _loops(fn, args, share=True, fused=fused)
    _, apart = _loops(fn, args, share=False, fused=fused)
    calls = _calls(shared)
    assert calls and len(set(calls)) < len(calls)  # the layers' functions called per layer
    assert sum(calls.count(name) == 3 for name in set(calls)) >= 2
    assert not _calls(apart)
    functions = [op for op in shared.ops if isinstance(op, func.FuncOp)]
    assert len(functions) == 1 + len(set(calls))
    assert sum(1 for _ in shared.walk()) < sum(1 for _ in apart.walk())
    assert _interpret(program, shared, args) == _interpret(program, apart, args)


def _shared_ops(fn, *args):
    """How many of `fn`'s ops call a function another op calls too, unfused (each op its own
    loops; every op a call)."""
    _, module = _loops(fn, args, share=True, fused=False)
    calls = _calls(module)
    return sum(calls.count(name) > 1 for name in calls)


def test_ops_whose_loops_differ_are_lowered_apart():
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
    y = x[::-1].copy()
    assert _shared_ops(lambda x, y: (ops.tanh(x), ops.tanh(y)), x, y) == 2  # the same op
    assert _shared_ops(lambda x, y: (ops.tanh(x), ops.exp(y)), x, y) == 0  # another op
    assert _shared_ops(lambda x, y: (ops.tanh(x), ops.tanh(y[:2])), x, y) == 0  # a shape
    assert _shared_ops(lambda x, y: (x * x, x * y), x, y) == 0  # the same value twice
    assert _shared_ops(lambda x, y: (x * y, y * x), x, y) == 2  # (other values, same places)
    assert _shared_ops(lambda x, y: (ops.sum(x, axis=0), ops.sum(y, axis=1)), x, y) == 0
    assert _shared_ops(lambda x, y: (ops.max(x, axis=0), ops.max(y, axis=0)), x, y) == 2
    cube = np.ones((2, 3, 4), np.float32)
    assert _shared_ops(lambda a, b: (ops.transpose(a, (1, 0, 2)), ops.transpose(b, (2, 1, 0))),
                       cube, cube) == 0  # a parameter
    assert _shared_ops(lambda a, b: (ops.transpose(a, (1, 0, 2)), ops.transpose(b, (1, 0, 2))),
                       cube, cube) == 2


def test_a_shared_reduction_takes_its_scratch_from_each_call():
    """A reduction's row of accumulators is an argument of its function, allocated (and
    freed) around each call in the host function, where plan-arena places it."""
    from xdsl.dialects import memref

    x = np.linspace(-1, 1, 2 * 5 * 64, dtype=np.float32).reshape(2, 5, 64)  # a row of 64
    program, module = _loops(lambda x, y: (ops.sum(x, axis=1), ops.sum(y, axis=1)), (x, x[::-1]),
                             share=True, fused=False)
    host, shared = [op for op in module.ops if isinstance(op, func.FuncOp)]
    calls = [op for op in host.walk() if isinstance(op, func.CallOp)]
    assert len(calls) == 2 and all(len(c.arguments) == 3 for c in calls)  # x, out, scratch
    assert len(shared.body.block.args) == 3
    assert not any(isinstance(op, memref.AllocOp | memref.DeallocOp) for op in shared.walk())
    for call in calls:
        scratch = call.arguments[2]
        assert isinstance(scratch.owner, memref.AllocOp)
        assert any(isinstance(u.operation, memref.DeallocOp) for u in scratch.uses)
    _, apart = _loops(lambda x, y: (ops.sum(x, axis=1), ops.sum(y, axis=1)), (x, x[::-1]),
                      share=False, fused=False)
    assert _interpret(program, module, (x, x[::-1])) == _interpret(program, apart, (x, x[::-1]))


def test_fused_groups_with_other_bodies_are_lowered_apart():
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
    same = lambda x, y: (ops.tanh(x) * 2.0 + y, ops.tanh(y) * 2.0 + x)  # noqa: E731
    other = lambda x, y: (ops.tanh(x) * 2.0 + y, ops.tanh(y) * 3.0 + x)  # noqa: E731
    counts = []
    for fn in (same, other):
        _, module = _loops(fn, (x, x + 1), share=True)
        counts.append(len(set(_calls(module))))
    assert counts == [1, 0]  # (few ops: only repeated ones are functions)


def test_a_function_of_many_ops_lowers_each_into_a_function(monkeypatch):
    """From EVERY_OP_FUNCTIONS shareable ops on (a model's step), an op that occurs once is a
    function too (code another batch size shares); below, it stays inline."""
    from tapeml.transforms import to_loops

    fn, args = _layers(3)
    _, few = _loops(fn, args, share=True)
    shareable = len(_calls(few)) + sum(1 for op in few.walk() if op.name == "scf.parallel")
    monkeypatch.setattr(to_loops, "EVERY_OP_FUNCTIONS", 1)
    program, every = _loops(fn, args, share=True)
    calls = _calls(every)
    assert len(calls) > len(_calls(few)) and any(calls.count(name) == 1 for name in calls)
    assert shareable and _interpret(program, every, args) == _interpret(program, few, args)
    monkeypatch.setattr(to_loops, "EVERY_OP_FUNCTIONS", 10**6)
    _, repeated = _loops(fn, args, share=True)
    assert all(_calls(repeated).count(name) > 1 for name in _calls(repeated))


@pytest.mark.parametrize("threads", ["1", "2"])
def test_the_compiled_program_computes_what_the_interpreter_does(threads, monkeypatch):
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    fn, args = _layers(4)
    compiled = tapeml.jit(fn)(*args)
    expected = tapeml.jit(fn, backend="interp")(*args)
    for got, want in zip(flatten(compiled)[0], flatten(expected)[0], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
