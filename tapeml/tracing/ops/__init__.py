"""The ops users call: tape primitives with numpy-style conveniences, and the usual composites.

Every function works on numpy arrays (computing at once, with the tape ops' numpy semantics)
and on tracers (recording tape ops); composites are written once, against the primitives, so
both modes run the same ops. Shapes broadcast as numpy's; dtypes promote as JAX's, Python
numbers weak (promotion.py).

    promotion.py     the type lattice, weak scalars, astype, broadcast_to
    elementwise.py   arithmetic, comparisons, where, integer and bitwise ops, float functions
    layout.py        reshape, transpose, swapaxes, moveaxis, squeeze, pad, concatenate, stack,
                     expand_dims, unfold, fold
    creation.py      full, zeros, ones (and _like), arange, iota, one_hot, tril, triu
    indexing.py      x[...], take, take_along_axis, at[...].set/add/max/min, flip, split
    reductions.py    sum, max, min, any, all, argmax, argmin, cumsum, mean, var, std,
                     logsumexp, softmax, log_softmax
    contractions.py  matmul, dot, einsum

This module gathers their names (each family's `__all__`) and gives tracers numpy's operators.
"""

from __future__ import annotations

from tapeml.tracing.ops import (
    contractions,
    creation,
    elementwise,
    indexing,
    layout,
    promotion,
    reductions,
)
from tapeml.tracing.ops.contractions import *  # noqa: F403 (each family's __all__)
from tapeml.tracing.ops.creation import *  # noqa: F403
from tapeml.tracing.ops.elementwise import *  # noqa: F403
from tapeml.tracing.ops.indexing import *  # noqa: F403
from tapeml.tracing.ops.layout import *  # noqa: F403
from tapeml.tracing.ops.promotion import *  # noqa: F403
from tapeml.tracing.ops.reductions import *  # noqa: F403
from tapeml.tracing.trace import Tracer

__all__ = [*contractions.__all__, *creation.__all__, *elementwise.__all__, *indexing.__all__,
           *layout.__all__, *promotion.__all__, *reductions.__all__]


def _install_operators() -> None:
    def swap(fn):
        return lambda self, other: fn(other, self)

    binary = {
        "add": add, "sub": subtract, "mul": multiply, "truediv": divide,  # noqa: F405
        "floordiv": floor_divide, "mod": remainder, "pow": power, "matmul": matmul,  # noqa: F405
        "and": bitwise_and, "or": bitwise_or, "xor": bitwise_xor,  # noqa: F405
        "lshift": left_shift, "rshift": right_shift,  # noqa: F405
    }
    for name, fn in binary.items():
        setattr(Tracer, f"__{name}__", fn)
        setattr(Tracer, f"__r{name}__", swap(fn))
    comparisons = {"lt": less, "le": less_equal, "gt": greater,  # noqa: F405
                   "ge": greater_equal, "eq": equal, "ne": not_equal}  # noqa: F405
    for name, fn in comparisons.items():
        setattr(Tracer, f"__{name}__", fn)
    Tracer.__getitem__ = getitem  # noqa: F405
    Tracer.at = property(at)  # noqa: F405
    Tracer.__iter__ = lambda self: (getitem(self, i) for i in range(len(self)))  # noqa: F405
    Tracer.__neg__ = negative  # noqa: F405
    Tracer.__invert__ = invert  # noqa: F405
    Tracer.__abs__ = abs  # noqa: F405
    Tracer.__pos__ = positive  # noqa: F405
    Tracer.T = property(lambda self: transpose(self))  # noqa: F405
    Tracer.reshape = lambda self, *shape: reshape(  # noqa: F405
        self, shape[0] if len(shape) == 1 else shape)
    Tracer.transpose = lambda self, *axes: transpose(  # noqa: F405
        self, (axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes) or None)
    Tracer.astype = astype  # noqa: F405
    Tracer.sum = sum  # noqa: F405
    Tracer.mean = mean  # noqa: F405
    Tracer.max = max  # noqa: F405
    Tracer.min = min  # noqa: F405
    Tracer.any = any  # noqa: F405
    Tracer.all = all  # noqa: F405
    Tracer.swapaxes = swapaxes  # noqa: F405


_install_operators()
