"""backend="cuda": every op's forward and gradient through the GPU form, run on the emulated GPU
against the tape interpreter and compiled to PTX that ptxas assembles for sm_80 and sm_90; the
launch schedule; the errors without a GPU. The tests that launch on a real GPU skip without one
(scripts/gpu-check runs them there)."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from test_autodiff import CASES

import tapeml
from tapeml import nn, ops
from tapeml.codegen import cuda_driver, get_backend
from tapeml.codegen.cuda import arch_for, schedule
from tapeml.codegen.ptx import PTXError, _check_calls, compile_ptx
from tapeml.tracing.pytree import flatten
from tapeml.transforms.to_gpu import outline_module
from tapeml.transforms.to_loops import lower_module

RNG = np.random.default_rng(11)
GPU = cuda_driver.available()
needs_gpu = pytest.mark.skipif(not GPU, reason="no NVIDIA GPU and driver on this machine")
needs_ptxas = pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas is not installed")

SLOW_TO_EMULATE = {"nn_conv2d_pools"}  # its ops are all in smaller cases; emulation is per thread


def value_and_grad_program(name: str) -> tuple[tapeml.Program, tuple]:
    f, args = CASES[name]
    program = tapeml.trace(
        lambda *a: tapeml.value_and_grad(lambda *b: ops.sum(f(*b)), argnums=tuple(
            range(len(args))))(*a), *args)
    return program, args


def assert_close(got, expected) -> None:
    for g, e in zip(flatten(got)[0], flatten(expected)[0], strict=True):
        g, e = np.asarray(g), np.asarray(e)
        assert g.shape == e.shape and g.dtype == e.dtype
        tolerance = 1e-5 if g.dtype == np.float32 else 1e-11
        np.testing.assert_allclose(g, e, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("name", sorted(set(CASES) - SLOW_TO_EMULATE))
def test_every_op_and_its_gradient_on_the_emulated_gpu(name):
    program, args = value_and_grad_program(name)
    compiled = get_backend("cuda", emulate=True, gemm_tile=4).compile(program.module)
    assert_close(compiled(*flatten(args)[0]), program(*args))


@needs_ptxas
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_op_and_its_gradient_compile_to_ptx_that_ptxas_assembles(name, tmp_path):
    program, _ = value_and_grad_program(name)
    module = tapeml.Program.parse(str(program)).module
    lower_module(module)
    outline_module(module)
    kernels = next(op for op in module.ops if op.name == "gpu.module")
    for arch in ("sm_80", "sm_90"):
        compiled = compile_ptx(kernels, arch)
        assert f".target {arch}" in compiled.ptx
        assert compiled.ptx.count(".entry") == len(compiled.kernels) > 0
        path = tmp_path / f"{arch}.ptx"
        path.write_text(compiled.ptx)
        done = subprocess.run(["ptxas", "--gpu-name", arch, str(path), "-o", str(tmp_path / "o")],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_a_training_step_on_the_emulated_gpu_through_jit():
    """A small CNN's loss, gradient and SGD update, one jitted step, against the interpreter."""
    params = {"w": RNG.standard_normal((3, 1, 3, 3)).astype(np.float32) * 0.5,
              "v": RNG.standard_normal((12, 2)).astype(np.float32) * 0.5}
    x = RNG.standard_normal((2, 1, 4, 4)).astype(np.float32)
    y = np.eye(2, dtype=np.float32)[[0, 1]]

    def loss(p, x, y):
        h = nn.max_pool2d(ops.relu(nn.conv2d(x, p["w"], padding=1)), 2)
        return nn.softmax_cross_entropy(ops.reshape(h, (2, 12)) @ p["v"], y)

    def step(p, x, y):
        value, grads = tapeml.value_and_grad(loss)(p, x, y)
        return value, {k: p[k] - 0.1 * grads[k] for k in p}

    emulated = tapeml.jit(step, backend="cuda", emulate=True, gemm_tile=4)
    assert_close(emulated(params, x, y), tapeml.jit(step, backend="interp")(params, x, y))
    assert "gpu" in emulated.lower(params, x, y)


