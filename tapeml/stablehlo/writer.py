"""The text writer every StableHLO rule writes with: `V`, a value of the emitted function (its
SSA name, shape and dtype), and `Writer`, which appends one StableHLO op per call and returns
its result. Ops print in the syntax the upstream parser reads: the pretty form where it is one
line, the generic form for the ops with regions (reduce, reduce_window, scatter) and for gather.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

ELEMENT_NAMES = {np.dtype(np.bool_): "i1", np.dtype(np.int32): "i32", np.dtype(np.int64): "i64",
                 np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}


@dataclass(frozen=True)
class V:
    """A tensor value of the emitted function."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def type(self) -> str:
        return tensor_type(self.shape, self.dtype)

    @property
    def is_float(self) -> bool:
        return self.dtype.kind == "f"

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def tensor_type(shape: Sequence[int], dtype: np.dtype) -> str:
    dims = "".join(f"{d}x" for d in shape)
    return f"tensor<{dims}{ELEMENT_NAMES[np.dtype(dtype)]}>"


def dense(value: np.ndarray) -> str:
    """A dense literal: `dense<[true, false]>` for i1, else the little-endian bytes in hex
    (one element's bytes are a splat)."""
    if value.size == 0:
        return "dense<>"
    if value.dtype == np.bool_:
        if value.size and (value == value.flat[0]).all():
            return f"dense<{str(bool(value.flat[0])).lower()}>"
        return "dense<" + str(value.tolist()).replace("True", "true").replace("False",
                                                                             "false") + ">"
    data = np.ascontiguousarray(value, value.dtype.newbyteorder("<")).reshape(-1)
    raw = data.view(np.uint8).reshape(data.size, data.itemsize)
    if (raw == raw[0]).all():
        data = data[:1]  # a splat (compared bitwise: -0.0 and NaN payloads kept)
    return f'dense<"0x{data.tobytes().hex().upper()}">'


