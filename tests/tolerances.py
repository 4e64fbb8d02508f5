"""The one tolerance table: how far each stage's results may be from the reference, per tape op
(a row) and per kind of stage (edge_values.KIND: numpy, loops, arith, libm, device).

- Bitwise (the default): the same floats, any NaN for any NaN, -0.0 is not +0.0.
- `ulp`: at most that many floats apart (bits.assert_same_bits), NaN and infinities exact.
- `rtol`, `atol`: for results whose summation order or precision differs (numpy sums pairwise
  and f32 in f32; the loops and the CPU in order, f32 sums in f64; BLAS and the GEMM kernels
  block and fuse multiply-adds): NaN and infinities exact, a finite result within
  rtol * (the sum of its terms' absolute values, computed in f64) + atol of the reference
  rounded once. The sign of a zero is not compared, since a reordered sum does not define it.
- `bitwise=False` with no bound: numerically equal, the sign of a zero not compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    ulp: int = 0
    rtol: float = 0.0
    atol: float = 0.0
    bitwise: bool = True
    against: str = "reference"  # or "interp": the interpreter's result is the reference


BITWISE = Tolerance()
IREE_ULP_F32 = 4
IREE_ULP_F64 = 4
IREE_TRIG_ATOL = 4e-6


def _per_dtype(f32: Tolerance, f64: Tolerance) -> dict[str, Tolerance]:
    return {"float32": f32, "float64": f64}


def _reordered(terms: int) -> dict[str, Tolerance]:
    """A sum of up to `terms` terms in another order or precision: n * eps of the terms'
    magnitude, and n of the smallest subnormal for products rounded to subnormals."""
    return {np.dtype(dt).name: Tolerance(rtol=terms * float(np.finfo(dt).eps),
                                         atol=terms * float(np.finfo(dt).smallest_subnormal),
                                         bitwise=False)
            for dt in (np.float32, np.float64)}


_TRANSCENDENTAL = {
    # numpy's own functions against the correctly rounded value (Python's math in f64, rounded
    # once): numpy's f32 SIMD exp/log/tanh are not correctly rounded
    "numpy": _per_dtype(Tolerance(ulp=2), Tolerance(ulp=1)),
    "loops": _per_dtype(Tolerance(ulp=2), Tolerance(ulp=1)),
    # the vectorizable arithmetic, and libm: within 4 ulp of numpy (README). In f64 numpy and
    # they may each be 2 ulp from the true value, on either side: the f64 sigmoid at -36.8 is 4
    # ulp from numpy's, glibc's tanh at -0.519 3 ulp (each 1-2 ulp from the true value)
    "arith": _per_dtype(Tolerance(ulp=4, against="interp"), Tolerance(ulp=4, against="interp")),
    "libm": _per_dtype(Tolerance(ulp=4, against="interp"), Tolerance(ulp=4, against="interp")),
}

_SIGMOID = {
    **_TRANSCENDENTAL,
    # 1 / (1 + exp(-x)) with numpy's f64 exp 1 ulp off (as on AVX512_SPR CPUs) is 4 ulp off at
    # -36.8, where 1 + e rounds; the definition's error, not the stage's
    "numpy": _per_dtype(Tolerance(ulp=2), Tolerance(ulp=4)),
    "loops": _per_dtype(Tolerance(ulp=2), Tolerance(ulp=4)),
}

TABLE: dict[str, dict[str, Any]] = {
    "exp": _TRANSCENDENTAL,
    "log": _TRANSCENDENTAL,
    "tanh": _TRANSCENDENTAL,
    "sin": _TRANSCENDENTAL,
    "cos": _TRANSCENDENTAL,
    "sigmoid": _SIGMOID,
    "fused": _TRANSCENDENTAL,  # its group ends in tanh
    "pow": {},
    "fold": {kind: _per_dtype(Tolerance(bitwise=False), Tolerance(bitwise=False))
             for kind in ("numpy", "loops", "arith", "libm")},
    "sum": {kind: _reordered(16) for kind in ("numpy", "loops", "arith", "libm")},
    "matmul": {kind: _reordered(128) for kind in ("numpy", "loops", "arith", "libm")},
    "conv2d": {kind: _reordered(32) for kind in ("numpy", "loops", "arith", "libm")},
    "avgpool2d": {kind: _reordered(8) for kind in ("numpy", "loops", "arith", "libm")},
    "maxpool2d_backward": {kind: _reordered(8) for kind in ("numpy", "loops", "arith", "libm")},
    # a generated program (test_edge_values_programs.py) with a transcendental or a sum: errors
    # compose, so a bound relative to the result with a floor, as the naturality tests use;
    # eager mode computes what the interpreter does, bit for bit
    "program": {kind: _per_dtype(Tolerance(rtol=1e-5, atol=1e-6, bitwise=False),
                                 Tolerance(rtol=1e-12, atol=1e-12, bitwise=False))
                for kind in ("loops", "arith", "libm")},
    "program-exact": {},
}
"""row -> stage kind -> dtype name -> Tolerance; a row or kind not listed is bitwise."""

# IREE (tests/test_stablehlo.py), against the interpreter: its own approximations of the
# transcendentals, and its own order for sums and products
_IREE_FUNCTIONS = _per_dtype(Tolerance(ulp=IREE_ULP_F32, against="interp"),
                             Tolerance(ulp=IREE_ULP_F64, against="interp"))
for _row in ("exp", "log", "tanh", "sin", "cos", "sigmoid", "fused", "pow", "erf"):
    TABLE.setdefault(_row, {})["iree"] = _IREE_FUNCTIONS
# its f32 sin and cos (on [-20, 20]: test_stablehlo's trigonometry cases) are a polynomial
# within an absolute bound, not ulps
TABLE["trigonometry"] = {"iree": _per_dtype(
    Tolerance(atol=IREE_TRIG_ATOL, bitwise=False, against="interp"), BITWISE)}
for _row in ("fold", "sum", "matmul", "conv2d", "avgpool2d", "maxpool2d_backward"):
    TABLE[_row]["iree"] = TABLE[_row]["arith"]


# a real GPU (scripts/gpu-check): the arithmetic's bounds, and libdevice's pow, which is not
# correctly rounded (1 ulp off Python's at a few of the edge grid's points on an H200, f32 and
# f64; CUDA documents pow at 2 ulp)
for _kinds in TABLE.values():
    if "arith" in _kinds:
        _kinds["device"] = _kinds["arith"]
TABLE["pow"]["device"] = _per_dtype(Tolerance(ulp=2, against="interp"),
                                    Tolerance(ulp=2, against="interp"))


def tolerance(row: str, kind: str, dtype: Any) -> Tolerance:
    """The tolerance for `row` on a stage of `kind` in `dtype` (bitwise unless the table says)."""
    return TABLE.get(row, {}).get(kind, {}).get(np.dtype(dtype).name, BITWISE)
