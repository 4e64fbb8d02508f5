"""Elementwise ops: arithmetic, comparisons, `where`, the integer and bitwise ops, and the
float functions. Operands promote and broadcast together (see promotion.py); an op meeting a
type it does not take either converts it as numpy and JAX do (ints to floats for `divide`,
`exp`, ...; bools to logical ops for `add`, `multiply`, `maximum`, `minimum`) or says so."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.dialects.tape.types import BOOL, FLOAT, INT
from tapeml.interpreters.tape import ieee, is_ufunc
from tapeml.interpreters.tape.elementwise import COMPARE
from tapeml.tracing.ops.promotion import (
    Array,
    astype,
    broadcast_together,
    common,
    is_array,
    lift,
    plain,
    result_type,
    to_dtype,
    weakened,
)
from tapeml.tracing.trace import Tracer, at_user_line, bind

__all__ = [
    "abs", "add", "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "ceil", "clip",
    "cos", "divide", "equal", "erf", "exp", "floor", "floor_divide", "fmod", "greater",
    "greater_equal", "invert", "isfinite", "isinf", "isnan", "left_shift", "less", "less_equal",
    "log", "logical_and",
    "logical_not", "logical_or", "logical_xor", "maximum", "minimum", "multiply", "negative",
    "not_equal", "positive", "power", "relu", "remainder", "right_shift", "round", "sigmoid",
    "sign", "sin", "sqrt", "square", "stop_gradient", "subtract", "tanh", "where",
]


def _kind(dtype: np.dtype) -> str:
    return BOOL if dtype == np.bool_ else INT if dtype.kind == "i" else FLOAT


def _refuse(name: str, dtype: np.dtype, advice: str = "") -> TypeError:
    return TypeError(at_user_line(f"{name}: not defined on {dtype} operands{advice}"))


_EAGER_KINDS = {np.dtype(t): _kind(np.dtype(t))
                for t in (np.bool_, np.int32, np.int64, np.float32, np.float64)}
_AS_IT_IS: dict[tuple[type, np.dtype, bool], bool] = {}
"""(op, dtype, whether bools take another op): the op takes arrays of that dtype as they are,
with nothing to promote or convert (filled as eager calls meet them)."""


def _as_it_is(op: type[tape.TapeOp], dtype: np.dtype, on_bool: Any) -> bool:
    key = (op, dtype, on_bool is None)
    found = _AS_IT_IS.get(key)
    if found is None:
        kind = _EAGER_KINDS.get(dtype)
        floating = FLOAT in op.ELEMENTS and INT not in op.ELEMENTS
        found = _AS_IT_IS[key] = (kind in op.ELEMENTS and (kind == FLOAT or not floating)
                                  and (kind != BOOL or on_bool is None))
    return found


def _taken_as_they_are(op: type[tape.TapeOp], on_bool: Any) -> frozenset[np.dtype]:
    """The dtypes whose arrays `op` takes with nothing to promote or convert."""
    return frozenset(dtype for dtype in _EAGER_KINDS if _as_it_is(op, dtype, on_bool))


def _apply(name: str, op: type[tape.TapeOp], operands: list[Any], on_bool: Any,
           advice: str) -> Array:
    """Promote `operands` for `op` and record it (or `on_bool`, the op a bool result takes)."""
    floating = FLOAT in op.ELEMENTS and INT not in op.ELEMENTS
    operands, weak = common(name, *operands, floating=floating)
    dtype = np.dtype(operands[0].dtype)
    if dtype == np.bool_ and on_bool is not None:
        op = on_bool
    if _kind(dtype) not in op.ELEMENTS:
        raise _refuse(name, dtype, advice)
    return weakened(bind(op, *operands), weak)


def _binary(op: type[tape.TapeOp], name: str, on_bool: Any = None, advice: str = ""):
    run, takes, ufunc = ieee(op), _taken_as_they_are(op, on_bool), is_ufunc(op)
    floats = frozenset(d for d in takes if d.kind == "f") if ufunc else frozenset()

    def fn(x: Any, y: Any) -> Array:
        # eager with nothing to promote, at once: arrays of one dtype and shape (of shapes
        # that broadcast, where the op is a numpy ufunc: it broadcasts as numpy does), or,
        # where the op is a numpy ufunc, a float array and a Python float (a weak scalar:
        # numpy's rule, as JAX's, casts it to the array's dtype)
        if type(x) is np.ndarray:
            if type(y) is np.ndarray:
                if (dtype := x.dtype) in takes and dtype == y.dtype:
                    if x.shape == y.shape:
                        return run(x, y)
                    if ufunc:
                        try:
                            return run(x, y)
                        except ValueError:  # shapes that do not broadcast: said below
                            pass
            elif type(y) is float and x.dtype in floats:
                return run(x, y)
        elif type(x) is float and type(y) is np.ndarray and y.dtype in floats:
            return run(x, y)
        return _apply(name, op, [x, y], on_bool, advice)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise `{op.name}`, numpy broadcasting and JAX's type promotion."
    return fn


def _unary(op: type[tape.TapeOp], name: str, on_bool: Any = None, advice: str = ""):
    run, takes = ieee(op), _taken_as_they_are(op, on_bool)

    def fn(x: Any) -> Array:
        if type(x) is np.ndarray and x.dtype in takes:
            return run(x)  # eager, nothing to promote: at once
        return _apply(name, op, [x], on_bool, advice)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise `{op.name}`."
    return fn


_BOOL_SUB = " (numpy refuses booleans here too: use `^`, tapeml.logical_xor)"
_BOOL_NEG = " (use `~` or tapeml.logical_not for booleans)"
_INTS_ONLY = " (shifts take integers)"

add = _binary(tape.AddOp, "add", on_bool=tape.OrOp)
subtract = _binary(tape.SubOp, "subtract", advice=_BOOL_SUB)
multiply = _binary(tape.MulOp, "multiply", on_bool=tape.AndOp)
divide = _binary(tape.DivOp, "divide")
maximum = _binary(tape.MaximumOp, "maximum", on_bool=tape.OrOp)
minimum = _binary(tape.MinimumOp, "minimum", on_bool=tape.AndOp)
_int_floor_divide = _binary(tape.FloorDivOp, "floor_divide")
_int_remainder = _binary(tape.RemOp, "remainder")
_float_fmod = _binary(tape.FmodOp, "fmod")
bitwise_and = _binary(tape.AndOp, "bitwise_and")
bitwise_or = _binary(tape.OrOp, "bitwise_or")
bitwise_xor = _binary(tape.XorOp, "bitwise_xor")
left_shift = _binary(tape.ShlOp, "left_shift", advice=_INTS_ONLY)
right_shift = _binary(tape.ShrOp, "right_shift", advice=_INTS_ONLY)
negative = _unary(tape.NegOp, "negative", advice=_BOOL_NEG)
invert = _unary(tape.NotOp, "invert")
bitwise_not = invert
exp = _unary(tape.ExpOp, "exp")
log = _unary(tape.LogOp, "log")
tanh = _unary(tape.TanhOp, "tanh")
sin = _unary(tape.SinOp, "sin")
cos = _unary(tape.CosOp, "cos")
sigmoid = _unary(tape.SigmoidOp, "sigmoid")
relu = _unary(tape.ReluOp, "relu")
sqrt = _unary(tape.SqrtOp, "sqrt")
stop_gradient = _unary(tape.StopGradientOp, "stop_gradient")
stop_gradient.__doc__ = """`x` unchanged, but a constant to differentiation: `grad` sends no
cotangent back through it, at any order (JAX's `lax.stop_gradient`, torch's `detach`)."""
_float_power = _binary(tape.PowOp, "power")
_pow = ieee(tape.PowOp)


def power(x: Any, y: Any) -> Array:
    """x ** y. On integers the exponent must be a non-negative Python int (computed by
    repeated squaring, wrapping as numpy does); on floats it is `tape.pow`."""
    if type(y) is float and plain(x) and x.dtype.kind == "f":  # eager, a float exponent
        # (pow's semantics takes operands of one shape)
        return _pow(x, np.full(x.shape, to_dtype("power", y, x.dtype)))
    if isinstance(y, int) and not isinstance(y, bool) and y >= 0:
        x = lift(x)
        if np.dtype(x.dtype).kind in "ib":
            return _integer_power(x, y)
    return _float_power(x, y) if _floating(x, y) else _refuse_power(x, y)


def _floating(x: Any, y: Any) -> bool:
    return builtins.any(isinstance(v, float) or (is_array(v) and np.dtype(v.dtype).kind == "f")
                        for v in (x, y))


def _refuse_power(x: Any, y: Any) -> Array:
    raise TypeError(at_user_line("power: an integer base takes a non-negative Python int "
                                 "exponent; cast to float for anything else"))


def _integer_power(x: Array, n: int) -> Array:
    if np.dtype(x.dtype) == np.bool_:  # numpy's bool ** n: 1 for n == 0, else x, as int8
        x = astype(x, np.int64)
    result = None
    base = x
    while n:
        if n & 1:
            result = base if result is None else multiply(result, base)
        n >>= 1
        if n:
            base = multiply(base, base)
    return result if result is not None else add(multiply(x, 0), 1)


def floor_divide(x: Any, y: Any) -> Array:
    """x // y as numpy's: integers by tape.floordiv (x // 0 = 0), floats by numpy's divmod."""
    (x, y), weak = common("floor_divide", x, y)
    if np.dtype(x.dtype).kind != "f":
        return _int_floor_divide(x, y)
    return weakened(_float_divmod(x, y)[0], weak)


