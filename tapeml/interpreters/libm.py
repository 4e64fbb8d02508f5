"""C's libm, element by element, where numpy's own loop is not what compiled code calls.

numpy's float64 `power` takes a SIMD loop on CPUs with AVX-512 (SVML's pow), 1 or 2 ulp from
the C library's `pow` in about 5% of random operands (2.5 ** 2.5: 9.882117688026185, libm
9.882117688026186); the CPU backend's `llvm.pow` is libm's. The interpreters compute pow by
libm's, so every stage meets one reference (0.4 us an element: the interpreter's price for
it)."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import numpy as np


def _libm() -> ctypes.CDLL:
    name = ctypes.util.find_library("m") or ("libm.dylib" if sys.platform == "darwin" else
                                             "libm.so.6")
    return ctypes.CDLL(name)


_POW = _libm().pow
_POW.restype = ctypes.c_double
_POW.argtypes = [ctypes.c_double, ctypes.c_double]
_POW_EACH = np.frompyfunc(_POW, 2, 1)


def power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """libm's pow of float64 `x` and `y`, broadcast, as a float64 array."""
    return np.asarray(_POW_EACH(x, y), dtype=np.float64)
