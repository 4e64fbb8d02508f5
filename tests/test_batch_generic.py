"""jit(..., batch_argnums=...): one program's machine code for every batch size
(tapeml/frontend/batch_sizes.py, tapeml/codegen/batch_generic.py). Every result is compared
bit for bit with a program compiled first at its batch size (the same loops, the same order of
every sum), within rounding with the function compiled without the option, and with numpy."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tapeml
from tapeml.codegen.batch_generic import LITERAL, Template, canonical
from tapeml.codegen.gemm.target import compiled_for_threads

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

# --- the template, on LLVM IR text ---------------------------------------------------------

_PROGRAM = """define void @"tapeml.f"(ptr %".1", ptr %".2")
{{
.3:
  br label %".4"
.4:
  %".5" = phi  i64 [0, %".3"], [%".8", %".6"]
  %".7" = icmp slt i64 %".5", {n}
  br i1 %".7", label %".6", label %".9"
.6:
  %".10" = getelementptr inbounds i8, ptr %".2", i64 {offset}
  %".11" = fdiv float 1.0, {mean}
  %".8" = add i64 %".5", 1
  br label %".4"
.9:
  ret void
}}"""


def _text(batch: int) -> str:
    return _PROGRAM.format(n=64 * batch, offset=256 * batch + 128,
                           mean=f"{float(64 * batch):e}")


def test_literals_that_differ_are_loaded_and_each_batch_supplies_them():
    template = Template.of(_text(16), _text(17), "tapeml.f.")
    assert template is not None
    assert template.types == ["i64", "i64", "float"]
    assert '%"batch.0" = load i64, ptr @"tapeml.f.batch.0"' in template.text
    assert "icmp slt i64 %\".5\", %\"batch.0\"" in template.text
    assert template.values(_text(8)) == ["512", "2176", f"{512.0:e}"]
    assert template.data_module(template.values(_text(3))).split("\n")[0] == \
        '@"tapeml.f.batch.0" = constant i64 192'


def test_names_holding_digits_are_not_literals():
    assert LITERAL.findall('%".12" = add i64 %".3", 7 ; @"tapeml._lambda__op12" #0 !3') == ["7"]


def test_a_text_that_differs_beyond_literals_is_no_template_and_no_instance():
    other = _text(17).replace("fdiv", "fmul")
    assert Template.of(_text(16), other, "tapeml.f.") is None
    template = Template.of(_text(16), _text(17), "tapeml.f.")
    assert template.values(other) is None
    unchanged = _text(16).replace("add i64 %\".5\", 1", "add i64 %\".5\", 2")
    assert template.values(unchanged) is None  # a literal alike at 16 and 17 differs


def test_a_literal_outside_an_instruction_makes_no_template():
    first, second = (f"@g = constant i64 {n}\n" + _text(16) for n in (16, 17))
    assert Template.of(first, second, "tapeml.f.") is None


def test_callers_are_named_by_the_order_of_their_calls():
    text = ('  call ccc void @"tapeml_gemm_m64"(ptr %".1")\n'
            '  call ccc void @"tapeml_gemm_m32"(ptr %".1")\n'
            'declare void @"tapeml_gemm_m32"(ptr %".1")\n'
            'declare void @"tapeml_gemm_m64"(ptr %".1")')
    out, order = canonical(text, {"tapeml_gemm_m32", "tapeml_gemm_m64"}, "p.")
    assert order == ["tapeml_gemm_m64", "tapeml_gemm_m32"]
    assert out.split("\n")[-2:] == ['declare void @"p.gemm.0"(ptr %".1")',
                                   'declare void @"p.gemm.1"(ptr %".1")']


# --- jit, end to end -------------------------------------------------------------------------


def _loss(params, x, y):
    h = np.tanh(x @ params["W1"] + params["b1"])
    logits = h @ params["W2"] + params["b2"]
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -(logp * y).sum() / x.shape[0]


def _params(rng):
    return {"W1": rng.standard_normal((20, 32)).astype(np.float32) * 0.3,
            "b1": rng.standard_normal(32).astype(np.float32) * 0.1,
            "W2": rng.standard_normal((32, 5)).astype(np.float32) * 0.3,
            "b2": rng.standard_normal(5).astype(np.float32) * 0.1}


def _batch(rng, n):
    x = rng.standard_normal((n, 20)).astype(np.float32)
    y = np.eye(5, dtype=np.float32)[rng.integers(0, 5, n)]
    return x, y


def _mlp_batches(seed):
    """args_at(n): _params' parameters (one draw) and a new batch of n (x, y) each call."""
    rng = np.random.default_rng(seed)
    params = _params(rng)

    def args_at(n):
        x, y = _batch(rng, n)
        return params, x, y

    return args_at


