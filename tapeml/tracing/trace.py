"""Tracing: tracers stand in for arrays, and every primitive call records one tape op.

`bind(Op, *operands, **params)` is the one place a primitive is applied. Outside a trace it
computes eagerly with the op's numpy semantics (after the same shape rule); inside a trace it
builds the op with the xDSL builder and returns a `Tracer` for its result. Either way a broken
shape rule is a `ShapeError` that names the user's source line.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from xdsl.builder import Builder, InsertPoint
from xdsl.dialects.builtin import FileLineColLoc, IntAttr, StringAttr, TensorType
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue

from tapeml.dialects import tape
from tapeml.dialects.base import TapeOp
from tapeml.errors import ShapeError, TracingError
from tapeml.interpreters.tape import ieee

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tapeml/


@dataclass(frozen=True)
class SourceLine:
    filename: str
    line: int
    text: str

    def __str__(self) -> str:
        where = f"{self.filename}:{self.line}"
        return f"{where}: {self.text}" if self.text else where


@functools.lru_cache(maxsize=4096)
def _in_package(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep)


def _user_frame() -> Any:
    """The innermost stack frame outside the tapeml package (None: there is none)."""
    frame = sys._getframe(1)  # (its caller: tapeml's own, as every frame up to the user's)
    while frame is not None and _in_package(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_frame() -> SourceLine | None:
    """The innermost stack frame outside the tapeml package: the user's line."""
    import linecache

    frame = _user_frame()
    if frame is None:
        return None
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return SourceLine(frame.f_code.co_filename, frame.f_lineno, text)


@functools.lru_cache(maxsize=4096)
def _location(filename: str, line: int) -> FileLineColLoc:
    """A traced op's location, one attribute per line (attributes are immutable)."""
    return FileLineColLoc(StringAttr(filename), IntAttr(line), IntAttr(0))


def at_user_line(message: str) -> str:
    where = user_frame()
    return f"{message}\n  at {where}" if where else message


def called_op(default: str) -> str:
    """The name of the op the user's line called, for a message: of the frames inside the
    package, the outermost that is a public function of an ops module (tapeml/tracing/ops/,
    nn.py): `softmax` for the max that softmax takes, also where softmax was handed to trace,
    jit or eval_shape; `default` where there is none. The function asking is not counted
    (user_shape, asking for zeros or Spec)."""
    frame, named = sys._getframe(2), default
    while frame is not None and _in_package(filename := frame.f_code.co_filename):
        code = frame.f_code
        if filename.startswith(_OPS_FILES) and not code.co_name.startswith("_") and \
                getattr(frame.f_globals.get(code.co_name), "__code__", None) is code:
            named = code.co_name
        frame = frame.f_back
    return named


_OPS_FILES = (os.path.join(_PACKAGE_DIR, "tracing", "ops") + os.sep,
              os.path.join(_PACKAGE_DIR, "frontend", "nn.py"))