def test_without_a_gpu_backend_cuda_says_so_and_shows_its_ptx_for_a_given_arch():
    if GPU:
        pytest.skip("this machine has a GPU")
    x = np.ones(3, np.float32)
    with pytest.raises(cuda_driver.GPUUnavailableError, match="needs an NVIDIA GPU"):
        tapeml.jit(lambda a: a * 2.0, backend="cuda")(x)
    given = tapeml.jit(lambda a: a * 2.0, backend="cuda", arch="sm_80")
    stages = given.lower(x)
    assert list(stages) == ["tape", "fused tape", "loops", "gpu", "llvm ir", "ptx"]
    assert ".target sm_80" in stages["ptx"]
    with pytest.raises(cuda_driver.GPUUnavailableError, match="needs an NVIDIA GPU"):
        given(x)  # the first call loads the PTX


def test_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="arch must be one of sm_80, sm_90"):
        get_backend("cuda", arch="sm_70")
    with pytest.raises(ValueError, match="gemm_tile must be an int from 1 to 16"):
        get_backend("cuda", gemm_tile=32)
    with pytest.raises(cuda_driver.GPUUnavailableError, match="compute capability 8.0"):
        arch_for((7, 5))
    assert arch_for((8, 6)) == "sm_80" and arch_for((9, 0)) == "sm_90"


def test_a_call_no_gpu_lowering_knows_is_an_error_not_a_dead_process():
    with pytest.raises(PTXError, match="no GPU lowering for llvm.sin.f32"):
        _check_calls("%1 = call float @llvm.sin.f32(float %0)")
    assert _check_calls('%1 = call ccc float @"__nv_logf"(float %0)')


@pytest.mark.parametrize("libm", [False, True])
def test_without_libdevice_only_pow_and_libm_math_are_an_error(monkeypatch, libm):
    import tapeml.codegen.ptx as ptx

    monkeypatch.setattr(ptx, "libdevice_path", lambda: None)
    x = np.ones(4, np.float32)

    def kernels(f):
        program = tapeml.trace(f, x)
        lower_module(program.module, libm=libm)
        outline_module(program.module)
        return next(op for op in program.module.ops if op.name == "gpu.module")

    arithmetic = kernels(lambda a: ops.sigmoid(ops.log(ops.exp(ops.tanh(a)))))
    if libm:
        with pytest.raises(PTXError, match="libdevice"):
            compile_ptx(arithmetic)
    else:
        assert "call" not in compile_ptx(arithmetic).ptx  # no library needed
    with pytest.raises(PTXError, match="needs the CUDA toolkit's libdevice"):
        compile_ptx(kernels(lambda a: ops.power(a, a)))


def test_the_schedule_places_live_intermediates_apart_and_reuses_freed_space():
    def chain(a):
        for _ in range(6):
            a = ops.tanh(a) @ np.eye(64, dtype=np.float32)  # each result dies at the next
        return ops.sum(a)

    program = tapeml.trace(chain, np.ones((64, 64), np.float32))
    lower_module(program.module)
    outline_module(program.module)
    f = program.function
    plan = schedule(f)
    assert [launch.kernel for launch in plan.launches][:2] == ["chain_k0", "chain_gemm0"]
    buffers = [op for op in f.body.block.ops if op.name in ("gpu.alloc", "memref.get_global")]
    slot = {op: len(f.body.block.args) + i for i, op in enumerate(buffers)}  # as schedule()
    sizes = {op: op.results[0].type.get_shape()[0] * 4 for op in buffers}
    globals_ = [op for op in buffers if op.name == "memref.get_global"]
    assert sorted(plan.constants) == sorted(slot[op] for op in globals_)  # copied over once
    allocated = [op for op in buffers if op.name == "gpu.alloc"]
    assert plan.arena_bytes < sum(sizes[op] for op in allocated)  # dead buffers' space reused
    live: list = []
    for op in f.body.block.ops:  # no two live intermediates overlap in the arena
        if op.name == "gpu.alloc":
            start = plan.arena[slot[op]]
            for other_start, other_size in live:
                assert start + sizes[op] <= other_start or other_start + other_size <= start
            live.append((start, sizes[op]))
        elif op.name == "gpu.dealloc":
            owner = op.operands[0].owner
            live.remove((plan.arena[slot[owner]], sizes[owner]))


