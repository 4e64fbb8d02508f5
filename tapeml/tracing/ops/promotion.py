"""Type promotion as JAX does it: one lattice over tape's element types, Python numbers weak.

    bool < int* < i32 < i64 < float* < f32 < f64

An op's operands are brought to the highest type among them. `int*` and `float*` are *weak*:
the type of a Python int or float (or a list of them), and of a value computed from weak values
only (`Tracer.weak`). A weak type gives way to any non-weak operand it meets (`x_f32 * 0.1` is
f32, `ids_i32 + 1` is i32, a Python int too big for it an OverflowError); an integer meeting a
float becomes that float (i32 and f32 give f32, as in JAX, where numpy would widen to f64).

Weak values are computed in i64 and f64, so a Python float passed to a jitted function keeps all
its digits in an f64 program; a weak result leaves the program as i64 or f32 (a Python int's and
a Python float's dtype). Computed at once (no tracer in sight), an op does the same: `ids_i32 ==
16777216.0` compares in f64 and `ids_i32 * 0.1` is the f64 product rounded to f32, the bits a
jitted call returns. Only a chain differs: eagerly each op's weak result is an f32 array (a
numpy array cannot carry the weak mark), where a trace keeps it f64 to the end. A lone Python
number (`lift`) is an array of its weak type's exit dtype from the start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.errors import ShapeError
from tapeml.interpreters.tape import ieee
from tapeml.tracing.trace import (
    Tracer,
    as_array,
    at_user_line,
    bind,
    called_op,
    canonical_dtype,
)

__all__ = ["astype", "broadcast_to"]

Array = Any  # a numpy array or a Tracer

_BOOL, _I32, _I64, _F32, _F64 = (np.dtype(t) for t in
                                 (np.bool_, np.int32, np.int64, np.float32, np.float64))
_RANK = {_BOOL: 0, _I32: 2, _I64: 3, _F32: 5, _F64: 6}
WEAK_INT, WEAK_FLOAT = 1, 4
_OF_RANK = {0: _BOOL, WEAK_INT: _I64, 2: _I32, 3: _I64, WEAK_FLOAT: _F64, 5: _F32, 6: _F64}


_F32_MAX = float(np.finfo(np.float32).max)


def plain(x: Any) -> bool:
    """`x` is a numpy array of a tape dtype: an eager operand that needs no conversion."""
    return type(x) is np.ndarray and x.dtype in _RANK


def is_array(x: Any) -> bool:
    return isinstance(x, Tracer | np.ndarray | np.generic)


def is_weak(x: Any) -> bool:
    return isinstance(x, Tracer) and x.weak


def lift(x: Any) -> Array:
    """Tracers and arrays as they are; a Python number or list as an array of its weak type's
    exit dtype (i64, f32) or bool."""
    if isinstance(x, Tracer):
        return x
    if is_array(x):
        return as_array(x)
    dtype, weak = result_type("operand", x)
    return to_dtype("operand", x, _F32 if weak and dtype == _F64 else dtype)


def _rank(name: str, x: Any) -> int:
    if isinstance(x, Tracer):
        if x.weak:
            return WEAK_FLOAT if x.dtype.kind == "f" else WEAK_INT
        return _RANK[np.dtype(x.dtype)]
    if is_array(x):
        return _RANK[canonical_dtype(np.dtype(x.dtype))]
    if isinstance(x, bool):
        return 0
    if isinstance(x, int):
        return WEAK_INT
    if isinstance(x, float):
        return WEAK_FLOAT
    if isinstance(x, list | tuple):
        kind = as_array(x).dtype.kind
        return 0 if kind == "b" else WEAK_INT if kind in "iu" else WEAK_FLOAT
    raise TypeError(at_user_line(f"{name}: cannot use a {type(x).__name__} as an operand "
                                 "(arrays, tracers and numbers only)"))


def result_type(name: str, *xs: Any, floating: bool = False) -> tuple[np.dtype, bool]:
    """The dtype the operands of `name` meet at, and whether it is weak. With `floating`, an
    integer or boolean type becomes a float one: float* for int*, else f64 (numpy's, for
    `ids / 2`, `exp(ids)` and `mean(ids)`)."""
    rank = max(_rank(name, x) for x in xs)
    if floating and rank < WEAK_FLOAT:
        rank = WEAK_FLOAT if rank == WEAK_INT else _RANK[_F64]
    return _OF_RANK[rank], rank in (WEAK_INT, WEAK_FLOAT)


def to_dtype(name: str, x: Any, dtype: np.dtype) -> Array:
    """`x` (an array, a tracer, a Python number or list) as `dtype`."""
    if is_array(x):
        if np.dtype(x.dtype) == dtype:
            return x
        if is_weak(x) and dtype.kind == "i" and dtype.itemsize < np.dtype(x.dtype).itemsize:
            x.trace.narrowed(x.value, dtype)  # the Python ints it is made of must fit
        return astype(x, dtype)
    if type(x) is float and (x != x or -_F32_MAX <= x <= _F32_MAX):
        return np.asarray(x, dtype=dtype)  # no overflow to say nothing of (below)
    try:
        with np.errstate(over="ignore"):  # a float past the dtype's range is its inf (IEEE)
            return as_array(np.asarray(x, dtype=dtype))
    except OverflowError:  # an int past it is an error (numpy's and JAX's rule)
        raise OverflowError(at_user_line(f"{name}: the Python integer {x} does not fit in "
                                         f"{dtype}, the dtype it meets")) from None


def _one_dtype(xs: Sequence[Any], floating: bool) -> bool:
    """`xs` are numpy arrays of one tape dtype (a float one where the op takes only floats):
    eager, with nothing to promote."""
    first = xs[0]
    if type(first) is not np.ndarray:
        return False
    dtype = first.dtype
    if dtype not in _RANK or (floating and dtype.kind != "f"):
        return False
    return all(type(x) is np.ndarray and x.dtype == dtype for x in xs)


def promote(name: str, *xs: Any, floating: bool = False) -> tuple[list[Array], bool]:
    """The operands of `name` at their common dtype (see the module doc), and whether it is
    weak."""
    if _one_dtype(xs, floating):
        return list(xs), False
    dtype, weak = result_type(name, *xs, floating=floating)
    return [_marked(to_dtype(name, x, dtype), weak) for x in xs], weak


def common(name: str, *xs: Any, floating: bool = False) -> tuple[list[Array], bool]:
    """`promote`, then `broadcast_together`."""
    if _same_tracers(xs, floating):
        return list(xs), False
    lifted, weak = promote(name, *xs, floating=floating)
    return broadcast_together(name, *lifted), weak


def _same_tracers(xs: Sequence[Any], floating: bool) -> bool:
    """`xs` are tracers of one type, none weak (a float type where the op takes only floats):
    traced, with nothing to promote or broadcast (most of a model's ops; the general path was
    a sixth of tracing a GPT step)."""
    first = xs[0]
    if type(first) is not Tracer or first.weak or (floating and first.dtype.kind != "f"):
        return False
    t = first.value.type
    return all(type(x) is Tracer and not x.weak and (x.value.type is t or x.value.type == t)
               for x in xs[1:])


def broadcast_together(name: str, *xs: Any) -> list[Array]:
    """The arrays `xs` broadcast to one shape, numpy style. Inside a trace, an array that
    meets a tracer becomes a constant of its own shape and a tape.broadcast (`x * 2.0` is a
    rank-0 constant, not one of x's size, so a big program's constants stay small)."""
    if _one_dtype(xs, False) and all(x.shape == xs[0].shape for x in xs):
        return list(xs)  # eager, with nothing to broadcast
    lifted = [lift(x) for x in xs]
    trace = next((x.trace for x in lifted if isinstance(x, Tracer)), None)
    try:
        shape = (np.broadcast(*lifted).shape if trace is None else
                 np.broadcast_shapes(*(tuple(x.shape) for x in lifted)))
    except ValueError:
        shapes = ", ".join(str(tuple(x.shape)) for x in lifted)
        raise ShapeError(at_user_line(f"{name}: operands with shapes {shapes} cannot be "
                                      "broadcast together")) from None
    if trace is None:  # eager: tape.broadcast's semantics is np.broadcast_to
        return [x if x.shape == shape else np.broadcast_to(x, shape) for x in lifted]
    # an array meeting a tracer enters the trace at its own size
    lifted = [x if isinstance(x, Tracer) or tuple(x.shape) == shape else
              Tracer(trace.operand(x), trace) for x in lifted]
    return [broadcast_to(x, shape) for x in lifted]


def _marked(x: Array, weak: bool) -> Array:
    """`x`, a tracer marked weak where `weak` (see `Tracer`)."""
    if weak and isinstance(x, Tracer):
        x.weak = True
    return x


def weakened(result: Array, weak: bool) -> Array:
    """An op's `result`, weak when its operands were: a tracer marked so, and an array computed
    at once leaving as the weak type's dtype (f64 as f32: the module doc)."""
    if weak and type(result) is np.ndarray and result.dtype == _F64:
        return _cast(result, dtype=_F32)
    return _marked(result, weak)