def remainder(x: Any, y: Any) -> Array:
    """x % y as numpy's (the sign of y): integers by tape.rem (x % 0 = 0), floats by numpy's
    divmod."""
    (x, y), weak = common("remainder", x, y)
    if np.dtype(x.dtype).kind != "f":
        return _int_remainder(x, y)
    return weakened(_float_divmod(x, y)[1], weak)


def fmod(x: Any, y: Any) -> Array:
    """numpy.fmod, the remainder with the sign of x: floats by tape.fmod (C's fmod); integers
    as numpy's (x fmod 0 = 0), from tape.rem's remainder (the sign of y), less y where the two
    signs differ (no overflow: the remainder is smaller than y and of its sign)."""
    if type(x) is np.ndarray and type(y) is np.ndarray and x.dtype == y.dtype and \
            x.dtype.kind == "f":
        return _float_fmod(x, y)  # eager, nothing to promote: at once
    (x, y), weak = common("fmod", x, y)
    if np.dtype(x.dtype).kind != "i":
        return weakened(_float_fmod(x, y), weak)
    r = _int_remainder(x, y)
    differ = logical_and(not_equal(r, 0), not_equal(less(r, 0), less(x, 0)))
    return weakened(where(differ, subtract(r, y), r), weak)


def _zero_signed_like(v: Array) -> Array:
    """copysign(0, v) for non-NaN v: v * 0 keeps the sign of a finite v; an infinity's by a
    comparison."""
    return where(equal(abs(v), np.inf), where(less(v, 0), -0.0, 0.0), multiply(v, 0))


