"""C's libm pow over arrays, for the interpreters: what compiled code calls, at native speed.

numpy's float64 `power` takes a SIMD loop on CPUs with AVX-512 (SVML's pow), 1 or 2 ulp from
the C library's `pow` in about 5% of random operands (2.5 ** 2.5: 9.882117688026185, libm
9.882117688026186); the CPU backend's `llvm.pow` is libm's. So the interpreters compute pow by
libm's: a loop calling `pow`, compiled once per process by llvmlite's MCJIT (about 10 ms, on
first use), which resolves `pow` from the process's C library as the CPU backend's code does.
(Element by element through ctypes it was 50x numpy's time.)"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable

import llvmlite.binding as llvm
import numpy as np

_POW_EACH = """  ; out[i] = pow(x[i], y[i]) for i < n, as it is (no passes)
declare double @pow(double, double)

define void @tapeml_pow_each(ptr %x, ptr %y, ptr %out, i64 %n) {
entry:
  %none = icmp eq i64 %n, 0
  br i1 %none, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %xi = getelementptr double, ptr %x, i64 %i
  %yi = getelementptr double, ptr %y, i64 %i
  %oi = getelementptr double, ptr %out, i64 %i
  %a = load double, ptr %xi
  %b = load double, ptr %yi
  %r = call double @pow(double %a, double %b)
  store double %r, ptr %oi
  %next = add i64 %i, 1
  %end = icmp eq i64 %next, %n
  br i1 %end, label %done, label %loop
done:
  ret void
}
"""


_LOCK = threading.Lock()
_COMPILED: list[tuple[Callable[..., None], object]] = []  # the loop, and its engine


def _each() -> Callable[..., None]:
    """`_POW_EACH` compiled (the first call), as a ctypes function of (x, y, out, n)."""
    with _LOCK:
        if not _COMPILED:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            machine = llvm.Target.from_default_triple().create_target_machine()
            module = llvm.parse_assembly(_POW_EACH)
            module.verify()
            engine = llvm.create_mcjit_compiler(module, machine)
            engine.finalize_object()
            loop = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_int64)(engine.get_function_address(
                                        "tapeml_pow_each"))
            _COMPILED.append((loop, engine))
        return _COMPILED[0][0]


def power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """libm's pow of float64 `x` and `y`, broadcast, as a float64 array."""
    x, y = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(y, np.float64))
    x, y = np.require(x, requirements="C"), np.require(y, requirements="C")  # (0-d stays)
    out = np.empty(x.shape, np.float64)
    _each()(x.ctypes.data, y.ctypes.data, out.ctypes.data, out.size)
    return out