@dataclass(eq=False)
class Trace:
    """Where recorded ops go (the end of `block`, or before `before`), and which tracers are
    live. `location`, when set, is given to every op recorded (a pass recording the backward of
    a forward op gives them the forward op's location); otherwise each op gets the user's line."""

    block: Block
    before: Operation | None = None
    location: Attribute | None = None
    builder: Builder = field(init=False)
    active: bool = True
    fits: dict[BlockArgument, np.dtype] = field(default_factory=dict)
    """The block's arguments whose values reach a weak integer made narrower (`narrowed`)."""

    def __post_init__(self) -> None:
        point = InsertPoint.before(self.before) if self.before else InsertPoint.at_end(self.block)
        self.builder = Builder(point)

    def narrowed(self, value: SSAValue, dtype: np.dtype) -> None:
        """A weak integer `value` (i64, computed from Python ints only) converted to `dtype`:
        the block's arguments it is computed from must fit in it (a Python int argument that
        does not is an OverflowError at the call, as it is where its value is known)."""
        stack, seen = [value], set()
        while stack:
            v = stack.pop()
            if v in seen or v.type.get_element_type() != value.type.get_element_type():
                continue  # (a comparison's or a where's condition, a float: no Python int)
            seen.add(v)
            if isinstance(v, BlockArgument) and v.block is self.block:
                self.fits[v] = dtype
            elif isinstance(v.owner, Operation):
                stack.extend(v.owner.operands)

    def insert(self, op: TapeOp) -> Tracer:
        if self.location is not None:
            op.location = self.location
        elif (frame := _user_frame()) is not None:
            op.location = _location(frame.f_code.co_filename, frame.f_lineno)
        self.builder.insert(op)
        return Tracer(op.results[0], self)

    def operand(self, x: Any) -> SSAValue:
        """The SSA value standing for `x` in this trace: a tracer's own, or a constant."""
        if isinstance(x, Tracer):
            if x.trace is not self or not self.active:
                raise TracingError(at_user_line(
                    "a tracer from another (or a finished) trace was used here; return it "
                    "from the traced function instead of keeping it, and pass an outer "
                    "function's array to an inner trace/grad/jit as an argument, not by "
                    "closure"))
            return x.value
        return self.insert(tape.ConstantOp.build(value=as_array(x))).value


_TRACES: list[Trace] = []

_STATIC_QUERIES = {np.shape: lambda t: tuple(t.shape), np.ndim: lambda t: t.ndim,
                   np.size: lambda t: t.size}
"""The numpy functions of a tracer that need no values (np.shape(t) is t.shape, as numpy's)."""


@contextmanager
def new_trace(block: Block, before: Operation | None = None) -> Iterator[Trace]:
    """A trace recording into `block` (before `before`, if given) while the context lasts."""
    trace = Trace(block, before)
    _TRACES.append(trace)
    try:
        yield trace
    finally:
        trace.active = False
        _TRACES.pop()


def canonical_dtype(dtype: np.dtype) -> np.dtype:
    """The tape dtype holding numpy `dtype`'s values: itself for bool, int32, int64, float32 and
    float64; int32 for the narrower integers, int64 for uint32, float32 for float16. A
    TypeError for anything else (uint64 does not fit in int64; complex, strings, objects). In
    the machine's byte order (an array in the other is converted, as a jit argument is)."""
    if dtype in tape.ELEMENT_TYPES:
        return dtype
    if not dtype.isnative:
        return canonical_dtype(dtype.newbyteorder("="))
    if dtype.kind in "iu" and dtype.itemsize < 4:
        return np.dtype(np.int32)
    if dtype == np.uint32:
        return np.dtype(np.int64)
    if dtype == np.float16:
        return np.dtype(np.float32)
    raise TypeError(at_user_line(f"tape tensors hold bool, int32, int64, float32 or float64, "
                                 f"got {dtype}"))


def as_array(x: Any) -> np.ndarray:
    """`x` as a numpy array of a tape dtype (see `canonical_dtype`). Python scalars and lists
    keep their kind: bool, int64 or float32 (a Python float), as numpy makes them except for
    the float; the operations of tapeml.ops give them weak types instead (see its promotion)."""
    if isinstance(x, Tracer):
        raise TracingError(at_user_line("a tracer cannot be turned into an array"))
    if isinstance(x, np.ndarray | np.generic):
        array = np.asarray(x)
    elif isinstance(x, float):
        array = np.asarray(x, dtype=np.float32)
    elif isinstance(x, bool | int):
        try:
            array = np.asarray(x, dtype=np.bool_ if isinstance(x, bool) else np.int64)
        except OverflowError:
            raise OverflowError(at_user_line(f"the Python integer {x} does not fit in "
                                             "int64")) from None
    elif x is None:
        raise TypeError(at_user_line("None is not an array (an argument passed as None is an "
                                     "empty pytree: it holds no array)"))
    else:
        tracers = [leaf for leaf in _nested_leaves(x) if isinstance(leaf, Tracer)] \
            if isinstance(x, list | tuple) else []
        if tracers:
            raise TracingError(at_user_line(_passed_as_list(tracers) or (
                "a list or tuple holding tracers is not an array; make one with "
                "tapeml.stack([...]) or tapeml.concatenate([...])")))
        array = np.asarray(x)
    dtype = canonical_dtype(array.dtype)
    return array if array.dtype == dtype else array.astype(dtype)