def _float_divmod(a: Array, b: Array) -> tuple[Array, Array]:
    """numpy's npy_divmod, op for op (so every stage gives numpy's bits): mod = fmod(a, b),
    div = (a - mod) / b, moved down one where mod's sign is not b's, snapped to the nearest
    integer; b == 0 gives a / b and fmod's NaN."""
    mod = fmod(a, b)
    div = divide(subtract(a, mod), b)
    nonzero = not_equal(mod, 0)
    adjust = logical_and(nonzero, not_equal(less(b, 0), less(mod, 0)))
    mod = where(adjust, add(mod, b), where(nonzero, mod, _zero_signed_like(b)))
    div = where(adjust, subtract(div, 1), div)
    snapped = floor(div)
    snapped = where(greater(subtract(div, snapped), 0.5), add(snapped, 1), snapped)
    quotient = where(not_equal(div, 0), snapped, _zero_signed_like(divide(a, b)))
    by_zero = equal(b, 0)
    return where(by_zero, divide(a, b), quotient), where(by_zero, fmod(a, b), mod)


def square(x: Any) -> Array:
    x = x if plain(x) else lift(x)
    return multiply(x, x)


_abs = _unary(tape.AbsOp, "abs")


def abs(x: Any) -> Array:  # noqa: A001 - numpy's name
    """|x| (numpy's absolute: abs(-0.0) is +0.0, abs(INT_MIN) wraps to INT_MIN)."""
    x = x if plain(x) else lift(x)
    return x if np.dtype(x.dtype) == np.bool_ else _abs(x)


def positive(x: Any) -> Array:
    """numpy.positive (`+x`): x as it is; on booleans a TypeError, as numpy's and as `-x`."""
    x = x if plain(x) else lift(x)
    if np.dtype(x.dtype) == np.bool_:
        raise _refuse("positive", np.dtype(np.bool_), " (as numpy's; a boolean is no number "
                      "with a sign: use x itself, or x.astype(int))")
    return x


sign = _unary(tape.SignOp, "sign")
floor = _unary(tape.FloorOp, "floor")
ceil = _unary(tape.CeilOp, "ceil")
erf = _unary(tape.ErfOp, "erf")
_round = _unary(tape.RoundOp, "round")


def round(x: Any, decimals: int = 0) -> Array:  # noqa: A001 - numpy's name
    """Round half to even (numpy's round and rint); integers are kept as they are."""
    if decimals != 0:
        raise NotImplementedError(at_user_line("round: decimals other than 0 are not "
                                               "supported; scale, round and unscale"))
    return _round(x)