def _same(got, want):
    got, _ = tapeml.tracing.pytree.flatten(got)
    want, _ = tapeml.tracing.pytree.flatten(want)
    return all(a.tobytes() == b.tobytes() for a, b in zip(got, want, strict=True))


def _close(got, want):
    for a, b in zip(tapeml.tracing.pytree.flatten(got)[0], tapeml.tracing.pytree.flatten(want)[0],
                    strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def _check(step, sizes, args_at, threads):
    """`step` jitted with batch_argnums=(1, 2) called at each of `sizes` in turn: each
    result bit for bit what a program compiled first at that size computes (the same loops,
    the same order of every sum), and within rounding the per-batch compile's (whose sums over
    the batch may be grouped otherwise); its explain() log."""
    with compiled_for_threads(threads):
        generic = tapeml.jit(step, batch_argnums=(1, 2))
        each = tapeml.jit(step)
        for n in sizes:
            args = args_at(n)
            got = generic(*args)
            assert _same(got, tapeml.jit(step, batch_argnums=(1, 2))(*args)), n
            _close(got, each(*args))
    return generic.explain().split("\n")


@pytest.mark.parametrize("threads", [1, 2])
def test_a_transformer_step_at_new_batch_sizes_is_the_program_compiled_once(threads):
    import gpt_step  # (bench/)

    def args_at(n):
        _, params, tokens, targets = gpt_step.make("ids", 2, batch=n)
        return params, tokens, targets

    # at 2, the copies that begin two scatters (the loss's gradient over 2 x 64 tokens' 64
    # logits, the embedding table's 64 x 128: 8,192 elements each) were alike and became one
    # function: tape-to-loops tags each nest with its op under any_batch (and
    # outline-parallel-loops keeps the tag on the parts)
    # at 1, a sum over the batch lost its loop of one trip, and an elementwise op over (1, T,
    # C) its batch loop (size-1 dims dropped, read with a step of 0): under any_batch they
    # stay loops, read with their own strides
    sizes = (16, 8, 12, 2, 1, 16) if threads == 1 else (16, 2, 1, 16)
    log = _check(tapeml.value_and_grad(gpt_step.tapeml_loss("ids")), sizes, args_at, threads)
    assert len(log) == len(sizes) - 1  # (16 again: the first call's program)
    assert "compiled at batch sizes 16 and 33" in log[0]
    assert all("an instance of the compiled program" in line for line in log[1:]), log


@pytest.mark.parametrize("threads", [1, 2])
def test_an_mlp_step_at_new_batch_sizes_is_the_program_compiled_once(threads):
    args_at = _mlp_batches(0)

    # 8, 4 and 2: fewer rows than LANES (the loss's mean over the batch) had taken one chain,
    # not LANES partials, and fewer outputs than SIDE_BY_SIDE no block loop: other programs
    sizes = (16, 9, 33, 16, 64, 200, 8, 4, 2)
    log = _check(tapeml.value_and_grad(_loss), sizes, args_at, threads)
    assert len(log) == 8, log
    assert "compiled at batch sizes 16 and 33" in log[0]
    assert all("an instance of the compiled program" in line for line in log[1:]), log
    params, x, y = args_at(9)
    np.testing.assert_allclose(tapeml.jit(tapeml.value_and_grad(_loss), batch_argnums=(1, 2))(
        params, x, y)[0], _loss(params, x, y), rtol=1e-5)


def test_a_cnn_step_at_smaller_batch_sizes_is_the_program_compiled_once():
    from tapeml import nn, ops

    rng = np.random.default_rng(7)
    params = {"c": nn.conv2d_init(rng, 1, 4, 3), "out": nn.linear_init(rng, 4 * 6 * 6, 5)}

    def loss(p, x, y):
        h = nn.max_pool2d(ops.relu(nn.conv2d(x, p["c"]["W"], p["c"]["b"], padding=1)), 2)
        return nn.softmax_cross_entropy(nn.linear(p["out"], ops.reshape(h, (h.shape[0], -1))),
                                        y)

    def args_at(n):
        x = rng.standard_normal((n, 1, 12, 12)).astype(np.float32)
        return params, x, np.eye(5, dtype=np.float32)[rng.integers(0, 5, n)]

    log = _check(tapeml.value_and_grad(loss), (32, 8, 2), args_at, threads=1)
    assert all("an instance of the compiled program" in line for line in log[1:]), log


@pytest.mark.parametrize("threads", [1, 2])
def test_a_convolution_over_windows_at_a_batch_of_one_group_is_an_instance(threads):
    # an 8 -> 8 convolution over 16 x 16 takes the windows, a group of `threads` images at a
    # time: at batch 2 on two threads one group is every image, and its loop had been left out
    # (the template's, at 16 and 33, loops over groups): no instance (found by a review)
    from tapeml import nn, ops

    rng = np.random.default_rng(3)
    params = {"c": nn.conv2d_init(rng, 8, 8, 3), "out": nn.linear_init(rng, 8 * 16 * 16, 3)}

    def loss(p, x, y):
        h = ops.relu(nn.conv2d(x, p["c"]["W"], p["c"]["b"], padding=1))
        return nn.softmax_cross_entropy(nn.linear(p["out"], ops.reshape(h, (h.shape[0], -1))),
                                        y)

    def args_at(n):
        x = rng.standard_normal((n, 8, 16, 16)).astype(np.float32)
        return params, x, np.eye(3, dtype=np.float32)[rng.integers(0, 3, n)]

    log = _check(tapeml.value_and_grad(loss), (16, 2, 3), args_at, threads=threads)
    assert all("an instance of the compiled program" in line for line in log[1:]), log


def _mean_loss(params, x, y):
    h = np.tanh(x @ params["W1"] + params["b1"])
    logits = h @ params["W2"] + params["b2"]
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -(logp * y).sum(axis=1).mean()


def test_a_batch_size_that_traces_to_other_ops_compiles_on_its_own_lowered_once():
    # at batch 1 the mean's gradient, broadcast over the batch, is no broadcast: another
    # program, found from the trace, before any lowering for the comparison
    args_at = _mlp_batches(1)

    log = _check(tapeml.value_and_grad(_mean_loss), (8, 1), args_at, threads=1)
    assert "batch size 1 traces to other ops than the compiled program's; compiled on its own" \
        in log[1]
    step = tapeml.jit(tapeml.value_and_grad(_mean_loss), batch_argnums=(1, 2))
    step(*args_at(8))
    one = args_at(1)
    with tapeml.profile() as stages:
        got = step(*one)
    assert [s.name for s in stages].count("tape-to-loops") == 1  # the plain compile's
    assert _same(got, tapeml.jit(tapeml.value_and_grad(_mean_loss))(*one))


def test_a_batch_size_that_lowers_otherwise_compiles_on_its_own(monkeypatch):
    # the comparison of the lowerings stands on its own: with the traces' taken for alike,
    # batch 1's lowering (its batch axis dropped from every loop nest) is still no instance
    import tapeml.frontend.batch_sizes as batch_sizes

    monkeypatch.setattr(batch_sizes, "_outline", lambda module: "")
    args_at = _mlp_batches(1)

    log = _check(tapeml.value_and_grad(_loss), (8, 1), args_at, threads=1)
    assert "batch size 1 lowers otherwise than the compiled program; compiled on its own" \
        in log[1]


def test_batch_argnums_mistakes_are_clear_errors():
    f = tapeml.jit(lambda a, b: a + b, batch_argnums=(0, 1))
    with pytest.raises(TypeError, match="share a leading axis"):
        f(np.ones((3, 2), np.float32), np.ones((4, 2), np.float32))
    with pytest.raises(TypeError, match="out of range"):
        tapeml.jit(lambda a: a, batch_argnums=3)(np.ones(2, np.float32))
    with pytest.raises(TypeError, match="both static_argnums and batch_argnums"):
        tapeml.jit(lambda a, k: a * k, static_argnums=1, batch_argnums=(0, 1))(
            np.ones(2, np.float32), 2)
    with pytest.raises(ValueError, match="cpu backend's"):
        tapeml.jit(lambda a: a, backend="interp", batch_argnums=0)
    with pytest.raises(TypeError, match="must be ints"):
        tapeml.jit(lambda a: a, batch_argnums="0")


def test_a_function_that_writes_its_batch_size_compiles_per_batch_size():
    def loss(w, x):
        return (x.reshape(4, -1) @ w).sum()  # (the batch, 4, written in)

    f = tapeml.jit(loss, batch_argnums=1)
    w = np.ones((6, 2), np.float32)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    assert f(w, x) == np.float32((x @ w).sum())
    assert "batch-generic: none, it does not trace at batch size 9" in f.explain()


def test_a_new_process_finds_the_program_in_the_disk_cache_and_damage_is_compiled_again(
        tmp_path, monkeypatch):
    rng = np.random.default_rng(2)
    params = _params(rng)
    at = {n: _batch(rng, n) for n in (12, 20)}
    step = tapeml.value_and_grad(_loss)
    with compiled_for_threads(1):  # (the disk cache off, as conftest.py sets it)
        want = {n: tapeml.jit(step, batch_argnums=(1, 2))(params, *at[n]) for n in at}
    monkeypatch.setenv("TAPEML_CACHE", "1")
    monkeypatch.setenv("TAPEML_CACHE_DIR", str(tmp_path))

    def first_call(n: int) -> tuple[object, list[str], str]:
        # a new jit, as a new process makes: nothing of the earlier ones in memory
        f = tapeml.jit(step, batch_argnums=(1, 2))
        with compiled_for_threads(1), tapeml.profile() as stages:
            out = f(params, *at[n])
        return out, [str(s) for s in stages], f.explain()

    compiled, stages, _ = first_call(12)
    assert any("LLVM O2 (batch-generic)" in s for s in stages)
    assert _same(compiled, want[12])
    cached, stages, log = first_call(12)  # the instance and its template: no pass runs
    assert "batch size 12 from the disk cache" in log
    assert not any("tape-to-loops" in s or "LLVM O2" in s for s in stages), stages
    assert _same(cached, compiled)
    other, stages, log = first_call(20)  # another size: lowered, the template's code cached
    assert "compiled at batch sizes 20 and 41" in log
    assert not any("LLVM O2" in s for s in stages), stages
    assert _same(other, want[20])
    for entry in tmp_path.rglob("*"):  # every entry damaged: each is found out and rebuilt
        if entry.is_file():
            entry.write_bytes(entry.read_bytes()[:-7] + b"garbage")
    again, stages, _ = first_call(12)
    assert any("LLVM O2 (batch-generic)" in s for s in stages)
    assert _same(again, compiled)


def test_outputs_that_lead_with_the_batch_and_static_arguments_beside_it():
    def predict(scale, params, x):
        h = np.tanh(x @ params["W1"] + params["b1"]) * scale
        return h @ params["W2"] + params["b2"], h.sum(axis=0)

    rng = np.random.default_rng(3)
    params = _params(rng)
    with compiled_for_threads(1):
        f = tapeml.jit(predict, static_argnums=0, batch_argnums=2)
        for n in (16, 40, 24):
            x = rng.standard_normal((n, 20)).astype(np.float32)
            logits, total = f(0.5, params, x)
            assert logits.shape == (n, 5) and total.shape == (32,)
            h = np.tanh(x @ params["W1"] + params["b1"]) * np.float32(0.5)
            np.testing.assert_allclose(logits, h @ params["W2"] + params["b2"], rtol=1e-5,
                                       atol=1e-6)
            np.testing.assert_allclose(total, h.sum(axis=0), rtol=1e-5, atol=1e-5)
        log = f.explain().split("\n")
    assert all("an instance of the compiled program" in line for line in log[1:]), log


def test_a_recompile_for_a_new_batch_size_names_the_batch_argnums_that_would_share_it():
    rng = np.random.default_rng(4)
    params = _params(rng)
    step = tapeml.jit(tapeml.value_and_grad(_loss))
    for n in (16, 9):
        step(params, *_batch(rng, n))
    hint = "a new batch size (16 -> 9) alone: jit(..., batch_argnums=(1, 2))"
    assert hint in step.explain().split("\n")[1]
    # taking the hint: one program, and batch 9 an instance of it
    generic = tapeml.jit(tapeml.value_and_grad(_loss), batch_argnums=(1, 2))
    for n in (16, 9):
        generic(params, *_batch(rng, n))
    assert "an instance of the compiled program" in generic.explain().split("\n")[1]

    # static arguments count among the positions; no hint where anything else changed too
    f = tapeml.jit(lambda scale, w, x, y: ((x @ w).sum() * scale, y.sum()), static_argnums=0)
    w, x, y = (np.ones(shape, np.float32) for shape in ((4, 3), (8, 4), (8, 2)))
    f(2.0, w, x, y)
    f(2.0, w, x[:4], y[:4])
    f(2.0, np.ones((5, 3), np.float32), np.ones((6, 5), np.float32), y[:6])  # a width too
    f(2.0, w, x[:6], y[:5])  # two batch sizes
    f(2.0, w, x[:6], np.ones((6, 3), np.float32))  # not the leading axis
    f(2.0, w, x[:6], y[:6].astype(np.float64))  # a dtype
    f(3.0, w, x[:5], y[:5])  # a static argument with the batch
    log = f.explain().split("\n")
    assert "a new batch size (8 -> 4) alone: jit(..., batch_argnums=(2, 3))" in log[1]
    assert len(log) == 7 and not any("batch_argnums" in line for line in log[2:]), log
    assert log[6].endswith("; static arguments changed from (2.0,) to (3.0,)"), log[6]
    g = tapeml.jit(lambda x, mask: x[0] * x[1] * mask)  # a leaf of x kept its shape
    g((np.ones((3, 2), np.float32), np.ones(2, np.float32)), np.ones(2, np.float32))
    g((np.ones((5, 2), np.float32), np.ones(2, np.float32)), np.ones(2, np.float32))
    assert "batch_argnums" not in g.explain()
    h = tapeml.jit(lambda x: x * 2.0, backend="interp")  # the cpu backend's option only
    h(np.ones(3, np.float32)), h(np.ones(4, np.float32))
    assert "batch_argnums" not in h.explain()


def test_a_python_number_beside_the_batch_stays_weak_at_the_second_size():
    # a learning rate passed as a Python float: traced as a weak scalar at both sizes (at
    # the second it had been a float64 array, a program of other types: no template)
    rng = np.random.default_rng(5)
    params = _params(rng)

    def sgd(p, x, y, lr):
        grads = tapeml.grad(_loss)(p, x, y)
        return {k: p[k] - lr * grads[k] for k in p}

    def args_at(n):
        return (params, *_batch(rng, n), 0.05)

    log = _check(sgd, (16, 9, 40), args_at, threads=1)
    assert "compiled at batch sizes 16 and 33" in log[0], log
    assert all("an instance of the compiled program" in line for line in log[1:]), log
