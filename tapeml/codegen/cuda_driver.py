"""The CUDA driver API (cuda-python's `cuda.bindings.driver`) as the CUDA backend uses it: one
context on device 0, device buffers, PTX modules, kernel launches, arrays that stay on the GPU.

Every driver call's result goes through `_check`, which turns a failure into `CUDAError`. Importing
this module needs no GPU; without one `context()` raises `GPUUnavailableError`.
"""

from __future__ import annotations

import contextlib
import math
import operator
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from cuda.bindings import driver as cu
from cuda.pathfinder import DynamicLibNotFoundError

from tapeml.codegen.arguments import canonical_bools

_SUCCESS = cu.CUresult.CUDA_SUCCESS
_NEEDS = "backend='cuda' needs an NVIDIA GPU and its driver: "
_JIT_LOG_BYTES = 16384
_GRID_MAX = (2**31 - 1, 65535, 65535)
_BLOCK_MAX = (1024, 1024, 64)
_MAX_THREADS_PER_BLOCK = 1024


class GPUUnavailableError(RuntimeError):
    """No CUDA driver or no GPU: the message says which, and that backend="cuda" needs one."""


class CUDAError(RuntimeError):
    """A CUDA driver call failed. `.name` is the CUDA error name (e.g.
    "CUDA_ERROR_OUT_OF_MEMORY"), `.call` the driver function's name; str() has both, the
    driver's description of the error and any detail (such as the PTX JIT's error log)."""

    def __init__(self, call: str, result: Any, detail: str = "") -> None:
        with contextlib.suppress(ValueError):  # a plain int code gets its enum, and its name
            result = cu.CUresult(result)
        self.call, self.result = call, result
        self.name = _lookup(cu.cuGetErrorName, result) or getattr(result, "name", f"{result}")
        text = _lookup(cu.cuGetErrorString, result)
        text = f" ({text})" if text else ""
        super().__init__(f"{call} failed: {self.name}{text}" + (f"\n{detail}" if detail else ""))


def _lookup(fn: Callable[..., tuple[Any, ...]], result: Any) -> str | None:
    # cuGetErrorName/String are driver calls too: without a driver (or for a code the driver does
    # not know) they fail, and the caller falls back to the enum's name.
    try:
        err, text = fn(result)
    except Exception:
        return None
    return text.decode(errors="replace") if err == _SUCCESS and text else None


def _check(call: str, result: tuple[Any, ...], detail: str = "") -> Any:
    """cuda-python returns `(CUresult, *outputs)`: raise CUDAError unless the result is success,
    else return None, the one output, or the tuple of outputs."""
    err, *values = result
    if err != _SUCCESS:
        raise CUDAError(call, err, detail)
    return None if not values else values[0] if len(values) == 1 else tuple(values)


def _call(fn: Callable[..., tuple[Any, ...]], *args: Any) -> Any:
    """`fn(*args)` checked by `_check` under `fn`'s name; no driver is a GPUUnavailableError."""
    try:
        result = fn(*args)
    except DynamicLibNotFoundError:  # cuda-python loads libcuda at a driver function's first call
        raise GPUUnavailableError(f"{_NEEDS}no NVIDIA driver (libcuda.so) was found") from None
    return _check(fn.__name__, result)


_lock = threading.Lock()
_context: Context | None = None
_unavailable: str | None = None  # why the last attempt failed: the driver's answer won't change
_current = threading.local()  # a CUDA context is made current per thread


def available() -> bool:
    """True when a CUDA driver and at least one usable device are there. Never raises."""
    try:
        context()
    except Exception:  # GPUUnavailableError, or a device the driver cannot open a context on
        return False
    return True


def context() -> Context:
    """The process-wide context (device 0's primary context), created on first use and made
    current on the calling thread. Raises GPUUnavailableError without a driver or a device."""
    global _context, _unavailable
    if _context is None:
        with _lock:
            if _unavailable is not None:
                raise GPUUnavailableError(_unavailable)
            if _context is None:
                try:
                    _context = Context._create()
                except GPUUnavailableError as e:
                    _unavailable = str(e)
                    raise
    ctx = _context
    if getattr(_current, "context", None) is not ctx:
        _call(cu.cuCtxSetCurrent, ctx._handle)
        _current.context = ctx
    return ctx