_cast = ieee(tape.CastOp)


def user_dtype(name: str, dtype: Any) -> np.dtype:
    """np.dtype(dtype), or numpy's TypeError for a name it does not know ('floot32') at the
    user's line, naming `name`."""
    try:
        return np.dtype(dtype)
    except TypeError as error:
        raise TypeError(at_user_line(f"{name}: {error}")) from None


def user_shape(name: str, shape: Any) -> tuple[int, ...]:
    """`shape` (an int or a sequence of ints) as a tuple of ints, or numpy's errors at the
    user's line, naming the op the user called (else `name`): a TypeError for a dim that is
    no integer (a float or a bool would otherwise become a dim silently: int(2.5) is 2,
    True is 1), a ValueError for a negative one."""
    dims = (shape,) if isinstance(shape, int | np.integer) else shape
    if not isinstance(dims, Sequence | np.ndarray) or not all(
            isinstance(d, int | np.integer) and not isinstance(d, bool | np.bool_)
            for d in dims):
        raise TypeError(at_user_line(f"{called_op(name)}: a shape is an int or a sequence of "
                                     f"ints, got {shape!r}"))
    if any(d < 0 for d in dims):
        raise ValueError(at_user_line(f"{called_op(name)}: negative dimensions are not "
                                      f"allowed, got shape {shape!r}"))
    return tuple(int(d) for d in dims)


