"""tapeml/codegen/llvm_text.py: the CPU backend's LLVM IR written directly is xDSL's
convert_module's text, byte for byte. The suite runs with TAPEML_CHECKS (conftest), where every
CPU compile writes both and compares them (cpu.llvm_ir_text): these tests make sure the direct
printer is the one that wrote the programs below (no op left to the fallback), and that an
op it does not know falls back to xDSL's conversion."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import builtin, llvm
from xdsl.parser import Parser

import tapeml
from tapeml import checks, nn, ops
from tapeml.codegen import cpu, llvm_text

RNG = np.random.default_rng(11)


@pytest.fixture
def printed(monkeypatch):
    """What llvm_text.llvm_ir printed in the test ("ok") or gave up on (the reason)."""
    outcomes: list[str] = []
    real = llvm_text.llvm_ir

    def recording(*args, **kwargs):
        try:
            text = real(*args, **kwargs)
        except llvm_text.Unsupported as why:
            outcomes.append(str(why))
            raise
        outcomes.append("ok")
        return text

    monkeypatch.setattr(llvm_text, "llvm_ir", recording)
    monkeypatch.setenv("TAPEML_CACHE", "0")
    return outcomes


def _mlp():
    params = nn.mlp_init(RNG, [12, 16, 3])
    x = RNG.standard_normal((8, 12)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[RNG.integers(0, 3, 8)]
    return tapeml.value_and_grad(lambda p, x, y: nn.softmax_cross_entropy(nn.mlp(p, x), y)), \
        (params, x, y)


def _cnn():
    params = {"c": nn.conv2d_init(RNG, 2, 4, 3), "out": nn.linear_init(RNG, 4 * 4 * 4, 5)}
    x = RNG.standard_normal((3, 2, 8, 8)).astype(np.float32)
    y = np.eye(5, dtype=np.float32)[RNG.integers(0, 5, 3)]

    def loss(p, x, y):
        h = nn.max_pool2d(ops.relu(nn.conv2d(x, p["c"]["W"], p["c"]["b"], padding=1)), 2)
        return nn.softmax_cross_entropy(nn.linear(p["out"], ops.reshape(h, (3, -1))), y)

    return tapeml.value_and_grad(loss), (params, x, y)


def _mixed():
    """f64 and integer ops, comparisons and selects, casts, transcendentals, fmod, a gather,
    a small constant (a global in the code) and a large one (data, bound at load)."""
    table = RNG.standard_normal((300, 8))  # 19 KB of f64: data
    small = np.linspace(-2, 2, 8)

    def f(x, i, n):
        y = ops.take(table, i, axis=0) * x + small
        z = ops.where(y > 0, ops.tanh(y), ops.exp(y) - 1.0) + ops.fmod(y, 0.7)
        return ops.sum(ops.sqrt(ops.abs(z)), axis=1), n * 3 - n // 2, ops.astype(y, np.float32)

    x = RNG.standard_normal((5, 8))
    i = np.array([0, 299, 7, 3, 11])
    n = np.arange(-6, 6, dtype=np.int32)
    return f, (x, i, n)


PROGRAMS = {"an MLP's step": _mlp, "a CNN's step": _cnn, "mixed types and ops": _mixed}


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_direct_printer_writes_the_programs(name, threads, printed, monkeypatch):
    """Compiled and run (TAPEML_CHECKS: each text compared with xDSL's), printed directly;
    at two threads with the thread pool's parts (function addresses passed to it)."""
    assert checks.enabled()
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    fn, args = PROGRAMS[name]()
    jitted = tapeml.jit(fn)
    jitted(*args)
    jitted.profile(*args, repeat=1)  # kernel.mark's calls too
    assert printed and all(outcome == "ok" for outcome in printed), printed


def _llvm_module(text: str) -> builtin.ModuleOp:
    ctx = Context()
    ctx.load_dialect(builtin.Builtin)
    ctx.load_dialect(llvm.LLVM)
    return Parser(ctx, text).parse_module()


def test_an_op_it_does_not_print_falls_back_to_xdsls_conversion(monkeypatch):
    module = _llvm_module("""
      llvm.func @f(%p: !llvm.ptr) {
        %x = llvm.load %p : !llvm.ptr -> f32
        %y = llvm.intr.fabs(%x) : (f32) -> f32
        llvm.store %y, %p : f32, !llvm.ptr
        llvm.return
      }""")
    with pytest.raises(llvm_text.Unsupported, match="fabs"):
        llvm_text.llvm_ir(module, "x86_64-unknown-linux-gnu")
    monkeypatch.setenv("TAPEML_CHECKS", "0")
    text = cpu.llvm_ir_text(module, "x86_64-unknown-linux-gnu", "")
    assert 'call float @"llvm.fabs"' in text  # (xDSL's name for it)
    assert text == cpu.llvm_ir_text(module, "x86_64-unknown-linux-gnu", "", direct=False)


def test_a_difference_from_xdsls_text_is_an_error_under_checks(monkeypatch):
    module = _llvm_module("""
      llvm.func @f(%p: !llvm.ptr) {
        %x = llvm.load %p : !llvm.ptr -> f32
        llvm.store %x, %p : f32, !llvm.ptr
        llvm.return
      }""")
    real = llvm_text.llvm_ir
    monkeypatch.setattr(llvm_text, "llvm_ir", lambda *a, **k: real(*a, **k).replace(
        "load float", "load volatile float"))
    with pytest.raises(AssertionError, match="other LLVM IR than xDSL"):
        cpu.llvm_ir_text(module, "x86_64-unknown-linux-gnu", "")
