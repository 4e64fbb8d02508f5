"""`tapeml.trace`: a Python function becomes a `Program`, a tape function anyone can print,
parse and run.

The function's argument and result pytrees survive as data on the `func.func`: each argument and
result carries its path (`tapeml.name = "params.lin1.W"`), and the two tree structures are stored
as `tapeml.in_tree` / `tapeml.out_tree`, so a printed program parses back into the same callable.
"""

from __future__ import annotations

import inspect
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.parser import Parser

import tapeml.tracing.ops  # noqa: F401 (gives tracers numpy's operators)
from tapeml import checks
from tapeml.dialects import tape
from tapeml.dialects.dominance import verify_dominance
from tapeml.dialects.names import (
    FITS_ATTR,
    IN_TREE_ATTR,
    NAME_ATTR,
    OUT_TREE_ATTR,
    argument_fits,
    attr_text,
    ssa_name,
    value_names,
)
from tapeml.errors import ShapeError, TracingError, a_or_an
from tapeml.frontend.flops import op_flops
from tapeml.interpreters import interpret
from tapeml.profile import count_ops, record
from tapeml.tracing.ops.promotion import to_dtype, user_shape
from tapeml.tracing.pytree import LEAF, TreeDef, flatten, leaf_paths, unflatten
from tapeml.tracing.trace import (
    Tracer,
    as_array,
    at_user_line,
    bind,
    is_weak_scalar,
    new_trace,
    runtime_leaf,
)


@dataclass(frozen=True)
class Spec:
    """A shape and dtype standing for an array: what `trace` and `eval_shape` need, no data."""

    shape: tuple[int, ...]
    dtype: np.dtype = np.dtype(np.float32)

    def __init__(self, shape: Any, dtype: Any = np.float32) -> None:
        object.__setattr__(self, "shape", user_shape("Spec", shape))
        object.__setattr__(self, "dtype", np.dtype(dtype))

    @classmethod
    def of(cls, x: Any) -> Spec:
        if isinstance(x, Spec):
            return x
        if isinstance(x, Tracer) or is_device_array(x):
            return cls(x.shape, x.dtype)
        array = as_array(x)
        return cls(array.shape, array.dtype)

    def __repr__(self) -> str:
        return f"Spec({self.shape}, {self.dtype.name})"


def is_device_array(x: Any) -> bool:
    """An array on a device (backend="cuda"'s DeviceArray): it has a shape, a dtype and
    `.numpy()`, and is traced by its shape and dtype alone."""
    return (not isinstance(x, np.ndarray) and hasattr(x, "numpy") and hasattr(x, "shape")
            and hasattr(x, "dtype"))


