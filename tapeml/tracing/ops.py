"""The ops users call: tape primitives with numpy-style conveniences, and the usual composites.

Every function works on numpy arrays (computing at once, with the tape ops' numpy semantics)
and on tracers (recording tape ops); composites are written once, against the primitives, so
both modes run the same ops. Numpy rules apply: broadcasting, Python scalars taking the dtype of
the array they meet, float32 meeting float64 giving float64.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.errors import ShapeError
from tapeml.tracing.trace import Tracer, as_array, at_user_line, bind

Array = Any  # a numpy array or a Tracer


def _is_array(x: Any) -> bool:
    return isinstance(x, Tracer | np.ndarray | np.generic)


def _shape(x: Array) -> tuple[int, ...]:
    return tuple(x.shape)


def _lift(x: Any) -> Array:
    """Tracers and arrays as they are; anything else as a float array."""
    return x if isinstance(x, Tracer) else as_array(x)


def _is_weak(x: Any) -> bool:
    return isinstance(x, Tracer) and x.weak


def _common(name: str, *xs: Any) -> tuple[list[Array], bool]:
    """Operands of `name` brought to one dtype and one (broadcast) shape, numpy style, and
    whether the result is weak (every float operand a weak tracer or a Python number).

    The dtype is float64 if any non-weak float array is float64, else float32; weak tracers
    (Python numbers passed as arguments, see `Tracer`) and Python numbers take it. Weak operands
    alone compute in float64."""
    arrays = [x for x in xs if _is_array(x)]
    dtypes = {np.dtype(a.dtype) for a in arrays
              if np.dtype(a.dtype) != np.bool_ and not _is_weak(a)}
    weak = not dtypes and any(_is_weak(a) for a in arrays)
    wide = weak or np.dtype(np.float64) in dtypes
    dtype = np.dtype(np.float64) if wide else np.dtype(np.float32)
    lifted = []
    for x in xs:
        if not _is_array(x):
            if not isinstance(x, int | float | list | tuple):
                raise TypeError(at_user_line(f"{name}: cannot use a {type(x).__name__} as an "
                                             "operand (arrays, tracers and numbers only)"))
            x = as_array(x if isinstance(x, list | tuple) else np.asarray(x, dtype=dtype))
            if np.dtype(x.dtype) not in (dtype, np.bool_):
                x = x.astype(dtype)
        elif np.dtype(x.dtype) not in (dtype, np.bool_):
            x = astype(x, dtype)
        lifted.append(x)
    try:
        shape = np.broadcast_shapes(*(_shape(x) for x in lifted))
    except ValueError:
        shapes = ", ".join(str(_shape(x)) for x in lifted)
        raise ShapeError(at_user_line(f"{name}: operands with shapes {shapes} cannot be "
                                      "broadcast together")) from None
    return [broadcast_to(x, shape) for x in lifted], weak


def _weakened(result: Array, weak: bool) -> Array:
    """`result`, marked weak when its operands were (see `Tracer`)."""
    if weak and isinstance(result, Tracer):
        result.weak = True
    return result


# ----------------------------------------------------------------------------------------------
# Elementwise


def _binary(op: type[tape.TapeOp]):
    def fn(x: Any, y: Any) -> Array:
        operands, weak = _common(fn.__name__, x, y)
        return _weakened(bind(op, *operands), weak)

    fn.__name__ = op.name.removeprefix("tape.")
    fn.__doc__ = f"Elementwise `{op.name}`, numpy broadcasting."
    return fn


def _unary(op: type[tape.TapeOp]):
    def fn(x: Any) -> Array:
        x = _lift(x)
        return _weakened(bind(op, x), _is_weak(x))

    fn.__name__ = op.name.removeprefix("tape.")
    fn.__doc__ = f"Elementwise `{op.name}`."
    return fn


add = _binary(tape.AddOp)
subtract = _binary(tape.SubOp)
multiply = _binary(tape.MulOp)
divide = _binary(tape.DivOp)
maximum = _binary(tape.MaximumOp)
minimum = _binary(tape.MinimumOp)
power = _binary(tape.PowOp)
negative = _unary(tape.NegOp)
exp = _unary(tape.ExpOp)
log = _unary(tape.LogOp)
tanh = _unary(tape.TanhOp)
sin = _unary(tape.SinOp)
cos = _unary(tape.CosOp)
sigmoid = _unary(tape.SigmoidOp)
relu = _unary(tape.ReluOp)
sqrt = _unary(tape.SqrtOp)


def square(x: Any) -> Array:
    x = _lift(x)
    return multiply(x, x)


def abs(x: Any) -> Array:  # noqa: A001 - numpy's name
    x = _lift(x)
    return maximum(x, negative(x))


def _compare(predicate: str):
    def fn(x: Any, y: Any) -> Array:
        return bind(tape.CmpOp, *_common(fn.__name__, x, y)[0], predicate=predicate)

    fn.__name__ = {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
                   "eq": "equal", "ne": "not_equal"}[predicate]
    fn.__doc__ = f"Elementwise comparison `{predicate}`, a boolean array."
    return fn


less, less_equal = _compare("lt"), _compare("le")
greater, greater_equal = _compare("gt"), _compare("ge")
equal, not_equal = _compare("eq"), _compare("ne")


def where(cond: Array, x: Any, y: Any) -> Array:
    """`x` where `cond` holds, else `y` (broadcast together)."""
    if np.dtype(cond.dtype) != np.bool_:
        raise ShapeError(at_user_line(f"where: the condition must be boolean (a comparison), "
                                      f"got {cond.dtype}"))
    (cond, x, y), weak = _common("where", cond, x, y)
    return _weakened(bind(tape.SelectOp, cond, x, y), weak)


def astype(x: Any, dtype: Any) -> Array:
    """`x` converted to float32 or float64 (booleans become 1.0 and 0.0)."""
    x = _lift(x)
    if np.dtype(x.dtype) == np.dtype(dtype):
        return x
    if np.dtype(x.dtype) == np.bool_:
        one = np.ones((), dtype)
        return where(x, one, np.zeros((), dtype))
    return bind(tape.CastOp, x, dtype=np.dtype(dtype))


# ----------------------------------------------------------------------------------------------
# Layout


def broadcast_to(x: Any, shape: Sequence[int]) -> Array:
    x = _lift(x)
    if _shape(x) == tuple(shape):
        return x
    return bind(tape.BroadcastOp, x, shape=tuple(shape))


def reshape(x: Any, shape: Sequence[int] | int) -> Array:
    """Row-major reshape; one dim may be -1."""
    x = _lift(x)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if _shape(x) == shape:
        return x
    return bind(tape.ReshapeOp, x, shape=shape)


def transpose(x: Any, axes: Sequence[int] | None = None) -> Array:
    x = _lift(x)
    axes = tuple(range(x.ndim))[::-1] if axes is None else tuple(axes)
    if axes == tuple(range(x.ndim)):
        return x
    return bind(tape.PermuteOp, x, perm=axes)


def pad(x: Any, pad_width: Any, constant_values: float = 0.0) -> Array:
    """numpy.pad in constant mode: `pad_width` is an int, a (before, after) pair, or one pair
    per dim; negative amounts crop."""
    x = _lift(x)
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2))
    return bind(tape.PadOp, x, low=tuple(int(w) for w in widths[:, 0]),
                high=tuple(int(w) for w in widths[:, 1]), value=float(constant_values))


def pad2d(x: Any, padding: Sequence[int], value: float) -> Array:
    """`pad` over the two spatial dims of an NCHW array: `padding` is (top, left, bottom, right)."""
    top, left, bottom, right = padding
    return pad(x, [(0, 0), (0, 0), (top, bottom), (left, right)], value)


def concatenate(xs: Sequence[Any], axis: int = 0) -> Array:
    xs = [_lift(x) for x in xs]
    if len({np.dtype(x.dtype) for x in xs}) > 1:
        xs = [astype(x, np.float64) for x in xs]
    return bind(tape.ConcatOp, *xs, axis=axis)


def stack(xs: Sequence[Any], axis: int = 0) -> Array:
    xs = [_lift(x) for x in xs]
    axis = axis + xs[0].ndim + 1 if axis < 0 else axis
    return concatenate([expand_dims(x, axis) for x in xs], axis=axis)


def expand_dims(x: Any, axis: int) -> Array:
    x = _lift(x)
    shape = list(_shape(x))
    axis = axis + len(shape) + 1 if axis < 0 else axis
    shape.insert(axis, 1)
    return reshape(x, shape)


def unfold(x: Any, kernel: Sequence[int], stride: Sequence[int] | None = None,
           dilation: Sequence[int] | None = None) -> Array:
    """Sliding windows over the trailing len(kernel) dims: (*batch, *windows, *kernel)."""
    k = len(kernel)
    return bind(tape.UnfoldOp, _lift(x), kernel=tuple(kernel), stride=tuple(stride or (1,) * k),
                dilation=tuple(dilation or (1,) * k))


def fold(x: Any, spatial: Sequence[int], kernel: Sequence[int],
         stride: Sequence[int] | None = None, dilation: Sequence[int] | None = None) -> Array:
    """The adjoint of `unfold`: sums windows back onto spatial dims of size `spatial`."""
    k = len(kernel)
    return bind(tape.FoldOp, _lift(x), kernel=tuple(kernel), stride=tuple(stride or (1,) * k),
                dilation=tuple(dilation or (1,) * k), spatial=tuple(spatial))


def getitem(x: Array, index: Any) -> Array:
    """Basic numpy indexing: ints, slices with a positive step, `...` and None."""
    index = index if isinstance(index, tuple) else (index,)
    for i in index:
        ok = i is None or i is Ellipsis or isinstance(i, slice) or (
            isinstance(i, int | np.integer) and not isinstance(i, bool | np.bool_))
        if not ok:
            raise IndexError(at_user_line(
                f"tapeml supports int, slice, ... and None indices, not {type(i).__name__} "
                "(no boolean masks or integer-array gathers; use tapeml.where)"))
    ellipses = [k for k, i in enumerate(index) if i is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError(at_user_line("an index can only have a single ellipsis ('...')"))
    used = builtins.sum(1 for i in index if i is not None and i is not Ellipsis)
    if used > x.ndim:
        raise IndexError(at_user_line(f"too many indices for an array of shape {_shape(x)}"))
    at = ellipses[0] if ellipses else len(index)
    index = (*index[:at], *(slice(None),) * (x.ndim - used), *index[at + 1:])
    start, stop, step, shape = [], [], [], []
    dim = 0
    for i in index:
        if i is None:
            shape.append(1)
            continue
        size = x.shape[dim]
        if isinstance(i, slice):
            a, b, s = i.indices(size)
            if s < 1:
                raise IndexError(at_user_line("tapeml supports slices with a positive step only"))
            b = builtins.max(a, b)
            start.append(a), stop.append(b), step.append(s)
            shape.append(len(range(a, b, s)))
        else:
            if not -size <= i < size:
                raise IndexError(at_user_line(f"index {i} is out of bounds for axis {dim} with "
                                              f"size {size}"))
            i = int(i) % size
            start.append(i), stop.append(i + 1), step.append(1)
        dim += 1
    x = _lift(x)
    if (tuple(start), tuple(stop), tuple(step)) != ((0,) * x.ndim, _shape(x), (1,) * x.ndim):
        x = bind(tape.SliceOp, x, start=tuple(start), stop=tuple(stop), step=tuple(step))
    return reshape(x, shape)


# ----------------------------------------------------------------------------------------------
# Reductions


def _axes(x: Array, axis: int | Sequence[int] | None) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(x.ndim))
    return (axis,) if isinstance(axis, int | np.integer) else tuple(axis)


def sum(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Array:  # noqa: A001
    x = _lift(x)
    return bind(tape.SumOp, x, axes=_axes(x, axis), keepdims=keepdims)


def max(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Array:  # noqa: A001
    x = _lift(x)
    return bind(tape.MaxOp, x, axes=_axes(x, axis), keepdims=keepdims)


def min(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Array:  # noqa: A001
    return negative(max(negative(x), axis=axis, keepdims=keepdims))


def mean(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Array:
    x = _lift(x)
    count = int(np.prod([x.shape[a] for a in _axes(x, axis)], dtype=np.int64))
    return divide(sum(x, axis=axis, keepdims=keepdims), float(count))


def logsumexp(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Array:
    x = _lift(x)
    top = max(x, axis=axis, keepdims=True)
    out = add(log(sum(exp(subtract(x, top)), axis=axis, keepdims=True)), top)
    return out if keepdims else reshape(out, _reduced_shape(x, axis))


def _reduced_shape(x: Array, axis: int | Sequence[int] | None) -> tuple[int, ...]:
    axes = {a % x.ndim for a in _axes(x, axis)}
    return tuple(d for i, d in enumerate(_shape(x)) if i not in axes)


def softmax(x: Any, axis: int = -1) -> Array:
    x = _lift(x)
    e = exp(subtract(x, max(x, axis=axis, keepdims=True)))
    return divide(e, sum(e, axis=axis, keepdims=True))


def log_softmax(x: Any, axis: int = -1) -> Array:
    x = _lift(x)
    shifted = subtract(x, max(x, axis=axis, keepdims=True))
    return subtract(shifted, log(sum(exp(shifted), axis=axis, keepdims=True)))


# ----------------------------------------------------------------------------------------------
# Contraction


def matmul(a: Any, b: Any) -> Array:
    """numpy.matmul: vectors are promoted and squeezed, batch dims broadcast."""
    a, b = _lift(a), _lift(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(at_user_line("matmul: operands must have at least one dim, got shapes "
                                      f"{_shape(a)} and {_shape(b)}"))
    if np.dtype(a.dtype) != np.dtype(b.dtype):
        a, b = astype(a, np.float64), astype(b, np.float64)
    a2 = reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
    b2 = reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
    out = _matmul_nd(a2, b2)
    shape = list(_shape(out))
    if b.ndim == 1:
        shape.pop(-1)
    if a.ndim == 1:
        shape.pop(-2 if b.ndim != 1 else -1)
    return reshape(out, shape)


def _matmul_nd(a: Array, b: Array) -> Array:
    if a.ndim == 2 and b.ndim == 2:
        return bind(tape.MatmulOp, a, b)
    if b.ndim == 2 and a.shape[-1] == b.shape[0]:
        # (..., m, k) @ (k, n): one rank-2 matmul over all rows
        rows = reshape(a, (-1, a.shape[-1]))
        return reshape(bind(tape.MatmulOp, rows, b), (*_shape(a)[:-1], b.shape[1]))
    try:
        batch = np.broadcast_shapes(_shape(a)[:-2], _shape(b)[:-2])
    except ValueError:
        raise ShapeError(at_user_line(f"matmul: batch dims of {_shape(a)} and {_shape(b)} "
                                      "cannot be broadcast together")) from None
    a = broadcast_to(a, (*batch, *_shape(a)[-2:]))
    b = broadcast_to(b, (*batch, *_shape(b)[-2:]))
    count = int(np.prod(batch, dtype=np.int64))
    out = bind(tape.MatmulOp, reshape(a, (count, *_shape(a)[-2:])),
               reshape(b, (count, *_shape(b)[-2:])))
    return reshape(out, (*batch, *_shape(out)[-2:]))


def dot(a: Any, b: Any) -> Array:
    """numpy.dot for vectors and matrices (use matmul for batches)."""
    a, b = _lift(a), _lift(b)
    if a.ndim > 2 or b.ndim > 2:
        raise ShapeError(at_user_line(f"dot: operands must be rank 1 or 2, got shapes "
                                      f"{_shape(a)} and {_shape(b)} (use matmul for batches)"))
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    return matmul(a, b)


# ----------------------------------------------------------------------------------------------
# Operators on tracers


def _install_operators() -> None:
    def swap(fn):
        return lambda self, other: fn(other, self)

    table = {
        "__add__": add, "__radd__": swap(add), "__sub__": subtract, "__rsub__": swap(subtract),
        "__mul__": multiply, "__rmul__": swap(multiply), "__truediv__": divide,
        "__rtruediv__": swap(divide), "__pow__": power, "__rpow__": swap(power),
        "__matmul__": matmul, "__rmatmul__": swap(matmul), "__lt__": less,
        "__le__": less_equal, "__gt__": greater, "__ge__": greater_equal, "__eq__": equal,
        "__ne__": not_equal, "__getitem__": getitem,
    }
    for name, fn in table.items():
        setattr(Tracer, name, fn)
    Tracer.__iter__ = lambda self: (getitem(self, i) for i in range(len(self)))
    Tracer.__neg__ = negative
    Tracer.__abs__ = abs
    Tracer.__pos__ = lambda self: self
    Tracer.T = property(lambda self: transpose(self))
    Tracer.reshape = lambda self, *shape: reshape(self, shape[0] if len(shape) == 1 else shape)
    Tracer.transpose = lambda self, *axes: transpose(
        self, (axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes) or None)
    Tracer.astype = astype
    Tracer.sum = sum
    Tracer.mean = mean
    Tracer.max = max
    Tracer.min = min


_install_operators()