def astype(x: Any, dtype: Any) -> Array:
    """`x` converted to `dtype` (bool, int32, int64, float32 or float64) by numpy's `astype`
    rules, except that float to integer truncates toward zero and saturates (NaN gives 0),
    the same on every backend. The result is not weak. A dtype tape tensors do not hold
    (uint8, float16, ...) is a TypeError: its values would not be what numpy's astype gives."""
    wanted = user_dtype("astype", dtype)
    dtype = canonical_dtype(wanted)
    if dtype != wanted:
        raise TypeError(at_user_line(f"astype: tape tensors hold bool, int32, int64, float32 or "
                                     f"float64, not {wanted} (use {dtype}: it holds every "
                                     f"{wanted} value)"))
    if plain(x):  # eager: at once
        return x if x.dtype == dtype else _cast(x, dtype=dtype)
    x = lift(x)
    if np.dtype(x.dtype) == dtype:
        return Tracer(x.value, x.trace) if is_weak(x) else x
    return bind(tape.CastOp, x, dtype=dtype)


def broadcast_to(x: Any, shape: Sequence[int] | int) -> Array:
    """numpy.broadcast_to; an int shape is a 1-d one, as numpy's."""
    x = lift(x)
    if isinstance(shape, int | np.integer):
        shape = (int(shape),)
    if tuple(x.shape) == tuple(shape):
        return x
    return weakened(bind(tape.BroadcastOp, x, shape=tuple(shape)), is_weak(x))
