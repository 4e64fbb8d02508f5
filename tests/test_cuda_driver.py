"""tapeml.codegen.cuda_driver: the errors without a GPU, the checks made before any driver call,
and, where there is a GPU, a hand-written PTX kernel, device arrays and the driver's errors."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import threading
import traceback
from types import SimpleNamespace

import numpy as np
import pytest
from cuda.bindings import driver as cu

from tapeml.codegen import cuda_driver as cd

HAS_GPU = cd.available()
gpu = pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU and its driver")
no_gpu = pytest.mark.skipif(HAS_GPU, reason="checks the errors of a machine without a GPU")

VADD_PTX = r"""
.version 8.0
.target sm_80
.address_size 64

.visible .entry vadd(.param .u64 vadd_a, .param .u64 vadd_b, .param .u64 vadd_out,
                     .param .s64 vadd_n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<11>;
    .reg .f32 %f<4>;

    ld.param.u64 %rd1, [vadd_a];
    ld.param.u64 %rd2, [vadd_b];
    ld.param.u64 %rd3, [vadd_out];
    ld.param.s64 %rd4, [vadd_n];
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mul.wide.u32 %rd5, %r1, %r2;
    cvt.u64.u32 %rd6, %r3;
    add.s64 %rd5, %rd5, %rd6;
    setp.ge.s64 %p1, %rd5, %rd4;
    @%p1 bra DONE;
    shl.b64 %rd7, %rd5, 2;
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    add.s64 %rd8, %rd1, %rd7;
    add.s64 %rd9, %rd2, %rd7;
    add.s64 %rd10, %rd3, %rd7;
    ld.global.f32 %f1, [%rd8];
    ld.global.f32 %f2, [%rd9];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd10], %f3;
DONE:
    ret;
}
"""


def fake_buffer(pointer: int, nbytes: int) -> cd.DeviceBuffer:
    """A DeviceBuffer over a made-up pointer, never freed: for the checks made on the host."""
    buf = cd.DeviceBuffer(pointer, nbytes)
    buf._finalizer.detach()
    return buf


# Without a GPU ------------------------------------------------------------------------------


@no_gpu
def test_no_gpu_is_reported_not_crashed():
    assert cd.available() is False
    with pytest.raises(cd.GPUUnavailableError, match=r"backend='cuda' needs an NVIDIA GPU") as e:
        cd.context()
    # One clean error: no traceback from cuda-python's driver loader chained on.
    assert "pathfinder" not in "".join(traceback.format_exception(e.value))
    with pytest.raises(cd.GPUUnavailableError):
        cd.context()  # the second attempt gives the same answer


@no_gpu
def test_no_gpu_device_arrays_and_launches():
    with pytest.raises(cd.GPUUnavailableError):
        cd.DeviceArray.from_numpy(np.ones(3, np.float32))
    with pytest.raises(cd.GPUUnavailableError):
        cd.DeviceArray.empty((2, 3), np.float32)
    # Arguments that pass the checks go on to the driver, which is not there.
    with pytest.raises(cd.GPUUnavailableError):
        cd.Function(cu.CUfunction(), "dummy").launch((1, 1, 1), (32, 1, 1), [1])


# On any machine ----------------------------------------------------------------------------


def test_check_turns_a_failure_into_cuda_error():
    oom = cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY
    with pytest.raises(cd.CUDAError) as e:
        cd._check("cuMemAlloc", (oom, None))
    assert e.value.name == "CUDA_ERROR_OUT_OF_MEMORY" and e.value.call == "cuMemAlloc"
    assert str(e.value).startswith("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY")
    if HAS_GPU:  # cuGetErrorString needs the driver
        assert "out of memory" in str(e.value)
    assert cd.CUDAError("cuMemAlloc", 2).name == "CUDA_ERROR_OUT_OF_MEMORY"  # a plain int code
    assert "the JIT log" in str(cd.CUDAError("cuModuleLoadDataEx", 218, "the JIT log"))


def test_check_returns_the_outputs():
    ok = cu.CUresult.CUDA_SUCCESS
    assert cd._check("f", (ok,)) is None
    assert cd._check("f", (ok, 7)) == 7
    assert cd._check("f", (ok, 7, 8)) == (7, 8)


@pytest.mark.parametrize(
    ("grid", "block"),
    [
        ((0, 1, 1), (32, 1, 1)),
        ((1, 1, 1), (0, 1, 1)),
        ((-1, 1, 1), (32, 1, 1)),
        ((1, 1), (32, 1, 1)),
        ((1, 1, 1), (1025, 1, 1)),
        ((1, 1, 1), (32, 32, 2)),  # 2048 threads
        ((1, 1, 1), (1, 1, 65)),
        ((1, 65536, 1), (32, 1, 1)),
    ],
)
def test_launch_rejects_bad_dimensions_before_the_driver(monkeypatch, grid, block):
    monkeypatch.setattr(cd, "context", lambda: pytest.fail("reached the driver"))
    with pytest.raises(ValueError):
        cd.Function(cu.CUfunction(), "dummy").launch(grid, block, [])


def test_launch_rejects_bad_arguments_before_the_driver(monkeypatch):
    monkeypatch.setattr(cd, "context", lambda: pytest.fail("reached the driver"))
    f = cd.Function(cu.CUfunction(), "dummy")
    for args in ([1.5], ["x"], [np.zeros(3)], [True]):
        with pytest.raises(TypeError, match="argument 0 of dummy"):
            f.launch((1, 1, 1), (1, 1, 1), args)
    with pytest.raises(ValueError, match="64 bits"):
        f.launch((1, 1, 1), (1, 1, 1), [2**63])
    with pytest.raises(ValueError):
        f.launch((1, 1, 1), (1, 1, 1), [], shared_bytes=-1)
    freed = fake_buffer(0, 0)
    freed.free()
    with pytest.raises(ValueError, match="freed"):
        f.launch((1, 1, 1), (1, 1, 1), [freed])


def test_launch_packs_pointers_and_i64s(monkeypatch):
    """What cuLaunchKernel receives: kernelParams is a void** whose entries point at the u64
    pointers and the two's-complement s64 integers."""
    seen = {}

    def cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):  # noqa: N802
        pointers = (ctypes.c_void_p * 3).from_address(params)
        seen["values"] = [ctypes.c_int64.from_address(p).value for p in pointers]
        seen["dims"] = (gx, gy, gz, bx, by, bz, shared, stream, extra)
        return (cu.CUresult.CUDA_SUCCESS,)

    buf = fake_buffer(0x7F00_0000_1000, 64)
    monkeypatch.setattr(cd, "context", lambda: None)
    monkeypatch.setattr(cd, "cu", SimpleNamespace(cuLaunchKernel=cuLaunchKernel))
    cd.Function(cu.CUfunction(), "k").launch((4, 2, 1), (256, 1, 1), [buf, -5, np.int64(7)], 128)
    assert seen["values"] == [0x7F00_0000_1000, -5, 7]
    assert seen["dims"] == (4, 2, 1, 256, 1, 1, 128, 0, 0)