class Context:
    """The CUDA context on device 0: loads PTX, allocates device memory, synchronizes."""

    def __init__(self, device: Any, handle: Any, name: str, cc: tuple[int, int]) -> None:
        self._device, self._handle = device, handle
        self.name, self.compute_capability = name, cc

    @classmethod
    def _create(cls) -> Context:
        try:
            _call(cu.cuInit, 0)
        except CUDAError as e:  # e.g. CUDA_ERROR_NO_DEVICE, CUDA_ERROR_INSUFFICIENT_DRIVER
            raise GPUUnavailableError(f"{_NEEDS}{e}") from None
        if _call(cu.cuDeviceGetCount) == 0:
            raise GPUUnavailableError(f"{_NEEDS}the driver found no CUDA device")
        device = _call(cu.cuDeviceGet, 0)
        # The primary context is the one the runtime API (and so other libraries) use: sharing it
        # lets arrays pass between them. It stays retained for the life of the process.
        handle = _call(cu.cuDevicePrimaryCtxRetain, device)
        name = _call(cu.cuDeviceGetName, 256, device).split(b"\0", 1)[0].decode(errors="replace")
        major, minor = (
            _call(cu.cuDeviceGetAttribute, getattr(cu.CUdevice_attribute, a), device)
            for a in ("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR",
                      "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
        )
        return cls(device, handle, name, (major, minor))

    def __repr__(self) -> str:
        major, minor = self.compute_capability
        return f"Context({self.name!r}, sm_{major}{minor})"

    def load(self, ptx: str) -> Module:
        """JIT-compile PTX text into a module; a failure is a CUDAError with the JIT's error log."""
        context()
        log = bytearray(_JIT_LOG_BYTES)  # the driver writes its NUL-terminated log in here
        opts = [cu.CUjit_option.CU_JIT_ERROR_LOG_BUFFER,
                cu.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
        # The driver reads PTX as a C string: it must end with a NUL.
        result = cu.cuModuleLoadDataEx(ptx.encode() + b"\0", len(opts), opts, [log, len(log)])
        detail = log.split(b"\0", 1)[0].decode(errors="replace").strip()
        return Module(_check("cuModuleLoadDataEx", result, detail))

    def alloc(self, nbytes: int) -> DeviceBuffer:
        """`nbytes` of uninitialized device memory (none at all, and no driver call, for 0)."""
        nbytes = operator.index(nbytes)
        if nbytes < 0:
            raise ValueError(f"cannot allocate {nbytes} bytes")
        context()
        return DeviceBuffer(int(_call(cu.cuMemAlloc, nbytes)) if nbytes else 0, nbytes)

    def synchronize(self) -> None:
        """Wait for all work queued on the device (kernel faults surface here)."""
        context()
        _call(cu.cuCtxSynchronize)


def _quietly(fn: Callable[..., Any], handle: Any) -> None:
    # Runs when a buffer or module is collected, maybe on another thread: nothing may raise.
    with contextlib.suppress(Exception):
        context()  # makes the context current on this thread
        fn(handle)


class DeviceBuffer:
    """Owns a device allocation of `nbytes` at `pointer`; freed by `.free()` or when collected."""

    def __init__(self, pointer: int, nbytes: int) -> None:
        self.pointer, self.nbytes = pointer, nbytes
        self._finalizer = weakref.finalize(self, _quietly, cu.cuMemFree, pointer)
        self._finalizer.atexit = False  # the driver frees everything at exit: don't call into it
        if not pointer:
            self._finalizer.detach()
        self._freed = False

    def __repr__(self) -> str:
        return f"DeviceBuffer(pointer={self.pointer:#x}, nbytes={self.nbytes})"

    def _host(self, array: np.ndarray, writing: bool) -> int:
        if self._freed:
            raise ValueError("the device buffer has been freed")
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
            raise ValueError("the host array must be a C-contiguous numpy array")
        if array.nbytes != self.nbytes:
            raise ValueError(f"the host array has {array.nbytes} bytes, the buffer {self.nbytes}")
        if writing and not array.flags.writeable:
            raise ValueError("the host array is read-only")
        return array.ctypes.data

    def copy_from(self, array: np.ndarray) -> None:
        """Copy a C-contiguous host array of exactly `nbytes` to the device."""
        host = self._host(array, writing=False)
        if self.nbytes:
            context()
            _call(cu.cuMemcpyHtoD, self.pointer, host, self.nbytes)

    def copy_to(self, array: np.ndarray) -> None:
        """Copy the device memory into a writable C-contiguous host array of `nbytes`. The copy
        waits for kernels launched before it (they run on the same, default, stream)."""
        host = self._host(array, writing=True)
        if self.nbytes:
            context()
            _call(cu.cuMemcpyDtoH, host, self.pointer, self.nbytes)

    @property
    def freed(self) -> bool:
        return self._freed

    def free(self) -> None:
        """Free the allocation now; later calls do nothing."""
        if self._freed:
            return
        self._freed = True
        if self._finalizer.detach() is not None:
            context()
            _call(cu.cuMemFree, self.pointer)


class Module:
    """A loaded PTX module; unloaded when it and every Function from it are collected."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        weakref.finalize(self, _quietly, cu.cuModuleUnload, handle).atexit = False

    def function(self, name: str) -> Function:
        """The kernel called `name` (its `.entry` name in the PTX)."""
        context()
        result = cu.cuModuleGetFunction(self._handle, name.encode())
        return Function(_check("cuModuleGetFunction", result, f"no kernel named {name!r}"),
                        name, self)


class Function:
    """A kernel of a loaded module. `module` keeps the module loaded while the kernel lives."""

    def __init__(self, handle: Any, name: str, module: Module | None = None) -> None:
        self._handle, self.name, self._module = handle, name, module

    def __repr__(self) -> str:
        return f"Function({self.name!r})"

    def launch(self, grid: tuple[int, int, int], block: tuple[int, int, int],
               args: Sequence[DeviceBuffer | int], shared_bytes: int = 0) -> None:
        """Launch on the default stream. A DeviceBuffer passes its pointer (a .u64 param), an int
        a 64-bit signed integer (a .s64 param: kernels are generated with i64 indices)."""
        grid, block = _dims("grid", grid, _GRID_MAX), _dims("block", block, _BLOCK_MAX)
        if math.prod(block) > _MAX_THREADS_PER_BLOCK:
            raise ValueError(f"block {block} has {math.prod(block)} threads, more than 1024")
        shared_bytes = operator.index(shared_bytes)
        if not 0 <= shared_bytes < 2**32:
            raise ValueError(f"shared_bytes must be in 0..2**32-1, got {shared_bytes}")
        values = np.zeros(max(len(args), 1), dtype=np.uint64)
        for i, arg in enumerate(args):
            if isinstance(arg, DeviceBuffer):
                if arg._freed:
                    raise ValueError(f"argument {i} of {self.name} is a freed buffer")
                values[i] = arg.pointer
            elif isinstance(arg, int | np.integer) and not isinstance(arg, bool):
                if not -(2**63) <= int(arg) < 2**63:
                    raise ValueError(f"argument {i} of {self.name} does not fit in 64 bits: {arg}")
                values[i] = int(arg) & (2**64 - 1)  # two's complement: the kernel reads an s64
            else:
                raise TypeError(f"argument {i} of {self.name} is a {type(arg).__name__}, "
                                "expected a DeviceBuffer or an int")
        # kernelParams is a void**: the address of an array whose i-th entry points at argument
        # i's value, the form cuda-python documents for numpy (`args.ctypes.data`). The driver
        # copies the values during the call, so these arrays need only outlive it.
        params = values.ctypes.data + 8 * np.arange(len(args), dtype=np.uint64)
        context()
        _call(cu.cuLaunchKernel, self._handle, *grid, *block, shared_bytes, 0,
              params.ctypes.data if args else 0, 0)


def _dims(what: str, dims: Sequence[int], limits: tuple[int, int, int]) -> tuple[int, int, int]:
    if len(dims) != 3:
        raise ValueError(f"{what} must be 3 ints (x, y, z), got {dims!r}")
    out = tuple(operator.index(d) for d in dims)
    if not all(1 <= d <= m for d, m in zip(out, limits, strict=True)):
        bounds = ", ".join(f"1..{m}" for m in limits)
        raise ValueError(f"{what} {out} is out of range: x, y, z must be in {bounds}")
    return out[0], out[1], out[2]


class DeviceArray:
    """An array that lives on the GPU between calls: shape, dtype and the buffer holding its
    C-ordered elements. `.numpy()` copies it back to a fresh numpy array."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, buffer: DeviceBuffer) -> None:
        self.shape, self.dtype, self.buffer = tuple(shape), np.dtype(dtype), buffer
        if self.nbytes != buffer.nbytes:
            raise ValueError(f"{self!r} needs {self.nbytes} bytes, the buffer has {buffer.nbytes}")

    @classmethod
    def empty(cls, shape: Sequence[int] | int, dtype: Any) -> DeviceArray:
        """An uninitialized device array (needs a GPU)."""
        shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
        shape = tuple(operator.index(d) for d in shape)
        dtype = np.dtype(dtype)
        if dtype.hasobject or any(d < 0 for d in shape):
            raise ValueError(f"cannot make a device array of shape {shape} and dtype {dtype}")
        return cls(shape, dtype, context().alloc(math.prod(shape) * dtype.itemsize))

    @classmethod
    def from_numpy(cls, a: Any) -> DeviceArray:
        """Copy an array (anything numpy can make one of) to the device (needs a GPU)."""
        a = np.asarray(a, order="C")  # keeps 0-d arrays 0-d, unlike np.ascontiguousarray
        if a.dtype == np.bool_:  # its bytes 0 or 1, as kernels read them (no call checks it)
            a = canonical_bools(a)
        out = cls.empty(a.shape, a.dtype)
        out.buffer.copy_from(a)
        return out

    def numpy(self) -> np.ndarray:
        """A fresh host copy."""
        out = np.empty(self.shape, self.dtype)
        self.buffer.copy_to(out)
        return out

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """np.asarray(device_array) copies it back (so numpy code and the other backends
        take it); a copy is always made."""
        if copy is False:
            raise ValueError("a device array cannot be viewed as a numpy array without a copy")
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d device array")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype})"