def argument_paths(fn: Callable, args: tuple, kwargs: dict) -> list[str]:
    """A path per leaf of (args, kwargs), starting from the parameter names of `fn`."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    paths: list[str] = []
    for i, arg in enumerate(args):
        name = positional[i] if i < len(positional) else f"arg{i}"
        paths += leaf_paths(flatten(arg)[1], name)
    for key in sorted(kwargs):
        paths += leaf_paths(flatten(kwargs[key])[1], key)
    return paths


def trace(fn: Callable, *example_args: Any, **example_kwargs: Any) -> Program:
    """Run `fn` once on tracers shaped like the example arguments and record its tape program.

    Arguments and results are pytrees (tuples, lists, dicts, None) of numpy arrays, numpy
    scalars, Python numbers or `Spec`s. A Python int or float is a weak scalar (see `Tracer`):
    an int64 or float64 argument that takes the dtype of the arrays it meets. Arrays `fn` reads
    from its enclosing scope become `tape.constant` ops.
    """
    return trace_with(fn, example_args, example_kwargs)


def trace_with(fn: Callable, example_args: tuple, example_kwargs: dict,
               verify: bool = True) -> Program:
    """`trace`; not `verify`ing the module, for a program whose ops another trace takes in
    and verifies with its own (`Program.call_once` on tracers). The module is verified only
    where TAPEML_CHECKS asks (tapeml/checks.py): each op was checked as it was built."""
    started = time.perf_counter()
    leaves, in_tree = flatten((example_args, example_kwargs))
    paths = argument_paths(fn, example_args, example_kwargs)
    specs, weak = [], []
    for path, leaf in zip(paths, leaves, strict=True):
        if is_device_array(leaf):
            leaf = Spec(leaf.shape, leaf.dtype)
        if not isinstance(leaf, Spec | Tracer | np.ndarray | np.generic | float | int):
            raise TracingError(f"trace: argument `{path}` is {a_or_an(type(leaf).__name__)}; "
                               "arguments must be arrays, floats or tapeml.Spec (close over "
                               "anything else)")
        weak.append(is_weak_scalar(leaf) or (isinstance(leaf, Tracer) and leaf.weak))
        if isinstance(leaf, Spec | Tracer):
            spec = Spec.of(leaf)
        elif weak[-1]:  # all of a Python number, whatever it meets
            spec = Spec((), np.float64 if isinstance(leaf, float) else np.int64)
        else:
            spec = Spec(np.shape(leaf), np.result_type(leaf))
        if spec.dtype not in tape.ELEMENT_TYPES:
            raise TracingError(f"trace: argument `{path}` has dtype {spec.dtype}; tape tensors "
                               "hold bool, int32, int64, float32 or float64 (convert it with "
                               ".astype)")
        specs.append(spec)
    block = Block(arg_types=[tape.tensor_type(s.shape, s.dtype) for s in specs])
    for arg, path in zip(block.args, paths, strict=True):
        arg.name_hint = ssa_name(path)
    with new_trace(block) as tr:
        tracers = [Tracer(a, tr, w) for a, w in zip(block.args, weak, strict=True)]
        args, kwargs = unflatten(in_tree, tracers)
        out = fn(*args, **kwargs)
        out_leaves, out_tree = flatten(out)
        results = [tr.operand(_checked_result(x, p))
                   for x, p in zip(out_leaves, leaf_paths(out_tree, "result"), strict=True)]
    for value, path in zip(results, leaf_paths(out_tree, "result"), strict=True):
        if value.name_hint is None:  # name what the function returns after its path
            value.name_hint = ssa_name(path)
    block.add_op(func.ReturnOp(*results))
    name = ssa_name(getattr(fn, "__name__", "f")) or "f"
    fits = [str(tr.fits[a]) if w and a in tr.fits else None
            for a, w in zip(block.args, weak, strict=True)]
    f = func.FuncOp(name, ([a.type for a in block.args], [r.type for r in results]),
                    Region(block), arg_attrs=_names(paths, fits),
                    res_attrs=_names(leaf_paths(out_tree, "result")))
    f.attributes[IN_TREE_ATTR] = StringAttr(in_tree.to_text())
    f.attributes[OUT_TREE_ATTR] = StringAttr(out_tree.to_text())
    module = ModuleOp([f])
    if verify and checks.enabled():
        module.verify()
    record(f"trace {name}", lambda: count_ops(module, top_level=True), started)
    return Program(module)


def _checked_result(x: Any, path: str) -> Any:
    if isinstance(x, Tracer) and x.weak:  # a weak value leaves as a Python number's dtype
        return bind(tape.CastOp, x, dtype=np.dtype(np.float32)) if x.dtype.kind == "f" else x
    if isinstance(x, Tracer | np.ndarray | np.generic | float | int):
        return x
    raise TracingError(at_user_line(f"trace: result `{path}` is {a_or_an(type(x).__name__)}; "
                                    "results must be arrays or tracers"))


def _names(paths: Any, fits: list[str | None] | None = None) -> ArrayAttr:
    """Each value's tapeml.name, and where given, its tapeml.fits."""
    paths = list(paths)
    fits = fits or [None] * len(paths)
    return ArrayAttr([DictionaryAttr({NAME_ATTR: StringAttr(p)} |
                                     ({FITS_ATTR: StringAttr(t)} if t else {}))
                      for p, t in zip(paths, fits, strict=True)])


def eval_shape(fn: Callable, *specs: Any, **kwspecs: Any) -> Any:
    """The output pytree of `fn` as `Spec`s, found by tracing, without computing anything."""
    return trace(fn, *specs, **kwspecs).shapes


def _context() -> Context:
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, tape.Tape):
        ctx.load_dialect(dialect)
    return ctx


