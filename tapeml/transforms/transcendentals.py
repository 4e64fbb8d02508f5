"""exp, log, tanh and sigmoid as plain arithmetic (no libm call), so LLVM vectorizes the loops
they are in (and the GPU needs no library for them). tape-to-loops emits these unless asked for
libm (`libm=True`).

    exp(x) = 2^n * exp(r),  n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2]
        exp(r): Taylor polynomial, degree 7 (f32) / 14 (f64), truncation error below an ulp;
        2^n: n + bias shifted into the exponent bits, in two halves. n is rounded with the
        add-and-subtract-1.5*2^mantissa trick, whose bits also give n as an integer (no
        float-to-int conversion needed).
    tanh(x), f32 = sign(x) (-m) / (2 + m), m = expm1(-2|x|): exp's reduction with the
        polynomial's constant term left out, so m keeps its precision near 0 (one formula, no
        branch). f64 = sign(x) (1 - e) / (1 + e), e = exp(-2|x|), for |x| >= 0.55; below,
        x * P(x^2) with P the Taylor series of tanh(x) / x (18 terms), computed here from the
        Bernoulli numbers (no cancellation near 0).
    sigmoid(x) = 1 / (1 + exp(-x)), as the interpreter defines it.
    erf(x), f32: |x| < 1: x * P(x^2), P the Chebyshev interpolant of erf(x) / x of degree 6
        in u = x^2 on [0, 1], in powers of u (the 11-term Taylor series it replaced was no
        more accurate in f32: 2 ulp at most either way, fewer 2s with this; degree 5 is the
        least that holds 2 ulp, 4 gives 19); 1 <= |x| < 4: 1 - exp(-x^2) g(|x|),
        g(a) = erfc(a) exp(a^2) (smooth) by its Chebyshev interpolant of degree 11 on [1, 4]
        (relative error 3.4e-8, a fifth of that in erf), rewritten in powers of t, the point
        mapped to [-1, 1] (coefficients below 0.22 and falling, of alternating sign: Horner's
        rule with fused multiply-adds is as accurate as Clenshaw's recurrence here, and its
        chain of eleven fmas is a third of Clenshaw's dependent operations); from 4 on, erfc
        is below a quarter of f32's last place under 1, and |x| is taken as 4.
        f64 erf calls libm (this arrangement would need far more terms for f64's precision).
    log(x) = k ln 2 + log(m), m in [sqrt(1/2), sqrt(2)) from x's bits, log(m) by fdlibm's
        arrangement of the series in s = (m-1)/(m+1) (5 terms for f32, 11 for f64).

Measured against numpy (tests/test_transcendentals.py sweeps them): within 2 ulp for f32
(4 for f64) on every finite input, and the same inf / nan / signed-zero behaviour; erf within
1 ulp of Python's math.erf.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

import numpy as np
from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import Float32Type, IntegerType
from xdsl.ir import Attribute, SSAValue

TANH_SPLIT = 0.55

with localcontext() as _context:
    _context.prec = 40
    _LN2 = Decimal(2).ln()


def _tanh_over_x_taylor(terms: int) -> list[float]:
    """Taylor coefficients of tanh(x) / x in powers of x^2:
    2^(2k) (2^(2k) - 1) B_(2k) / (2k)!, k = 1, 2, ... (B: the Bernoulli numbers, exact)."""
    bernoulli = [Fraction(1)]
    for m in range(1, 2 * terms + 1):
        bernoulli.append(-sum(math.comb(m + 1, j) * bernoulli[j] for j in range(m)) / (m + 1))
    return [float(Fraction(4**k * (4**k - 1)) * bernoulli[2 * k] / math.factorial(2 * k))
            for k in range(1, terms + 1)]


# enough terms for |x| < TANH_SPLIT (the series converges for |x| < pi / 2)
_SMALL = {64: _tanh_over_x_taylor(18)}
_EXP_DEGREE = {32: 7, 64: 14}


def _erf_over_x(s: np.ndarray) -> np.ndarray:
    """erf(x) / x at u = x^2 = (s + 1) / 2 (2 / sqrt(pi) at 0)."""
    return np.array([math.erf(math.sqrt(u)) / math.sqrt(u) if u > 0 else 2 / math.sqrt(math.pi)
                     for u in (s + 1) / 2])


_ERF_SMALL = (np.polynomial.Polynomial(np.polynomial.chebyshev.cheb2poly(
    np.polynomial.chebyshev.chebinterpolate(_erf_over_x, 6)))(
    np.polynomial.Polynomial([-1.0, 2.0]))).coef.tolist()
"""erf(x) / x in powers of u = x^2 for |x| < 1: its Chebyshev interpolant of degree 6 in u (the
module doc)."""
_ERF_SPLIT, _ERF_ONE = 1.0, 4.0
_ERFC_SCALED = np.polynomial.chebyshev.cheb2poly(np.polynomial.chebyshev.chebinterpolate(
    lambda t: np.array([math.erfc(a) * math.exp(a * a) for a in  # g(a) = erfc(a) exp(a^2)
                        (t + 1) * (_ERF_ONE - _ERF_SPLIT) / 2 + _ERF_SPLIT]), 11)).tolist()
"""g's interpolant in powers of t in [-1, 1] (the module doc)."""
_LOG_TERMS = {32: 5, 64: 11}  # s^2 < 0.0295: the next term is below half an ulp