def test_copies_check_the_host_array_before_the_driver(monkeypatch):
    monkeypatch.setattr(cd, "context", lambda: pytest.fail("reached the driver"))
    buf = fake_buffer(0x1000, 24)
    with pytest.raises(ValueError, match="bytes"):
        buf.copy_from(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        buf.copy_from(np.zeros((3, 4), np.float32)[:, ::2])
    read_only = np.zeros(6, np.float32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        buf.copy_to(read_only)
    buf.free()
    buf.free()  # idempotent
    with pytest.raises(ValueError, match="freed"):
        buf.copy_to(np.zeros(6, np.float32))


def test_device_array_metadata():
    a = cd.DeviceArray((2, 3), np.float32, fake_buffer(0x1000, 24))
    assert (len(a), a.size, a.nbytes, a.dtype) == (2, 6, 24, np.dtype(np.float32))
    assert repr(a) == "DeviceArray(shape=(2, 3), dtype=float32)"
    with pytest.raises(TypeError):
        len(cd.DeviceArray((), np.float64, fake_buffer(0x1000, 8)))
    with pytest.raises(ValueError, match="bytes"):
        cd.DeviceArray((2, 3), np.float64, fake_buffer(0x1000, 24))


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="needs ptxas (the CUDA toolkit)")
def test_vadd_ptx_assembles(tmp_path):
    (tmp_path / "vadd.ptx").write_text(VADD_PTX)
    subprocess.run(
        ["ptxas", "-arch=sm_90", str(tmp_path / "vadd.ptx"), "-o", str(tmp_path / "vadd.cubin")],
        check=True, capture_output=True, text=True,
    )


# With a GPU --------------------------------------------------------------------------------


@gpu
def test_context():
    ctx = cd.context()
    assert ctx is cd.context()
    assert isinstance(ctx.name, str) and ctx.name
    assert ctx.compute_capability >= (5, 0)


@gpu
def test_vector_add():
    n = 1000
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    ctx = cd.context()
    vadd = ctx.load(VADD_PTX).function("vadd")
    da, db, dout = (ctx.alloc(4 * n) for _ in range(3))
    da.copy_from(a)
    db.copy_from(b)
    vadd.launch(((n + 255) // 256, 1, 1), (256, 1, 1), [da, db, dout, n])
    ctx.synchronize()
    out = np.empty(n, np.float32)
    dout.copy_to(out)
    np.testing.assert_array_equal(out, a + b)
    for buf in (da, db, dout):
        buf.free()


@gpu
@pytest.mark.parametrize(
    "a",
    [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.arange(12, dtype=np.int64).reshape(3, 4).T,  # not contiguous: copied first
        np.float64(2.5),
        np.zeros((0, 3), np.float32),
    ],
)
def test_device_array_round_trip(a):
    d = cd.DeviceArray.from_numpy(a)
    assert (d.shape, d.dtype) == (a.shape, a.dtype)
    np.testing.assert_array_equal(d.numpy(), a)


@gpu
def test_device_array_from_another_thread():
    """The context is current per thread: another thread must get it made current too."""
    got = []
    t = threading.Thread(target=lambda: got.append(cd.DeviceArray.from_numpy(np.ones(4)).numpy()))
    t.start()
    t.join()
    np.testing.assert_array_equal(got[0], np.ones(4))


@gpu
def test_bad_ptx_is_a_cuda_error_with_the_jit_log():
    with pytest.raises(cd.CUDAError) as e:
        cd.context().load(VADD_PTX.replace("add.f32", "bogus.f32"))
    assert e.value.call == "cuModuleLoadDataEx" and e.value.name.startswith("CUDA_ERROR_")
    assert "bogus" in str(e.value)


@gpu
def test_unknown_kernel_name():
    with pytest.raises(cd.CUDAError, match="no kernel named 'nope'") as e:
        cd.context().load(VADD_PTX).function("nope")
    assert e.value.name == "CUDA_ERROR_NOT_FOUND"


@gpu
def test_out_of_memory():
    with pytest.raises(cd.CUDAError) as e:
        cd.context().alloc(1 << 50)
    assert (e.value.name, e.value.call) == ("CUDA_ERROR_OUT_OF_MEMORY", "cuMemAlloc")