def _passed_as_list(tracers: list[Tracer]) -> str:
    """Which argument a list of tracers is, when it is one: a list (or tuple) passed to a
    traced function is a pytree, each element an argument of its own (x.0, x.1, ...). Only
    where the list holds every leaf of one argument's container, in order, under index paths;
    a list the function builds of its arguments' leaves is another mistake."""
    values = [t.value for t in tracers]
    if not all(isinstance(v, BlockArgument) and v.name_hint for v in values):
        return ""
    paths = [v.name_hint.split(".") for v in values]
    common = paths[0][:min(len(p) for p in paths) - 1]
    while any(p[:len(common)] != common for p in paths):
        common = common[:-1]
    if not common or not all(part.isdigit() for p in paths for part in p[len(common):]):
        return ""
    root = ".".join(common)
    leaves = [a for a in values[0].block.args if (a.name_hint or "").startswith(root + ".")]
    if len(leaves) != len(values) or any(a is not v for a, v in zip(leaves, values, strict=True)):
        return ""
    return (f"`{root}` came as a list, which a traced function takes as a pytree, each element "
            "an argument of its own, not as one array: pass np.asarray(...) for an array (or "
            "make one inside with tapeml.stack([...]))")


def _nested_leaves(x: Any) -> Iterator[Any]:
    for item in x:
        if isinstance(item, list | tuple):
            yield from _nested_leaves(item)
        else:
            yield item


def _type_of(x: Any) -> TensorType:
    return x.value.type if isinstance(x, Tracer) else tape.tensor_type(x.shape, x.dtype)


_CHECKED: dict[tuple, dict[str, Any]] = {}


def _checked(op_type: type[TapeOp], arrays: list[np.ndarray], params: dict[str, Any]
             ) -> dict[str, Any]:
    """`params` normalized, once the op is known to accept these operands (its verifier's
    checks, on types); remembered by op, shapes, dtypes and params, so an eager op repeated on
    arrays of one shape pays for the checks once (building the types costs more than a small
    op)."""
    try:
        key = (op_type, *[(a.shape, a.dtype) for a in arrays],
               *[(name, _exactly(value)) for name, value in params.items()])
        found = _CHECKED.get(key)
    except TypeError:  # an unhashable parameter: checked every time
        key, found = None, None
    if found is not None:
        return found
    types = [_type_of(a) for a in arrays]
    try:
        params = op_type.normalize(types, params)
        op_type.infer(*types, **params)
    except ShapeError as error:
        raise ShapeError(at_user_line(str(error))) from None
    if key is not None:
        if len(_CHECKED) >= 4096:
            _CHECKED.clear()
        _CHECKED[key] = params
    return params


def _exactly(value: Any) -> Any:
    """A key that tells apart what == does not: 1, 1.0 and True; 0.0 and -0.0."""
    kind = type(value)
    if kind is float:
        return value.hex()
    if kind is tuple or kind is list:
        return (kind, *map(_exactly, value))
    return (kind, value)


def bind(op_type: type[TapeOp], *operands: Any, **params: Any) -> Any:
    """Apply a primitive: record it under a trace, or compute it on arrays."""
    for x in operands:
        if type(x) is Tracer:
            trace = x.trace
            break
    else:
        if not operands and _TRACES and _TRACES[-1].active:
            trace = _TRACES[-1]  # an op of no operands (tape.iota) joins the trace it is in
        else:
            arrays = [x if type(x) is np.ndarray and x.dtype in tape.ELEMENT_TYPES else
                      as_array(x)
                      for x in operands]
            return ieee(op_type)(*arrays, **_checked(op_type, arrays, params))
    values = [trace.operand(x) for x in operands]
    try:
        op = op_type.build(*values, **params)
    except ShapeError as error:
        raise ShapeError(at_user_line(str(error))) from None
    return trace.insert(op)