def clip(x: Any, a_min: Any = None, a_max: Any = None) -> Array:
    """numpy.clip: minimum(maximum(x, a_min), a_max); NaN stays NaN; either bound may be None.
    Given both bounds the value is numpy's clip's, which keeps x where it lies within them
    (-0.0 too, where maximum and minimum give the bound on a tie): a_min where x < a_min,
    then a_max where that is > a_max (so a_max where a_min > a_max); NaN bounds give NaN. With
    one bound it is numpy's maximum or minimum. The gradient is minimum(maximum(...))'s (ties
    share it in half) everywhere."""
    if a_min is None and a_max is None:
        raise ValueError(at_user_line("clip: give a_min, a_max or both"))
    x = lift(x)
    for bound in (a_min, a_max):  # (a Python int too big for x: named as clip's)
        if type(bound) is int:
            to_dtype("clip", bound, result_type("clip", x, bound)[0])
    clipped = x if a_min is None else maximum(x, a_min)
    clipped = clipped if a_max is None else minimum(clipped, a_max)
    if a_min is None or a_max is None or np.dtype(clipped.dtype).kind != "f" or \
            (_zero_free(a_min) and _zero_free(a_max)):
        return clipped
    # numpy's value differs from `clipped` only in the sign of a zero (a tie with a zero
    # bound): there, its bits with clipped's gradient, as v - ((clipped - clipped) = +0)
    low = where(less(x, a_min), a_min, x)
    value = stop_gradient(where(greater(low, a_max), a_max, low))
    kept = subtract(value, subtract(stop_gradient(clipped), clipped))
    return where(equal(clipped, 0), kept, clipped)


def _zero_free(bound: Any) -> bool:
    """A bound known now (no tracer) that holds no zero: a result of zero is then x's own
    zero, strictly inside the bounds, where maximum and minimum give x's bits as numpy's clip
    does."""
    return not isinstance(bound, Tracer) and not np.any(np.asarray(bound) == 0)


def _compare(predicate: str, name: str):
    ufunc = COMPARE[predicate]  # tape.cmp's semantics: no IEEE flag to quiet (no errstate)

    def fn(x: Any, y: Any) -> Array:
        if plain(x) and type(y) is np.ndarray and x.dtype == y.dtype and x.shape == y.shape:
            result = ufunc(x, y)  # eager, nothing to promote: at once
            return result if type(result) is np.ndarray else np.asarray(result)
        return bind(tape.CmpOp, *common(name, x, y)[0], predicate=predicate)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Elementwise comparison `{predicate}`, a boolean array."
    return fn


less, less_equal = _compare("lt", "less"), _compare("le", "less_equal")
greater, greater_equal = _compare("gt", "greater"), _compare("ge", "greater_equal")
equal, not_equal = _compare("eq", "equal"), _compare("ne", "not_equal")


def _truth(x: Any) -> Array:
    x = lift(x)
    return x if np.dtype(x.dtype) == np.bool_ else not_equal(x, 0)


def logical_not(x: Any) -> Array:
    return bind(tape.NotOp, _truth(x))


def logical_and(x: Any, y: Any) -> Array:
    return bitwise_and(_truth(x), _truth(y))


def logical_or(x: Any, y: Any) -> Array:
    return bitwise_or(_truth(x), _truth(y))


def logical_xor(x: Any, y: Any) -> Array:
    return bitwise_xor(_truth(x), _truth(y))


_select = ieee(tape.SelectOp)


def where(cond: Any, x: Any, y: Any) -> Array:
    """`x` where `cond` holds, else `y` (broadcast together; x and y promote)."""
    if (type(cond) is np.ndarray and cond.dtype == np.bool_ and plain(x) and type(y) is np.ndarray
            and x.dtype == y.dtype and cond.shape == x.shape == y.shape):
        return _select(cond, x, y)  # eager, nothing to promote or broadcast: at once
    cond = lift(cond)
    if np.dtype(cond.dtype) != np.bool_:
        raise TypeError(at_user_line(f"where: the condition must be boolean (a comparison), "
                                     f"got {cond.dtype}"))
    (x, y), weak = common("where", x, y)
    cond, x, y = broadcast_together("where", cond, x, y)
    return weakened(bind(tape.SelectOp, cond, x, y), weak)


def isnan(x: Any) -> Array:
    """numpy.isnan: x != x (False for integers and booleans)."""
    x = x if plain(x) else lift(x)
    return not_equal(x, x)


def isinf(x: Any) -> Array:
    """numpy.isinf: |x| == inf (False for integers and booleans, which hold none)."""
    x = x if plain(x) else lift(x)
    if np.dtype(x.dtype).kind != "f":
        return not_equal(x, x)
    return equal(abs(x), np.inf)


def isfinite(x: Any) -> Array:
    """numpy.isfinite: |x| < inf, so NaN is not (True for integers and booleans)."""
    x = x if plain(x) else lift(x)
    if np.dtype(x.dtype).kind != "f":
        return equal(x, x)
    return less(abs(x), np.inf)
