"""C's libm pow over arrays, for the interpreters: what compiled code calls, at native speed.

numpy's float64 `power` takes a SIMD loop on CPUs with AVX-512 (SVML's pow), 1 or 2 ulp from
the C library's `pow` in about 5% of random operands (2.5 ** 2.5: 9.882117688026185, libm
9.882117688026186); the CPU backend's `llvm.pow` is libm's. So the interpreters compute pow by
libm's: loops calling `pow` and `powf`, compiled once per process by llvmlite's MCJIT (about
10 ms, on first use), which resolves them from the process's C library as the CPU backend's
code does. (Element by element through ctypes it was 50x numpy's time.)"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable

import llvmlite.binding as llvm
import numpy as np


def _loop(name: str, libm: str, t: str) -> str:
    """out[i] = libm(x[i], y[i]) for i < n, over `t`, as it is (no passes)."""
    return f"""
declare {t} @{libm}({t}, {t})

define void @{name}(ptr %x, ptr %y, ptr %out, i64 %n) {{
entry:
  %none = icmp eq i64 %n, 0
  br i1 %none, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %xi = getelementptr {t}, ptr %x, i64 %i
  %yi = getelementptr {t}, ptr %y, i64 %i
  %oi = getelementptr {t}, ptr %out, i64 %i
  %a = load {t}, ptr %xi
  %b = load {t}, ptr %yi
  %r = call {t} @{libm}({t} %a, {t} %b)
  store {t} %r, ptr %oi
  %next = add i64 %i, 1
  %end = icmp eq i64 %next, %n
  br i1 %end, label %done, label %loop
done:
  ret void
}}
"""


_LOOPS = {np.dtype(np.float64): ("tapeml_pow_each", "pow", "double"),
          np.dtype(np.float32): ("tapeml_powf_each", "powf", "float")}
"""The C library's pow of each width: the CPU backend's llvm.pow.f32 is powf, which rounds
its own result (pow in f64 rounded to f32 is another in about 1 of 2,000 operands)."""


_LOCK = threading.Lock()
_COMPILED: dict[np.dtype, Callable[..., None]] = {}
_ENGINES: list[object] = []  # (kept: the loops' code lives in them)


def _each(dtype: np.dtype) -> Callable[..., None]:
    """The loops compiled (the first call), as ctypes functions of (x, y, out, n)."""
    with _LOCK:
        if not _COMPILED:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            machine = llvm.Target.from_default_triple().create_target_machine()
            module = llvm.parse_assembly("".join(_loop(*loop) for loop in _LOOPS.values()))
            module.verify()
            engine = llvm.create_mcjit_compiler(module, machine)
            engine.finalize_object()
            _ENGINES.append(engine)
            for width, (name, _, _) in _LOOPS.items():
                _COMPILED[width] = ctypes.CFUNCTYPE(
                    None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                    ctypes.c_int64)(engine.get_function_address(name))
        return _COMPILED[dtype]


def power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """libm's pow of float64 `x` and `y` (powf of float32 ones), broadcast, as an array of
    their dtype."""
    dtype = np.dtype(np.float32) if x.dtype == y.dtype == np.float32 else np.dtype(np.float64)
    x, y = np.broadcast_arrays(np.asarray(x, dtype), np.asarray(y, dtype))
    x, y = np.require(x, requirements="C"), np.require(y, requirements="C")  # (0-d stays)
    out = np.empty(x.shape, dtype)
    _each(dtype)(x.ctypes.data, y.ctypes.data, out.ctypes.data, out.size)
    return out