def is_weak_scalar(x: Any) -> bool:
    """A Python int or float (not a bool, not a numpy scalar): traced as a *weak* scalar, which
    takes the dtype of the arrays it meets (JAX's weak types; see tapeml.tracing.ops.promotion)."""
    return isinstance(x, int | float) and not isinstance(x, bool | np.generic)


def runtime_leaf(x: Any) -> Any:
    """A weak scalar as the int64 or float64 its traced argument is; anything else as it is."""
    if not is_weak_scalar(x):
        return x
    return np.float64(x) if isinstance(x, float) else as_array(x)[()]


class Tracer:
    """Stands for an array while a function is traced: it has a shape and a dtype, no values.

    A *weak* tracer stands for a Python number passed as an argument: it is traced as an int64
    or float64 scalar, so no digit is lost, and it takes the dtype of any non-weak array it
    meets (a float32 program stays float32, a float64 one gets the full 0.1; see
    tapeml.tracing.ops.promotion); ops on weak values only stay weak, and a weak result comes
    out as int64 or float32, the dtypes of a Python int and a Python float."""

    __slots__ = ("trace", "value", "weak")

    def __init__(self, value: SSAValue, trace: Trace, weak: bool = False) -> None:
        self.value = value
        self.trace = trace
        self.weak = weak

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.type.get_shape()

    @property
    def dtype(self) -> np.dtype:
        return tape.dtype_of(self.value.type)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a rank-0 tracer")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"Tracer({self.value.type}{', weak' if self.weak else ''})"

    # -- reading a value is what a trace cannot do -------------------------------------------

    def _no_value(self, what: str) -> TracingError:
        return TracingError(at_user_line(
            f"{what} needs the value of a {self.value.type} tracer, which a trace does not "
            f"have; use tapeml.where / tapeml.maximum for data-dependent choices, or compute "
            f"it outside the traced function"))

    def __bool__(self) -> bool:
        raise self._no_value("bool() (an `if`, `and`, `or` or `while` on a tracer)")

    def __float__(self) -> float:
        raise self._no_value("float()")

    def __int__(self) -> int:
        raise self._no_value("int()")

    def __index__(self) -> int:
        raise self._no_value("using a tracer as an index")

    def __complex__(self) -> complex:
        raise self._no_value("complex()")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise self._no_value("np.asarray()")

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """numpy ufuncs on tracers run as the tapeml op of the same name (np.exp(t), and the
        operators of numpy scalars and arrays meeting a tracer: `np.float32(2) * t`)."""
        from tapeml.tracing import ops

        name = {"absolute": "abs", "true_divide": "divide"}.get(ufunc.__name__, ufunc.__name__)
        fn = getattr(ops, name, None) if method == "__call__" and not kwargs else None
        if fn is None:
            raise TracingError(at_user_line(
                f"numpy.{ufunc.__name__}{'.' + method if method != '__call__' else ''} has no "
                "tapeml op to trace it with; use the tapeml ops"))
        return fn(*inputs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        from tapeml.tracing import ops

        if func in _STATIC_QUERIES and args and args[0] is self and len(args) == 1 and \
                not kwargs:
            return _STATIC_QUERIES[func](self)  # numpy's np.shape(t): what t knows statically
        if hasattr(ops, func.__name__):
            advice = f"use tapeml.{func.__name__}"
        else:
            advice = (f"tapeml has no {func.__name__} yet: write it with tapeml's ops "
                      "(tapeml.ops lists them)")
        raise TracingError(at_user_line(
            f"numpy.{func.__name__} cannot run on a tracer; {advice}"))

    def tolist(self) -> list:
        raise self._no_value("tolist()")

    def item(self) -> float:
        raise self._no_value("item()")

    def __hash__(self) -> int:
        return id(self)