class Math:
    """Emits scalar float code through an Emitter (see to_loops.Emitter)."""

    def __init__(self, e, t: Attribute) -> None:
        self.e, self.t = e, t
        self.bits = 32 if isinstance(t, Float32Type) else 64

    def c(self, value: float) -> SSAValue:
        return self.e.scalar(value, self.t)

    def op(self, kind, *args) -> SSAValue:
        return self.e.insert(kind(*args))

    def polynomial(self, x: SSAValue, coefficients: list[float]) -> SSAValue:
        """sum c_k x^k by Horner's rule, each step one fused multiply-add (math.fma: rounded
        once, so half the operations and half the rounding errors of a multiply and an add)."""
        acc = self.c(coefficients[-1])
        for coefficient in reversed(coefficients[:-1]):
            acc = self.op(xmath.FmaOp, acc, x, self.c(coefficient))
        return acc

    def exp(self, x: SSAValue) -> SSAValue:
        """exp(x): n = round(x / ln 2), r = x - n ln 2 (in two parts, Cody and Waite, so r
        keeps its precision), exp(r) by Taylor polynomial, times 2^n applied as two powers of
        two (each a biased exponent shifted into place) so that overflow and underflow happen
        in the multiplications, as they should."""
        polynomial, scale = self._exp_parts(x, constant=True)
        return scale(polynomial)

    def expm1_below_zero(self, x: SSAValue) -> SSAValue:
        """exp(x) - 1 for x <= 0 (nan stays nan), without the cancellation of exp(x) - 1 near
        0: 2^n (exp(r) - 1) + (2^n - 1), exp(r) - 1 by the Taylor polynomial without its
        constant term (n = 0 near 0: the polynomial alone); 2^n - 1 is exact for n >= -24
        (-53 in f64) and -1 to the last place below. x is taken as at least -(bias - 1) ln 2
        (-87.3 in f32), where exp(x) - 1 is -1 to every last place: 2^n is then one normal
        power of two, applied in one multiplication."""
        polynomial, scale = self._exp_parts(x, constant=False, below_zero=True)
        power = scale(self.c(1.0))
        return self.op(arith.AddfOp, scale(polynomial),
                       self.op(arith.SubfOp, power, self.c(1.0)))

    def _exp_parts(self, x: SSAValue, constant: bool, below_zero: bool = False
                   ) -> tuple[SSAValue, Any]:
        """exp's reduction: the Taylor polynomial of exp(r) (without its constant term unless
        `constant`), and a function multiplying a value by 2^n (`below_zero`: x in
        [-(bias - 1) ln 2, 0], 2^n one normal power)."""
        mantissa, bias = (23, 127) if self.bits == 32 else (52, 1023)
        if below_zero:
            x = self.op(arith.MaximumfOp, x, self.c(-(bias - 1) * math.log(2)))  # nan stays
        else:
            reach = 160.0 if self.bits == 32 else 1100.0  # past every finite exp(x)
            bound = self.c(reach * math.log(2))
            x = self.op(arith.MinimumfOp, self.op(arith.MaximumfOp, x, self.op(
                arith.NegfOp, bound)), bound)  # nan stays nan
        t = self.op(arith.MulfOp, x, self.c(1 / math.log(2)))
        magic = self.c(1.5 * 2.0**mantissa)
        shifted = self.op(arith.AddfOp, t, magic)
        n = self.op(arith.SubfOp, shifted, magic)  # t rounded to an integer, as a float
        hi_bits = 12 if self.bits == 32 else 32  # n * ln2_hi is exact for |n| <= reach
        ln2_hi = math.floor(math.log(2) * 2**hi_bits) / 2**hi_bits
        ln2_lo = float(_LN2 - Decimal(ln2_hi))  # from ln 2 to 40 digits, not from a double
        # x - n ln2_hi (exact: n ln2_hi is), then - n ln2_lo, each a fused multiply-add
        r = self.op(xmath.FmaOp, n, self.c(-ln2_lo),
                    self.op(xmath.FmaOp, n, self.c(-ln2_hi), x))
        taylor = [1 / math.factorial(k) for k in range(_EXP_DEGREE[self.bits] + 1)]
        if constant:
            polynomial = self.polynomial(r, taylor)
        else:  # r (1 + r/2 + ...): exp(r) - 1 with no 1 to cancel
            polynomial = self.op(arith.MulfOp, r, self.polynomial(r, taylor[1:]))
        int_t = IntegerType(self.bits)

        def int_constant(value: int) -> SSAValue:
            return self.e.insert(arith.ConstantOp.from_int_and_width(value, int_t))

        n_int = self.op(arith.SubiOp, self.op(arith.BitcastOp, shifted, int_t),
                        self.op(arith.BitcastOp, magic, int_t))

        def power_of_two(exponent: SSAValue) -> SSAValue:  # 2^exponent, a biased exponent
            return self.op(arith.BitcastOp, self.op(arith.ShLIOp, self.op(
                arith.AddiOp, exponent, int_constant(bias)), int_constant(mantissa)), self.t)

        if below_zero:  # n in [-(bias - 1), 0]: one normal power
            powers = [power_of_two(n_int)]
        else:  # two halves, so that overflow and underflow happen in the multiplications
            half = self.op(arith.ShRSIOp, n_int, int_constant(1))
            powers = [power_of_two(part) for part in (half, self.op(arith.SubiOp, n_int, half))]

        def scale(value: SSAValue) -> SSAValue:
            for power in powers:
                value = self.op(arith.MulfOp, value, power)
            return value

        return polynomial, scale

    def tanh(self, x: SSAValue) -> SSAValue:
        """f32: -m / (2 + m) with m = expm1(-2|x|), given x's sign bit (one formula: expm1
        keeps its precision near 0, where 1 - exp would cancel; -m of m = +0 is -0, so the
        magnitude is taken as at least +0 first); f64: the module doc's two branches."""
        if self.bits == 32:
            magnitude = self.op(arith.MaximumfOp, x, self.op(arith.NegfOp, x))
            m = self.expm1_below_zero(self.op(arith.MulfOp, magnitude, self.c(-2.0)))
            value = self.op(arith.MaximumfOp, self.op(arith.DivfOp, self.op(arith.NegfOp, m),
                                                      self.op(arith.AddfOp, self.c(2.0), m)),
                            self.c(0.0))  # nan stays nan
            bits = self.op(arith.BitcastOp, x, IntegerType(32))
            negative = self.op(arith.CmpiOp, bits, self.e.insert(
                arith.ConstantOp.from_int_and_width(0, IntegerType(32))), "slt")
            return self.op(arith.SelectOp, negative, self.op(arith.NegfOp, value), value)
        magnitude = self.op(arith.MaximumfOp, x, self.op(arith.NegfOp, x))
        e = self.exp(self.op(arith.MulfOp, magnitude, self.c(-2.0)))
        large = self.op(arith.DivfOp, self.op(arith.SubfOp, self.c(1.0), e),
                        self.op(arith.AddfOp, self.c(1.0), e))
        signed = self.op(arith.SelectOp, self.op(arith.CmpfOp, x, self.c(0.0), "olt"),
                         self.op(arith.NegfOp, large), large)
        square = self.op(arith.MulfOp, x, x)
        small = self.op(arith.MulfOp, x, self.polynomial(square, _SMALL[self.bits]))
        is_small = self.op(arith.CmpfOp, magnitude, self.c(TANH_SPLIT), "olt")
        return self.op(arith.SelectOp, is_small, small, signed)

    def log(self, x: SSAValue) -> SSAValue:
        """log(x) = k ln 2 + log(m), x = m 2^k with m in [sqrt(1/2), sqrt(2)) read from the
        bits (a subnormal x is scaled into the normal range first). With f = m - 1 and
        s = f / (2 + f), log(m) = f - f^2/2 + s (f^2/2 + R(s^2)), R the Taylor series of
        log((1+s)/(1-s)) - 2s over s (fdlibm's arrangement, so the large terms are exact);
        k ln 2 in two parts. x < 0 and nan give nan, 0 gives -inf, inf gives inf."""
        mantissa, bias = (23, 127) if self.bits == 32 else (52, 1023)
        int_t = IntegerType(self.bits)

        def integer(value: int) -> SSAValue:
            return self.e.insert(arith.ConstantOp.from_int_and_width(value, int_t))

        tiny = 2.0 ** (1 - bias)  # the smallest normal number
        subnormal = self.op(arith.CmpfOp, x, self.c(tiny), "olt")
        scaled = self.op(arith.SelectOp, subnormal,
                         self.op(arith.MulfOp, x, self.c(2.0 ** (mantissa + 2))), x)
        bits = self.op(arith.BitcastOp, scaled, int_t)
        # m's bits: x's mantissa with the exponent of [sqrt(1/2), sqrt(2)); adding
        # (1 - sqrt(1/2)) * 2^mantissa first carries into the exponent exactly when m >= sqrt(2)
        shift = integer((bias << mantissa) - int(round(math.sqrt(0.5) * 2**mantissa)) + 1)
        shifted = self.op(arith.SubiOp, bits, shift)  # the exponent field now counts from m
        k_int = self.op(arith.ShRSIOp, shifted, integer(mantissa))
        m_bits = self.op(arith.AddiOp, self.op(arith.AndIOp, shifted,
                                               integer((1 << mantissa) - 1)), shift)
        m = self.op(arith.BitcastOp, m_bits, self.t)
        k = self.op(arith.SubfOp, self.op(arith.SIToFPOp, k_int, self.t),
                    self.op(arith.SelectOp, subnormal, self.c(mantissa + 2), self.c(0.0)))
        f = self.op(arith.SubfOp, m, self.c(1.0))
        half_square = self.op(arith.MulfOp, self.c(0.5), self.op(arith.MulfOp, f, f))
        s = self.op(arith.DivfOp, f, self.op(arith.AddfOp, self.c(2.0), f))
        z = self.op(arith.MulfOp, s, s)
        terms = _LOG_TERMS[self.bits]
        r = self.op(arith.MulfOp, z, self.polynomial(z, [2 / (2 * j + 3) for j in range(terms)]))
        hi_bits = 12 if self.bits == 32 else 32
        ln2_hi = math.floor(math.log(2) * 2**hi_bits) / 2**hi_bits
        ln2_lo = float(_LN2 - Decimal(ln2_hi))
        inner = self.op(arith.AddfOp, self.op(arith.MulfOp, s, self.op(arith.AddfOp,
                                                                        half_square, r)),
                        self.op(arith.MulfOp, k, self.c(ln2_lo)))
        result = self.op(arith.AddfOp, self.op(arith.MulfOp, k, self.c(ln2_hi)),
                         self.op(arith.SubfOp, f, self.op(arith.SubfOp, half_square, inner)))
        result = self.op(arith.SelectOp, self.op(arith.CmpfOp, x, self.c(math.inf), "oeq"),
                         self.c(math.inf), result)
        result = self.op(arith.SelectOp, self.op(arith.CmpfOp, x, self.c(0.0), "oeq"),
                         self.c(-math.inf), result)
        return self.op(arith.SelectOp, self.op(arith.CmpfOp, x, self.c(0.0), "ult"),
                       self.c(math.nan), result)  # below zero, or nan

    def erf(self, x: SSAValue) -> SSAValue:
        """erf(x), f32 (see the module doc; f64 calls libm's erf): nan stays nan, the zeros
        keep their sign, +-inf gives +-1."""
        if self.bits == 64:
            return self.op(xmath.ErfOp, x)
        a = self.op(arith.MaximumfOp, x, self.op(arith.NegfOp, x))
        small = self.op(arith.MulfOp, x, self.polynomial(self.op(arith.MulfOp, a, a),
                                                         _ERF_SMALL))
        c = self.op(arith.MinimumfOp, self.op(arith.MaximumfOp, a, self.c(_ERF_SPLIT)),
                    self.c(_ERF_ONE))  # nan stays nan
        half = (_ERF_ONE - _ERF_SPLIT) / 2
        t = self.op(arith.MulfOp, self.op(arith.SubfOp, c, self.c(_ERF_SPLIT + half)),
                    self.c(1 / half))
        g = self.polynomial(t, _ERFC_SCALED)
        erfc = self.op(arith.MulfOp, self.exp(self.op(arith.NegfOp,
                                                      self.op(arith.MulfOp, c, c))), g)
        large = self.op(arith.SubfOp, self.c(1.0), erfc)
        signed = self.op(arith.SelectOp, self.op(arith.CmpfOp, x, self.c(0.0), "olt"),
                         self.op(arith.NegfOp, large), large)
        return self.op(arith.SelectOp, self.op(arith.CmpfOp, a, self.c(_ERF_SPLIT), "olt"),
                       small, signed)

    def sigmoid(self, x: SSAValue) -> SSAValue:
        one = self.c(1.0)
        return self.op(arith.DivfOp, one, self.op(arith.AddfOp, one,
                                                  self.exp(self.op(arith.NegfOp, x))))