class Program:
    """A traced (or parsed) tape function: print it, run it, ask its shapes."""

    def __init__(self, module: ModuleOp, name: str | None = None) -> None:
        functions = [op for op in module.ops if isinstance(op, func.FuncOp)]
        if not functions:
            raise ValueError("the module holds no func.func")
        named = [f for f in functions if f.sym_name.data == name] if name else functions[:1]
        if not named:
            known = ", ".join(f"@{f.sym_name.data}" for f in functions)
            raise ValueError(f"no function @{name} in the module (functions: {known})")
        self.module = module
        self.function = named[0]

    @property
    def in_tree(self) -> TreeDef:
        """The structure of (args, kwargs), as stored on the function (flat if it is not)."""
        n_in = len(self.function.function_type.inputs)
        flat = TreeDef("tuple", tuple(range(n_in)), (LEAF,) * n_in)
        return self._tree(IN_TREE_ATTR, TreeDef("tuple", (0, 1), (flat, TreeDef("dict"))))

    @property
    def out_tree(self) -> TreeDef:
        """The structure of the results, as stored on the function (flat if it is not)."""
        n_out = len(self.function.function_type.outputs)
        return self._tree(OUT_TREE_ATTR, LEAF if n_out == 1 else TreeDef(
            "tuple", tuple(range(n_out)), (LEAF,) * n_out))

    def _tree(self, attr: str, default: TreeDef) -> TreeDef:
        text = attr_text(self.function.attributes.get(attr))
        return TreeDef.from_text(text) if text is not None else default

    @classmethod
    def parse(cls, text: str, name: str | None = None) -> Program:
        """The program printed as `text` (its first function, or the one called `name`)."""
        module = Parser(_context(), text, "program").parse_module()
        module.verify()
        verify_dominance(module)
        return cls(module, name)

    @property
    def name(self) -> str:
        return self.function.sym_name.data

    def __str__(self) -> str:
        return str(self.module)

    def __repr__(self) -> str:
        return f"<tapeml.Program @{self.name}: {self.in_tree} -> {self.out_tree}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run on xDSL's interpreter; arguments must have the traced structure and shapes.
        Called on tracers (inside another trace), the program's ops are recorded there."""
        leaves, tree = flatten((args, kwargs))
        if tree != self.in_tree:
            raise TypeError(f"@{self.name} was traced for arguments structured as "
                            f"{self.in_tree}, got {tree}")
        if any(isinstance(leaf, Spec) for leaf in leaves):
            raise TypeError(f"@{self.name} needs arrays to run on; for shapes, use "
                            ".shapes or tapeml.eval_shape")
        if any(isinstance(leaf, Tracer) for leaf in leaves):
            return unflatten(self.out_tree, self._replay(leaves))
        for leaf, fits, name in zip(leaves, argument_fits(self.function.arg_attrs, len(leaves)),
                                    self.function.body.block.args, strict=True):
            if fits is not None and is_weak_scalar(leaf) and \
                    not (info := np.iinfo(fits)).min <= leaf <= info.max:
                raise OverflowError(f"@{self.name}: argument `{name.name_hint}`, the Python "
                                    f"integer {leaf}, does not fit in {fits}, the dtype it meets")
        results = interpret(self.module, self.name, *(runtime_leaf(x) for x in leaves))
        return unflatten(self.out_tree, list(results))

    def call_once(self, *args: Any, **kwargs: Any) -> Any:
        """Calling it, for a program made to be called this once (`grad`'s): on tracers whose
        types are its arguments', its ops move into their trace instead of being copied, and
        the program is left empty."""
        leaves, tree = flatten((args, kwargs))
        if tree == self.in_tree and self._takes_as_it_is(leaves):
            return unflatten(self.out_tree, self._move_into(leaves))
        return self(*args, **kwargs)

    def _takes_as_it_is(self, leaves: list[Any]) -> bool:
        """The leaves include tracers, and every leaf has its argument's type: the program's
        ops are valid in their trace as they are."""
        block = self.function.body.block
        return any(isinstance(x, Tracer) for x in leaves) and all(
            x.value.type == arg.type if isinstance(x, Tracer) else
            np.shape(x) == arg.type.get_shape() and (
                not isinstance(x, np.ndarray | np.generic)  # a Python number takes its type
                or x.dtype.newbyteorder("=") == tape.dtype_of(arg.type))
            for arg, x in zip(block.args, leaves, strict=True))

    def _carry_fits(self, leaves: list[Any]) -> None:
        """A weak leaf given to an argument that must fit a narrower integer (tapeml.fits: the
        program's ops convert it) must fit it in the leaves' trace too: noted there."""
        fits = argument_fits(self.function.arg_attrs, len(leaves))
        for leaf, dtype in zip(leaves, fits, strict=True):
            if dtype is not None and isinstance(leaf, Tracer) and leaf.weak:
                leaf.trace.narrowed(leaf.value, np.dtype(dtype))

    def _arguments_in(self, trace: Any, leaves: list[Any]) -> dict[SSAValue, SSAValue]:
        """Each argument of the program, mapped to its leaf's value in `trace`."""
        self._carry_fits(leaves)
        return {arg: trace.operand(leaf if isinstance(leaf, Tracer) else
                                   np.asarray(leaf, dtype=tape.dtype_of(arg.type)))
                for arg, leaf in zip(self.function.body.block.args, leaves, strict=True)}

    def _move_into(self, leaves: list[Any]) -> list[Tracer]:
        """The program's ops moved into the leaves' trace (`call_once`); its results."""
        trace = next(x.trace for x in leaves if isinstance(x, Tracer))
        block = self.function.body.block
        for arg, value in self._arguments_in(trace, leaves).items():
            arg.replace_all_uses_with(value)
        for op in list(block.ops):
            if isinstance(op, func.ReturnOp):
                results = [Tracer(v, trace) for v in op.arguments]
                block.erase_op(op)
                return results
            self._insert(trace, block.detach_op(self._replayable(op)))
        raise TracingError(f"@{self.name} does not end in func.return")

    def _replayable(self, op: Operation) -> Operation:
        if not isinstance(op, tape.TapeOp):
            what = (f"a call of @{op.callee.string_value()}" if isinstance(op, func.CallOp)
                    else op.name)
            raise TracingError(at_user_line(
                f"@{self.name} holds {what}: a program is jitted, differentiated or called "
                "inside a trace as tape ops only (inline calls into one function first)"))
        return op

    @staticmethod
    def _insert(trace: Any, op: Operation) -> None:
        """`op` (moved or cloned) at the end of `trace`: its results named there, as bound
        ops are; at the trace's location where it has one."""
        for result in op.results:
            result.name_hint = None
        if trace.location is not None:
            op.location = trace.location
        trace.builder.insert(op)

    def _replay(self, leaves: list[Any]) -> list[Any]:
        """Apply the program's ops to `leaves` (tracers or arrays): cloned into the tracers'
        trace where every leaf has its argument's type (the program is valid there as it
        is: `grad` inside `jit` replays the whole differentiated step so), else one by one
        with `bind`, which checks each op's shapes again."""
        block = self.function.body.block
        trace = next((x.trace for x in leaves if isinstance(x, Tracer)), None)
        if self._takes_as_it_is(leaves):
            return self._clone_into(trace, leaves)
        leaves = self._checked(leaves)
        self._carry_fits(leaves)
        env: dict[SSAValue, Any] = {}
        for arg, leaf in zip(block.args, leaves, strict=True):
            env[arg] = leaf if isinstance(leaf, Tracer) else \
                np.asarray(leaf, dtype=tape.dtype_of(arg.type))
        for op in block.ops:
            if isinstance(op, func.ReturnOp):
                return [env[v] for v in op.arguments]
            self._replayable(op)
            env[op.results[0]] = bind(type(op), *(env[o] for o in op.operands), **op.params)
        raise TracingError(f"@{self.name} does not end in func.return")

    def _checked(self, leaves: list[Any]) -> list[Any]:
        """The leaves, checked against the arguments as the interpreter checks its arguments:
        of another shape, or an array or tracer of another dtype, a ShapeError or TypeError at
        the user's line (the program's ops hold its shapes, a slice's bounds, a broadcast's
        result: replayed on others they would compute something else, or fail inside the
        program); a Python number (a weak tracer too) takes the argument's dtype."""
        f = self.function
        names = value_names(f.arg_attrs, list(f.body.block.args), "arg")
        out = []
        for i, (arg, leaf, name) in enumerate(zip(f.body.block.args, leaves, names,
                                                  strict=True)):
            where = f"@{self.name}: argument {i} (`{name}`)"
            shape = tuple(leaf.shape) if isinstance(leaf, Tracer) else np.shape(leaf)
            if shape != arg.type.get_shape():
                raise ShapeError(at_user_line(
                    f"{where} must have shape {arg.type.get_shape()}, the shape it was traced "
                    f"(or loaded) with, got {shape}"))
            dtype = tape.dtype_of(arg.type)
            if isinstance(leaf, np.ndarray | np.generic) and \
                    leaf.dtype.newbyteorder("=") != dtype:
                raise TypeError(at_user_line(f"{where} must have dtype {dtype}, the dtype it was "
                                             f"traced (or loaded) with, got {leaf.dtype}"))
            if isinstance(leaf, Tracer) and np.dtype(leaf.dtype) != dtype:
                if not leaf.weak:
                    raise TypeError(at_user_line(f"{where} must have dtype {dtype}, the dtype "
                                                 f"it was traced (or loaded) with, got "
                                                 f"{np.dtype(leaf.dtype)}"))
                leaf = to_dtype(f"@{self.name}", leaf, dtype)
            out.append(leaf)
        return out

    def _clone_into(self, trace: Any, leaves: list[Any]) -> list[Tracer]:
        """The program's ops cloned into `trace`, its arguments bound to `leaves`; its results.
        Each op keeps its own location (the user's line it was traced at)."""
        block = self.function.body.block
        mapping = self._arguments_in(trace, leaves)
        for op in block.ops:
            if isinstance(op, func.ReturnOp):
                return [Tracer(mapping[v], trace) for v in op.arguments]
            # the clone maps its results too, for the ops after it
            self._insert(trace, self._replayable(op).clone(value_mapper=mapping))
        raise TracingError(f"@{self.name} does not end in func.return")

    def set_trees(self, in_tree: TreeDef, out_tree: TreeDef) -> None:
        """Give the function new argument/result structures (after a pass changed them)."""
        self.function.attributes[IN_TREE_ATTR] = StringAttr(in_tree.to_text())
        self.function.attributes[OUT_TREE_ATTR] = StringAttr(out_tree.to_text())

    @property
    def input_shapes(self) -> Any:
        """The argument pytree (args, kwargs) as `Spec`s."""
        return unflatten(self.in_tree, [_spec(t) for t in self.function.function_type.inputs])

    @property
    def shapes(self) -> Any:
        """The output pytree as `Spec`s."""
        return unflatten(self.out_tree, [_spec(t) for t in self.function.function_type.outputs])


    def as_stablehlo(self, fuse: bool = True) -> str:
        """The program as upstream StableHLO text (`func.func @main`), for IREE, XLA or any
        compiler that reads it; after tape-fuse unless `fuse=False`, so the idioms it raises
        (a convolution written as pad, unfold and a product) are one StableHLO op."""
        from tapeml.stablehlo import emit
        from tapeml.transforms.fuse import fuse as fuse_module

        module = self.module.clone()
        if fuse:
            fuse_module(module)
        return emit(module, self.name)

    def summary(self) -> str:
        """A table of op counts, FLOPs, the arguments' elements by name prefix (the program
        cannot tell a model's parameters from its data: both are arguments) and I/O bytes."""
        f = self.function
        ops = [op for op in f.walk() if isinstance(op, tape.TapeOp)]
        counts = Counter(op.name for op in ops)
        flops: defaultdict[str, int] = defaultdict(int)
        for op in ops:
            flops[op.name] += op_flops(op)
        inputs = list(f.function_type.inputs)
        outputs = list(f.function_type.outputs)
        in_paths = value_names(f.arg_attrs, list(f.body.block.args), "arg")
        arguments: defaultdict[str, int] = defaultdict(int)
        for path, t in zip(in_paths, inputs, strict=True):
            arguments[path.rsplit(".", 1)[0] if "." in path else path] += _numel(t)
        lines = [f"program @{self.name}: {len(ops)} tape ops, "
                 f"{sum(flops.values()):,} FLOPs"]
        lines.append(f"  {'op':<18}{'count':>7}{'FLOPs':>16}")
        for name in sorted(counts):
            lines.append(f"  {name:<18}{counts[name]:>7}{flops[name]:>16,}")
        lines.append(f"  {'arguments':<18}{'':>7}{'elements':>16}")
        for prefix in sorted(arguments):
            lines.append(f"  {prefix:<18}{'':>7}{arguments[prefix]:>16,}")
        lines.append(f"  inputs {_bytes(inputs):,} bytes, outputs {_bytes(outputs):,} bytes")
        return "\n".join(lines)


def _spec(t: Any) -> Spec:
    return Spec(t.get_shape(), tape.dtype_of(t))


def _numel(t: TensorType) -> int:
    return math.prod(t.get_shape())


def _bytes(types: list[Any]) -> int:
    return sum(_numel(t) * tape.dtype_of(t).itemsize for t in types)
