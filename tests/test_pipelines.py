"""The pipelines are data (tapeml/transforms/pipelines.py), run the same way by the backends and
by tapeml-opt's whole-way passes: `tape-to-llvm` prints the llvm dialect `jit` compiles, and
`tape-to-gpu` the GPU form the CUDA backend launches."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import VerifyException

import tapeml
from tapeml import nn, ops
from tapeml.codegen import get_backend
from tapeml.codegen.gemm import host_threads
from tapeml.codegen.stages import Stages, run_pipeline
from tapeml.transforms.pipelines import Step, TapeToGPUPass, TapeToLLVMPass, cpu_pipeline

RNG = np.random.default_rng(0)


def _step():
    params = nn.mlp_init(RNG, [64, 128, 10])
    x = RNG.standard_normal((256, 64)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[RNG.integers(0, 10, 256)]
    loss = lambda p, x, y: nn.softmax_cross_entropy(nn.mlp(p, x), y)  # noqa: E731
    return tapeml.trace(tapeml.value_and_grad(loss), params, x, y)


def _module_text(stage: str) -> str:
    """A stage's text less the report it is headed by (`// pass: what it did`)."""
    return stage.split("\n", 1)[1] if stage.startswith("// ") else stage


def _through(program, pass_):
    module = tapeml.Program.parse(str(program)).module  # as tapeml-opt reads it: from text
    pass_.apply(Context(), module)
    return str(module)


@pytest.mark.parametrize("threads", [1, 2])
def test_tape_to_llvm_prints_what_the_cpu_backend_compiles(threads, monkeypatch):
    monkeypatch.setenv("TAPEML_NUM_THREADS", str(threads))
    assert host_threads() == threads
    program = _step()
    stages = get_backend("cpu").compile(program.module, stages=True).stages
    assert _through(program, TapeToLLVMPass(threads=threads)) == \
        _module_text(stages["llvm dialect"])
    assert ("outlined loops" in stages) == (threads > 1)


def test_tape_to_gpu_prints_what_the_cuda_backend_launches():
    program = _step()
    stages = get_backend("cuda", emulate=True).compile(program.module, stages=True).stages
    assert _through(program, TapeToGPUPass()) == _module_text(stages["gpu"])


def test_tapeml_opt_output_does_not_depend_on_the_host(monkeypatch):
    """A machine-dependent choice is an option with a fixed default: one thread."""
    program = _step()
    texts = set()
    for threads in ("1", "2", "16"):
        monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
        texts.add(_through(program, TapeToLLVMPass()))
    assert len(texts) == 1 and "tapeml_parallel_for" not in texts.pop()


def test_the_backend_and_the_pass_share_one_list():
    names = [step.pass_.name for step in cpu_pipeline(threads=2)]
    assert names == ["tape-fuse", "tape-to-loops", "outline-parallel-loops", "plan-arena",
                     "loop-bounds-as-arguments", "merge-loop-nests", "convert-scf-to-cf",
                     "convert-loops-to-llvm"]
    assert [s.pass_.name for s in cpu_pipeline(fuse=False, tidy=True)] == [
        "tape-to-loops", "plan-arena", "loop-bounds-as-arguments", "merge-loop-nests",
        "convert-scf-to-cf", "canonicalize", "cse", "convert-loops-to-llvm"]
    assert "loop-bounds-as-arguments" not in [  # (batch_argnums' template has its own way)
        s.pass_.name for s in cpu_pipeline(any_batch=True)]


class _Breaks(ModulePass):
    """A pass that leaves the module invalid: a func.return returning nothing from a function
    that returns a value."""

    name = "break-the-module"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        f = next(o for o in op.ops if isinstance(o, func.FuncOp))
        f.body.block.last_op.operands = ()


def _counting_verify(monkeypatch) -> list[ModuleOp]:
    verified: list[ModuleOp] = []
    real = ModuleOp.verify

    def verify(self, verify_nested_ops: bool = True) -> None:
        verified.append(self)
        real(self, verify_nested_ops)

    monkeypatch.setattr(ModuleOp, "verify", verify)
    return verified


def test_checks_verify_the_trace_and_the_module_after_each_pass(monkeypatch):
    """TAPEML_CHECKS (the suite runs with it): trace verifies what it recorded, a pipeline the
    module after every pass, and a pass that leaves it invalid is named."""
    monkeypatch.setenv("TAPEML_CHECKS", "1")
    verified = _counting_verify(monkeypatch)
    program = _step()
    assert verified == [program.module]
    steps = cpu_pipeline()
    run_pipeline(program.module, steps, Stages(False))
    assert len(verified) == 1 + len(steps)
    with pytest.raises(VerifyException, match="does not verify after break-the-module"):
        run_pipeline(program.module, [Step(_Breaks())], Stages(False))


def test_without_checks_nothing_is_verified_again(monkeypatch):
    """Without TAPEML_CHECKS (a user's default) tracing and compiling verify nothing whole:
    each op was checked as it was built; a user's mistake is still an error at its line."""
    monkeypatch.setenv("TAPEML_CHECKS", "0")
    verified = _counting_verify(monkeypatch)
    program = _step()
    run_pipeline(program.module, cpu_pipeline(), Stages(False))
    assert verified == []
    with pytest.raises(tapeml.ShapeError, match="test_pipelines.py"):
        tapeml.trace(lambda a, b: a @ b, np.ones((2, 3), np.float32),
                     np.ones((2, 3), np.float32))


@pytest.mark.parametrize("name", ["cpu", "interp"])
def test_a_module_given_away_compiles_in_place_and_one_lent_stays(name):
    """compile(module) leaves the module as it was; compile(module, owned=True) (jit's own
    traced programs) may change it instead of a copy, and computes the same."""
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    y = RNG.standard_normal((16, 4)).astype(np.float32)
    f = lambda x, y: ops.tanh(x @ y) * 2.0 + ops.exp(-x).sum()  # noqa: E731
    lent_program, given_program = tapeml.trace(f, x, y), tapeml.trace(f, x, y)
    text = str(lent_program.module)
    lent = get_backend(name).compile(lent_program.module)
    assert str(lent_program.module) == text
    owned = get_backend(name).compile(given_program.module, owned=True)
    for a, b in zip(lent(x, y), owned(x, y), strict=True):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