def test_the_schedule_copies_each_constant_in_its_own_dtype():
    """The device gets a constant's bits as the program holds them: an i32 index table read as
    f32 indexed garbage on a real GPU (the emulated one reads the globals itself)."""
    from tapeml.dialects import tape
    from tapeml.tracing.trace import bind

    indices = np.array([[1, -1, 3], [9, -4, 2**31 - 1]], np.int32)
    mask = np.array([True, False, True])
    fill = np.array([0.5, -0.0, 3e-300])
    program = tapeml.trace(lambda a: ops.where(mask, bind(tape.TakeOp, a, indices, axis=1), fill),
                           np.ones((3, 4)))
    lower_module(program.module)
    outline_module(program.module)
    got = list(schedule(program.function).constants.values())
    assert [c.dtype for c in got] == [np.int32, np.float64, np.bool_]
    for value, expected in zip(got, [indices, fill, mask], strict=True):
        assert value.tobytes() == expected.tobytes()


# ----------------------------------------------------------------------------------------------
# On a real GPU (skipped here; scripts/gpu-check runs them where there is one)


@needs_gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_op_and_its_gradient_on_the_gpu(name):
    program, args = value_and_grad_program(name)
    compiled = get_backend("cuda").compile(program.module)
    got = [a.numpy() for a in compiled(*flatten(args)[0])]
    assert_close(got, program(*args))


@needs_gpu
def test_matmuls_on_the_gpu_at_shapes_off_the_tile():
    for m, k, n in [(1, 1, 1), (33, 17, 65), (257, 129, 100)]:
        a = RNG.standard_normal((m, k)).astype(np.float32)
        b = RNG.standard_normal((k, n)).astype(np.float32)
        got = tapeml.jit(lambda a, b: a @ b, backend="cuda")(a, b).numpy()
        np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


@needs_gpu
def test_parameters_stay_on_the_gpu_between_steps():
    w = cuda_driver.DeviceArray.from_numpy(np.ones((4, 3), np.float32))
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    step = tapeml.jit(lambda w, x: w - 0.1 * tapeml.grad(lambda w, x: ops.sum((x @ w) ** 2))(w, x),
                      backend="cuda")
    expected = np.ones((4, 3), np.float32)
    for _ in range(3):
        w = step(w, x)
        assert isinstance(w, cuda_driver.DeviceArray)
        expected = expected - 0.1 * (2 * x.T @ (x @ expected))
    np.testing.assert_allclose(w.numpy(), expected, rtol=1e-4)
    with pytest.raises(ValueError, match="tape.matmul: contraction dims differ"):  # a new trace
        step(cuda_driver.DeviceArray.from_numpy(np.ones((3, 4), np.float32)), x)


def test_bad_pass_options_and_input_not_in_loop_form_are_clear_errors():
    from tapeml.transforms.to_loops import LoweringError

    program = tapeml.trace(lambda a: a * 2.0, np.ones(4, np.float32))
    with pytest.raises(LoweringError, match="not in the loop form"):
        outline_module(tapeml.Program.parse(str(program)).module)
    lower_module(program.module)
    for options, message in [({"block": 0}, "block must be 1 to 1024"),
                             ({"block": 4096}, "block must be 1 to 1024"),
                             ({"gemm_tile": 0}, "gemm_tile must be 1 to 16"),
                             ({"gemm_tile": 32}, "gemm_tile must be 1 to 16")]:
        with pytest.raises(LoweringError, match=message):
            outline_module(program.module.clone(), **options)


def test_a_gemm_grid_is_one_dimensional_and_a_launch_past_the_limits_is_an_error():
    """Rows and batches are folded into grid x (y and z reach only 65535 blocks)."""
    from tapeml.transforms.to_loops import LoweringError

    big = tapeml.trace(lambda a, b: ops.matmul(a, b), tapeml.Spec((70000, 2, 2), np.float32),
                       tapeml.Spec((70000, 2, 2), np.float32))
    lower_module(big.module)
    outline_module(big.module)
    launch = next(op for op in big.function.body.block.ops if op.name == "gpu.launch_func")
    grid = [op.owner.value.value.data for op in launch.operands[:3]]
    assert grid == [70000, 1, 1]
    huge = tapeml.trace(lambda a: a + a, tapeml.Spec((1 << 40,), np.float32))
    lower_module(huge.module)
    with pytest.raises(LoweringError, match="past the GPU's"):
        outline_module(huge.module)