def _ints(values: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def _array(values: Sequence[int]) -> str:
    return "array<i64" + "".join(f", {int(v)}" if i else f": {int(v)}"
                                 for i, v in enumerate(values)) + ">"


def _padding(pairs: Sequence[tuple[int, int]]) -> str:
    rows = ", ".join(f"[{lo}, {hi}]" for lo, hi in pairs)
    return f"dense<[{rows}]> : tensor<{len(pairs)}x2xi64>"


COMPARE_TYPES = {"b": "UNSIGNED", "i": "SIGNED", "f": "FLOAT"}


class Writer:
    """Appends ops to one function's body; every method returns the op's result."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._count = 0
        self._indent = "    "

    def fresh(self) -> str:
        self._count += 1
        return f"%{self._count - 1}"

    def _op(self, text: str, shape: Sequence[int], dtype: np.dtype) -> V:
        result = V(self.fresh(), tuple(int(d) for d in shape), np.dtype(dtype))
        self.lines.append(f"{self._indent}{result.name} = {text}")
        return result

    # -- values without operands -----------------------------------------------------------

    def constant(self, value: np.ndarray) -> V:
        value = np.asarray(value)
        return self._op(f"stablehlo.constant {dense(value)} : "
                        f"{tensor_type(value.shape, value.dtype)}", value.shape, value.dtype)

    def splat(self, value: float | int | bool, shape: Sequence[int], dtype: np.dtype) -> V:
        """`value` in every element of a tensor of `shape` (written as one element)."""
        one = np.asarray(value, dtype)
        return self._op(f"stablehlo.constant {dense(one.reshape(1))} : "
                        f"{tensor_type(shape, dtype)}", shape, dtype)

    def scalar(self, value: float | int | bool, dtype: np.dtype) -> V:
        return self.splat(value, (), dtype)

    def iota(self, shape: Sequence[int], dtype: np.dtype, dim: int) -> V:
        return self._op(f"stablehlo.iota dim = {dim} : {tensor_type(shape, dtype)}", shape, dtype)

    # -- elementwise -----------------------------------------------------------------------

    def unary(self, name: str, x: V) -> V:
        return self._op(f"stablehlo.{name} {x.name} : {x.type}", x.shape, x.dtype)

    def binary(self, name: str, a: V, b: V) -> V:
        return self._op(f"stablehlo.{name} {a.name}, {b.name} : {a.type}", a.shape, a.dtype)

    def is_finite(self, x: V) -> V:
        return self._op(f"stablehlo.is_finite {x.name} : ({x.type}) -> "
                        f"{tensor_type(x.shape, np.bool_)}", x.shape, np.bool_)

    def chlo(self, name: str, x: V) -> V:
        return self._op(f"chlo.{name} {x.name} : {x.type} -> {x.type}", x.shape, x.dtype)

    def compare(self, direction: str, a: V, b: V) -> V:
        kind = COMPARE_TYPES[a.dtype.kind]
        return self._op(f"stablehlo.compare {direction.upper()}, {a.name}, {b.name}, {kind} : "
                        f"({a.type}, {b.type}) -> {tensor_type(a.shape, np.bool_)}",
                        a.shape, np.bool_)

    def select(self, cond: V, on_true: V, on_false: V) -> V:
        return self._op(f"stablehlo.select {cond.name}, {on_true.name}, {on_false.name} : "
                        f"({cond.type}, {on_true.type}, {on_false.type}) -> {on_true.type}",
                        on_true.shape, on_true.dtype)

    def convert(self, x: V, dtype: np.dtype) -> V:
        if np.dtype(dtype) == x.dtype:
            return x
        return self._op(f"stablehlo.convert {x.name} : ({x.type}) -> "
                        f"{tensor_type(x.shape, dtype)}", x.shape, dtype)

    def clamp(self, low: V, x: V, high: V) -> V:
        return self._op(f"stablehlo.clamp {low.name}, {x.name}, {high.name} : "
                        f"({low.type}, {x.type}, {high.type}) -> {x.type}", x.shape, x.dtype)

    def like(self, value: float | int | bool, x: V) -> V:
        """`value` in a tensor of x's shape and dtype."""
        return self.splat(value, x.shape, x.dtype)

    # -- layout ----------------------------------------------------------------------------

    def broadcast(self, x: V, shape: Sequence[int], dims: Sequence[int] | None = None) -> V:
        """broadcast_in_dim; by default numpy's alignment (x's dims are the trailing ones)."""
        shape = tuple(shape)
        if dims is None:
            if x.shape == shape:
                return x
            dims = range(len(shape) - len(x.shape), len(shape))
        return self._op(f"stablehlo.broadcast_in_dim {x.name}, dims = {_ints(dims)} : "
                        f"({x.type}) -> {tensor_type(shape, x.dtype)}", shape, x.dtype)

    def reshape(self, x: V, shape: Sequence[int]) -> V:
        if tuple(shape) == x.shape:
            return x
        return self._op(f"stablehlo.reshape {x.name} : ({x.type}) -> "
                        f"{tensor_type(shape, x.dtype)}", shape, x.dtype)

    def transpose(self, x: V, perm: Sequence[int]) -> V:
        if list(perm) == list(range(len(perm))):
            return x
        shape = [x.shape[p] for p in perm]
        return self._op(f"stablehlo.transpose {x.name}, dims = {_ints(perm)} : ({x.type}) -> "
                        f"{tensor_type(shape, x.dtype)}", shape, x.dtype)

    def pad(self, x: V, value: V, low: Sequence[int], high: Sequence[int],
            interior: Sequence[int] | None = None) -> V:
        interior = interior or [0] * len(x.shape)
        if not any(low) and not any(high) and not any(interior):
            return x
        shape = [lo + d + (d - 1) * i * (d > 0) + hi
                 for d, lo, hi, i in zip(x.shape, low, high, interior, strict=True)]
        return self._op(f"stablehlo.pad {x.name}, {value.name}, low = {_ints(low)}, "
                        f"high = {_ints(high)}, interior = {_ints(interior)} : "
                        f"({x.type}, {value.type}) -> {tensor_type(shape, x.dtype)}",
                        shape, x.dtype)

    def slice(self, x: V, start: Sequence[int], limit: Sequence[int],
              strides: Sequence[int] | None = None) -> V:
        strides = strides or [1] * len(x.shape)
        if list(start) == [0] * len(x.shape) and tuple(limit) == x.shape and set(strides) <= {1}:
            return x
        shape = [-(-(b - a) // s) for a, b, s in zip(start, limit, strides, strict=True)]
        ranges = ", ".join(f"{a}:{b}:{s}" for a, b, s in zip(start, limit, strides, strict=True))
        return self._op(f"stablehlo.slice {x.name} [{ranges}] : ({x.type}) -> "
                        f"{tensor_type(shape, x.dtype)}", shape, x.dtype)

    def concatenate(self, xs: Sequence[V], dim: int) -> V:
        if len(xs) == 1:
            return xs[0]
        shape = list(xs[0].shape)
        shape[dim] = sum(x.shape[dim] for x in xs)
        names = ", ".join(x.name for x in xs)
        types = ", ".join(x.type for x in xs)
        return self._op(f"stablehlo.concatenate {names}, dim = {dim} : ({types}) -> "
                        f"{tensor_type(shape, xs[0].dtype)}", shape, xs[0].dtype)

    def reverse(self, x: V, dims: Sequence[int]) -> V:
        return self._op(f"stablehlo.reverse {x.name}, dims = {_ints(dims)} : {x.type}",
                        x.shape, x.dtype)

    # -- contractions ----------------------------------------------------------------------

    def dot_general(self, a: V, b: V, batch: tuple[Sequence[int], Sequence[int]],
                    contract: tuple[Sequence[int], Sequence[int]], shape: Sequence[int]) -> V:
        batching = f"batching_dims = {_ints(batch[0])} x {_ints(batch[1])}, " if batch[0] \
            else ""
        return self._op(f"stablehlo.dot_general {a.name}, {b.name}, {batching}"
                        f"contracting_dims = {_ints(contract[0])} x {_ints(contract[1])} : "
                        f"({a.type}, {b.type}) -> {tensor_type(shape, a.dtype)}", shape, a.dtype)

    def convolution(self, lhs: V, rhs: V, layout: str, shape: Sequence[int], *,
                    stride: Sequence[int], pad: Sequence[tuple[int, int]],
                    lhs_dilate: Sequence[int], rhs_dilate: Sequence[int],
                    groups: int = 1, batch_groups: int = 1) -> V:
        """`layout` as StableHLO prints dimension numbers: "[b, f, 0, 1]x[o, i, 0, 1]->[...]";
        `groups` is the feature_group_count, `batch_groups` the batch_group_count."""
        pads = ", ".join(f"[{lo}, {hi}]" for lo, hi in pad)
        return self._op(
            f"stablehlo.convolution({lhs.name}, {rhs.name}) dim_numbers = {layout}, "
            f"window = {{stride = {_ints(stride)}, pad = [{pads}], "
            f"lhs_dilate = {_ints(lhs_dilate)}, rhs_dilate = {_ints(rhs_dilate)}}} "
            f"{{batch_group_count = {batch_groups} : i64, feature_group_count = {groups} : i64}} : "
            f"({lhs.type}, {rhs.type}) -> {tensor_type(shape, lhs.dtype)}", shape, lhs.dtype)

    # -- ops with a region -----------------------------------------------------------------

    def _region(self, args: Sequence[np.dtype],
                body: Callable[[Writer, list[V]], list[V]]) -> list[str]:
        """The lines of a one-block region over rank-0 tensors of `args`' dtypes."""
        outer, self.lines, self._indent = self.lines, [], self._indent + "    "
        params = [V(self.fresh(), (), np.dtype(d)) for d in args]
        results = body(self, params)
        returned = ", ".join(r.name for r in results)
        types = ", ".join(r.type for r in results)
        self.lines.append(f"{self._indent}stablehlo.return {returned} : {types}")
        inner, self.lines, self._indent = self.lines, outer, self._indent[:-4]
        header = ", ".join(f"{p.name}: {p.type}" for p in params)
        return [f"{self._indent}  ^bb0({header}):", *inner]

    def _generic(self, name: str, operands: Sequence[V], region: list[str] | None,
                 attributes: str, results: Sequence[tuple[Sequence[int], np.dtype]]) -> list[V]:
        outs = [V(self.fresh(), tuple(s), np.dtype(d)) for s, d in results]
        names = ", ".join(o.name for o in outs) if len(outs) == 1 else \
            f"{outs[0].name}:{len(outs)}"
        if len(outs) > 1:  # %r:2 defines %r#0 and %r#1
            outs = [V(f"{outs[0].name}#{i}", o.shape, o.dtype) for i, o in enumerate(outs)]
        ins = ", ".join(o.name for o in operands)
        types = ", ".join(o.type for o in operands)
        result_types = ", ".join(o.type for o in outs)
        if len(outs) > 1:
            result_types = f"({result_types})"
        head = f'{self._indent}{names} = "stablehlo.{name}"({ins})'
        if region is None:
            self.lines.append(f"{head} {{{attributes}}} : ({types}) -> {result_types}")
        else:
            self.lines.append(f"{head} ({{")
            self.lines.extend(region)
            self.lines.append(f"{self._indent}}}) {{{attributes}}} : ({types}) -> {result_types}")
        return outs

    def reduce(self, inputs: Sequence[V], inits: Sequence[V], dims: Sequence[int],
               body: Callable[[Writer, list[V]], list[V]]) -> list[V]:
        """Reduce `inputs` over `dims`: body(writer, [acc..., x...]) -> [acc'...]."""
        shape = [d for i, d in enumerate(inputs[0].shape) if i not in dims]
        region = self._region([x.dtype for x in inputs] * 2, body)
        return self._generic("reduce", [*inputs, *inits], region,
                             f"dimensions = {_array(dims)}",
                             [(shape, x.dtype) for x in inputs])

    def reduce_window(self, x: V, init: V, window: Sequence[int], strides: Sequence[int],
                      padding: Sequence[tuple[int, int]],
                      body: Callable[[Writer, list[V]], list[V]]) -> V:
        padded = [lo + d + hi for d, (lo, hi) in zip(x.shape, padding, strict=True)]
        shape = [(p - k) // s + 1 for p, k, s in zip(padded, window, strides, strict=True)]
        region = self._region([x.dtype] * 2, body)
        return self._generic("reduce_window", [x, init], region,
                             f"window_dimensions = {_array(window)}, "
                             f"window_strides = {_array(strides)}, padding = {_padding(padding)}",
                             [(shape, x.dtype)])[0]

    def gather(self, x: V, indices: V, axis: int) -> V:
        """numpy.take(x, indices, axis) for indices already in [0, n)."""
        rank_i = len(indices.shape)
        shape = [*x.shape[:axis], *indices.shape, *x.shape[axis + 1:]]
        offset = [*range(axis), *range(axis + rank_i, len(shape))]
        sizes = [1 if i == axis else d for i, d in enumerate(x.shape)]
        numbers = (f"#stablehlo.gather<offset_dims = {_ints(offset)}, collapsed_slice_dims = "
                   f"[{axis}], start_index_map = [{axis}], index_vector_dim = {rank_i}>")
        return self._generic("gather", [x, indices], None,
                             f"dimension_numbers = {numbers}, slice_sizes = {_array(sizes)}, "
                             "indices_are_sorted = false", [(shape, x.dtype)])[0]

    def scatter(self, x: V, indices: V, updates: V, axis: int,
                body: Callable[[Writer, list[V]], list[V]]) -> V:
        """x with each update combined (body(writer, [current, update])) at its index along
        `axis`, for indices in [0, n] (n: skipped; StableHLO leaves other indices outside the
        operand to the implementation, and IREE writes a negative one out of bounds)."""
        rank_i = len(indices.shape)
        window = [*range(axis), *range(axis + rank_i, len(updates.shape))]
        numbers = (f"#stablehlo.scatter<update_window_dims = {_ints(window)}, "
                   f"inserted_window_dims = [{axis}], scatter_dims_to_operand_dims = [{axis}], "
                   f"index_vector_dim = {rank_i}>")
        region = self._region([x.dtype] * 2, body)
        return self._generic("scatter", [x, indices, updates], region,
                             f"scatter_dimension_numbers = {numbers}, "
                             "indices_are_sorted = false, unique_indices = false",
                             [(x.shape, x.dtype)])[0]
