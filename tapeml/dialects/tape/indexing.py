"""The indexing tape ops, which read and write elements at positions held in an integer tensor:
take (numpy's `take` along one axis, a gather) and scatter (JAX's `x.at[idx].set/add/max/min`
along one axis).

Both read their index tensor (i32 or i64, any rank) with one rule for a position `i` along an
axis of length `n`:

    -n <= i < n     the position i mod n, as numpy indexes (a negative one counts from the end)
    otherwise       take clamps it into [0, n-1] (as JAX's gathers do); scatter drops that
                    update (as JAX's scatters do)

so no stage ever reads or writes outside a buffer, whatever the indices hold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute
from xdsl.irdl import irdl_op_definition, operand_def, result_def, traits_def
from xdsl.traits import Pure

from tapeml.dialects.base import Int, Keyword, TapeOp
from tapeml.dialects.tape.types import (
    INTS,
    NUMBERS,
    any_tensor,
    check,
    tensor_of,
    tensor_type,
)

__all__ = [
    "SCATTER_KINDS",
    "ScatterOp",
    "TakeOp",
    "gathered_shape",
]

SCATTER_KINDS = ("set", "add", "max", "min")
"""How a scatter combines an update with the element it lands on."""


def gathered_shape(x: TensorType, indices: TensorType, axis: int) -> list[int]:
    """x.shape[:axis] + indices.shape + x.shape[axis+1:]: take's result, scatter's updates."""
    shape = list(x.get_shape())
    return [*shape[:axis], *indices.get_shape(), *shape[axis + 1:]]


class _Indexing(TapeOp):
    """Shared by take and scatter: an `axis` of x (negative ones normalized by the builder)
    and an index tensor of i32 or i64."""

    @classmethod
    def normalize(cls, operand_types: Sequence[Attribute], params: dict[str, Any]) -> dict:
        axis = params["axis"]
        # (an axis out of range stays as given: the shape rule names it)
        if operand_types and isinstance(operand_types[0], TensorType) and \
                -operand_types[0].get_num_dims() <= axis < 0:
            axis += operand_types[0].get_num_dims()
        return params | {"axis": axis}

    @classmethod
    def _check_axis(cls, x: TensorType, indices: Attribute, axis: int) -> TensorType:
        """The index tensor's type, once x's axis is known to be in range."""
        check(0 <= axis < x.get_num_dims(), cls.name,
              lambda: f"axis {axis} is out of range for x {x}")
        return tensor_of(cls.name, indices, INTS, "indices")


@irdl_op_definition
class TakeOp(_Indexing):
    """numpy.take(x, indices, axis): result[a, j..., b] = x[a, norm(indices[j...]), b] over
    the dims a before `axis` and b after it, where norm(i) is i + n for -n <= i < 0, i for
    0 <= i < n, and clamped into [0, n-1] otherwise (n = x.shape[axis]). The result has shape
    x.shape[:axis] + indices.shape + x.shape[axis+1:] and x's element type."""

    name = "tape.take"
    x = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    axis = Int.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (Int("axis"),)

    @classmethod
    def infer(cls, x: Attribute, indices: Attribute, *, axis: int) -> Attribute:
        t = any_tensor(cls.name, x, "x")
        i = cls._check_axis(t, indices, axis)
        shape = gathered_shape(t, i, axis)
        check(t.get_shape()[axis] > 0 or math.prod(shape) == 0, cls.name,
              lambda: f"cannot take {i} positions from axis {axis} of x {t}: the axis is empty")
        return tensor_type(shape, t.get_element_type())


@irdl_op_definition
class ScatterOp(_Indexing):
    """JAX's x.at[indices].<kind>(updates) along `axis`: a copy of x where each update
    updates[a, j..., b] is combined into result[a, norm(indices[j...]), b] (norm as for
    tape.take, for -n <= i < n), and an update whose index is outside [-n, n) is dropped.

    `kind` says how: `set` writes the update, `add` adds it (integers wrap), `max` and `min`
    keep the IEEE maximum / minimum (NaN wins, -0 < +0: tape.maximum's rule). Where several
    updates land on one element, add and max/min combine all of them (add in the row-major
    order of the updates), and for set the last one in the row-major order of the updates
    wins. `updates` has shape x.shape[:axis] + indices.shape + x.shape[axis+1:] and x's element
    type; the result has x's type. set takes any element type, add/max/min i32, i64, f32, f64.
    """

    name = "tape.scatter"
    x = operand_def(TensorType)
    indices = operand_def(TensorType)
    updates = operand_def(TensorType)
    result = result_def(TensorType)
    kind = Keyword.prop()
    axis = Int.prop()
    traits = traits_def(Pure())
    CLAUSES: ClassVar = (Keyword("kind", SCATTER_KINDS), Int("axis"))

    @classmethod
    def infer(cls, x: Attribute, indices: Attribute, updates: Attribute, *, kind: str,
              axis: int) -> Attribute:
        check(kind in SCATTER_KINDS, cls.name,
              lambda: f"kind must be one of {', '.join(SCATTER_KINDS)}, got {kind!r}")
        if kind == "set":
            t = any_tensor(cls.name, x, "x")
        else:
            t = tensor_of(cls.name, x, NUMBERS, f"x of a scatter {kind}")
        i = cls._check_axis(t, indices, axis)
        u = any_tensor(cls.name, updates, "updates")
        check(u.get_element_type() == t.get_element_type(), cls.name,
              lambda: f"updates must have x's element type; got x {t} and updates {u}")
        shape = gathered_shape(t, i, axis)
        check(list(u.get_shape()) == shape, cls.name,
              lambda: f"updates must have shape {shape} (x.shape[:axis] + indices.shape + "
              f"x.shape[axis+1:] for x {t}, indices {i}, axis {axis}); got {u}")
        return t
