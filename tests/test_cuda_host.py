"""The CUDA backend's host side without a GPU: jit(backend="cuda") end to end against a stand-in
driver whose device memory is host memory and whose kernel launches run the GPU form's kernels
on the emulated GPU. Everything but the PTX and the real driver is the backend's own code: the
launch schedule, the arena of intermediates (an overlap of two live buffers would corrupt the
results), the constants copied over once, DeviceArray arguments and results, the checks."""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np
import pytest
from xdsl.dialects import gpu
from xdsl.interpreters.shaped_array import ShapedArray
from xdsl.interpreters.utils.ptr import RawPtr, TypedPtr

import tapeml
from tapeml import nn, ops
from tapeml.codegen import cuda, cuda_driver
from tapeml.codegen.ptx import PTXModule
from tapeml.interpreters import make_interpreter
from tapeml.interpreters.gpu import launch

RNG = np.random.default_rng(5)


class FakeDriver:
    """cuda_driver._call's stand-in: allocations are numpy byte arrays, copies memmove."""

    def __init__(self) -> None:
        self.memory: dict[int, np.ndarray] = {}

    def __call__(self, fn: Any, *args: Any) -> Any:
        name = fn.__name__
        if name == "cuMemAlloc":
            block = np.zeros(args[0], np.uint8)
            self.memory[block.ctypes.data] = block
            return block.ctypes.data
        if name in ("cuMemcpyHtoD", "cuMemcpyDtoH"):
            ctypes.memmove(args[0], args[1], args[2])
            return None
        if name == "cuMemFree":
            del self.memory[args[0]]
            return None
        if name == "cuCtxSynchronize":
            return None
        raise AssertionError(f"unexpected driver call {name}")


class FakeFunction:
    def __init__(self, module: Any, kernel: gpu.FuncOp) -> None:
        self.module, self.kernel = module, kernel

    def launch(self, grid, block, args, shared_bytes: int = 0) -> None:
        operands = []
        for pointer, t in zip(args, self.kernel.function_type.inputs.data, strict=True):
            dtype = np.float32 if t.get_element_type().bitwidth == 32 else np.float64
            count = t.get_shape()[0]
            raw = (ctypes.c_uint8 * (count * np.dtype(dtype).itemsize)).from_address(pointer)
            memory = np.frombuffer(raw, np.uint8)
            operands.append(ShapedArray(TypedPtr(RawPtr(memory), xtype=t.get_element_type()),
                                        [count]))
        launch(make_interpreter(self.module), self.kernel, grid, block, tuple(operands))


class FakeContext:
    name, compute_capability = "emulated", (9, 0)

    def __init__(self) -> None:
        self.kernels: Any = None
        self.module: Any = None

    alloc = cuda_driver.Context.alloc
    synchronize = cuda_driver.Context.synchronize

    def load(self, ptx: str) -> Any:
        functions = {f.sym_name.data: f for f in self.kernels.body.block.ops}
        module = self.module

        class Loaded:
            def function(self, name: str) -> FakeFunction:
                return FakeFunction(module, functions[name])

        return Loaded()


@pytest.fixture
def device(monkeypatch):
    driver, context = FakeDriver(), FakeContext()
    monkeypatch.setattr(cuda_driver, "_call", driver)
    monkeypatch.setattr(cuda_driver, "context", lambda: context)

    def compile_ptx(kernels: gpu.ModuleOp, arch: str) -> PTXModule:
        context.kernels, context.module = kernels, kernels.parent_op()
        return PTXModule("", [f.sym_name.data for f in kernels.body.block.ops], "")

    monkeypatch.setattr(cuda, "compile_ptx", compile_ptx)
    return driver


def test_a_training_loop_keeps_its_parameters_on_the_device(device):
    params = {"w": RNG.standard_normal((3, 1, 3, 3)).astype(np.float32) * 0.5,
              "v": RNG.standard_normal((12, 2)).astype(np.float32) * 0.5}
    x = RNG.standard_normal((2, 1, 4, 4)).astype(np.float32)
    y = np.eye(2, dtype=np.float32)[[0, 1]]
    bias = np.array([0.5, -0.5], np.float32)  # a constant: copied to the device once

    def loss(p, x, y):
        h = nn.max_pool2d(ops.relu(nn.conv2d(x, p["w"], padding=1)), 2)
        return nn.softmax_cross_entropy(ops.reshape(h, (2, 12)) @ p["v"] + bias, y)

    def step(p, x, y):
        value, grads = tapeml.value_and_grad(loss)(p, x, y)
        return value, {k: p[k] - 0.1 * grads[k] for k in p}

    on_gpu = tapeml.jit(step, backend="cuda", gemm_tile=4)
    reference = tapeml.jit(step, backend="interp")
    device_params = {k: cuda_driver.DeviceArray.from_numpy(v) for k, v in params.items()}
    for _ in range(2):
        value, device_params = on_gpu(device_params, x, y)
        expected_value, params = reference(params, x, y)
        assert isinstance(value, cuda_driver.DeviceArray)
        np.testing.assert_allclose(value.numpy(), expected_value, rtol=1e-5)
        for k in params:
            np.testing.assert_allclose(device_params[k].numpy(), params[k], rtol=1e-5,
                                       atol=1e-6)
    compiled = next(iter(on_gpu.cache.values()))[1]
    assert compiled.plan.constants and compiled.plan.arena_bytes > 0


def test_arguments_are_checked_before_anything_reaches_the_device(device):
    f = tapeml.jit(lambda a: a * 2.0, backend="cuda")
    np.testing.assert_array_equal(f(np.arange(3, dtype=np.float32)).numpy(), [0, 2, 4])
    compiled = next(iter(f.cache.values()))[1]
    launched = len(device.memory)
    with pytest.raises(ValueError, match="must have shape"):
        compiled(cuda_driver.DeviceArray.from_numpy(np.ones(4, np.float32)))
    with pytest.raises(TypeError, match="must be float32"):
        compiled(np.ones(3, np.float64))
    with pytest.raises(TypeError, match="takes 1 arrays"):
        compiled()
    assert len(device.memory) <= launched + 1  # only the rejected DeviceArray was allocated
    assert math.prod(compiled.outputs[0].shape) == 3


def test_device_arrays_read_back_with_numpy_and_a_freed_one_is_refused(device):
    f = tapeml.jit(lambda a: ops.sum(a * a), backend="cuda")
    a = cuda_driver.DeviceArray.from_numpy(np.arange(4, dtype=np.float32))
    total = f(a)
    assert float(np.asarray(total)) == 14.0 and float(total.numpy()) == 14.0
    cpu = tapeml.jit(lambda a: ops.sum(a * a))
    assert float(cpu(a)) == 14.0  # the other backends take a device array (copied back)
    a.buffer.free()
    with pytest.raises(ValueError, match="freed device array"):
        f(a)
