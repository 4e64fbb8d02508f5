"""`tape-differentiate`: reverse-mode autodiff as an IR transformation.

The pass appends the backward ops to the function itself, below the forward ops (which it does
not touch), and makes the function return its original results followed by the gradients:

    func.func @f(%x, %w) -> (loss)          func.func @f(%x, %w) -> (loss, d loss/d x, d loss/d w)
      forward ops                 ==>          forward ops (unchanged)
      func.return %loss                        backward ops (one pullback per forward op)
                                               func.return %loss, %dx, %dw

Each forward op's pullback (`tapeml/transforms/pullbacks/`) is applied to tracers bound to the
function's SSA values, so the backward ops are recorded exactly as a traced function's would be.
The backward ops carry the location of the forward op they differentiate.

Only float values carry cotangents: an integer or boolean value (token ids, a mask, a count)
stops them, the gradient with respect to an integer argument is zeros of its type (JAX's
`float0`), and an integer result cannot be differentiated.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    MemRefType,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException

from tapeml.dialects import tape
from tapeml.dialects.base import TapeOp
from tapeml.dialects.names import (
    IN_TREE_ATTR,
    NAME_ATTR,
    OUT_TREE_ATTR,
    attr_text,
    value_names,
)
from tapeml.profile import record
from tapeml.tracing import ops
from tapeml.tracing.pytree import LEAF, TreeDef
from tapeml.tracing.trace import Trace, Tracer, new_trace
from tapeml.transforms.pullbacks import NON_DIFFERENTIABLE, PULLBACKS


class DifferentiateError(DiagnosticException):
    """The function cannot be differentiated as asked (bad options, an op with no rule)."""


def _pick_function(module: ModuleOp, name: str) -> func.FuncOp:
    """The function called `name`, or the first with a body (declarations have none)."""
    functions = [op for op in module.ops if isinstance(op, func.FuncOp)]
    for f in functions:
        if name and f.sym_name.data == name:
            if not f.body.blocks:
                raise DifferentiateError(f"tape-differentiate: @{name} is a declaration; "
                                         "only a function with a body can be differentiated")
            return f
        if not name and f.body.blocks:
            return f
    known = ", ".join(f"@{f.sym_name.data}" for f in functions if f.body.blocks) or "none"
    what = f"no function @{name}" if name else "no function with a body"
    raise DifferentiateError(f"tape-differentiate: {what} (functions: {known})")


def _is_float(value: SSAValue) -> bool:
    return tape.dtype_of(value.type).kind == "f"


def _needs_gradient(f: func.FuncOp, wrt: list[SSAValue]) -> set[SSAValue]:
    """The float values that depend on a float `wrt` argument through differentiable ops:
    integer and boolean values carry no gradient, so they stop cotangents (a cast from an
    integer starts a new, constant path)."""
    active = {v for v in wrt if _is_float(v)}
    for op in f.body.block.ops:
        if type(op) in NON_DIFFERENTIABLE:
            continue
        if any(o in active for o in op.operands):
            active.update(r for r in op.results if _is_float(r))
    return active


def differentiate(f: func.FuncOp, wrt: tuple[int, ...] = (), of: tuple[int, ...] = (),
                  seed: bool = False) -> None:
    """Append the backward ops of `f` in place (see the module doc).

    `wrt`: the arguments to differentiate with respect to (default: all); `of`: the results
    whose gradient is taken (default: result 0). Without `seed` each of them must be rank 0 and
    is seeded with 1; with `seed`, the function gets one more argument per `of` result, its
    cotangent, after its own arguments (a vector-Jacobian product).
    """
    started = time.perf_counter()
    if len(f.body.blocks) != 1:
        raise DifferentiateError(f"tape-differentiate: @{f.sym_name.data} must be one block "
                                 f"of tape ops, it has {len(f.body.blocks)}")
    block = f.body.block
    ret = block.last_op
    if not isinstance(ret, func.ReturnOp):
        raise DifferentiateError(f"tape-differentiate: @{f.sym_name.data} must end in func.return")
    if any(isinstance(arg.type, MemRefType) for arg in block.args):
        raise DifferentiateError(f"tape-differentiate: @{f.sym_name.data} is lowered already (its "
                                 "arguments are buffers): differentiate its tape function, "
                                 "before tape-to-loops")
    n_args, n_results = len(block.args), len(ret.arguments)
    wrt = wrt or tuple(range(n_args))
    of = of or (0,)
    for i in wrt:
        if not 0 <= i < n_args:
            raise DifferentiateError(f"tape-differentiate: wrt={i} is not an argument of "
                                     f"@{f.sym_name.data} (it has {n_args})")
    for i in of:
        if not 0 <= i < n_results:
            raise DifferentiateError(f"tape-differentiate: of={i} is not a result of "
                                     f"@{f.sym_name.data} (it has {n_results})")
        t = ret.arguments[i].type
        if not isinstance(t, TensorType):
            raise DifferentiateError(f"tape-differentiate: result {i} of @{f.sym_name.data} is "
                                     f"{t}, not a tensor: tape functions return tensors")
        if not seed and tape.dtype_of(t).kind != "f":
            raise DifferentiateError(
                f"tape-differentiate: result {i} of @{f.sym_name.data} is {t}; an integer or "
                "boolean result has no gradient")
        if not seed and t.get_shape() != ():
            raise DifferentiateError(
                f"tape-differentiate: result {i} of @{f.sym_name.data} is {t}, not a scalar; "
                "differentiate a scalar, or pass seed=true for a vector-Jacobian product")
    unknown = {op.name for op in block.ops if isinstance(op, TapeOp)
               and type(op) not in PULLBACKS and type(op) not in NON_DIFFERENTIABLE}
    if unknown:
        names = ", ".join(sorted(unknown))
        raise DifferentiateError(f"tape-differentiate: no pullback for {names}")

    wrt_values = [block.args[i] for i in wrt]
    active = _needs_gradient(f, wrt_values)
    needed = {ret.arguments[i] for i in of}  # what the differentiated results read
    for op in reversed(list(block.ops)):
        if any(r in needed for r in op.results):
            needed.update(op.operands)
    foreign = sorted({op.name for op in block.ops if not isinstance(op, TapeOp | func.ReturnOp)
                      and any(o in active for o in op.operands)
                      and any(r in needed for r in op.results)})
    if foreign:  # (its cotangent would stop there, silently: a gradient of zeros)
        raise DifferentiateError(
            f"tape-differentiate: @{f.sym_name.data} holds {', '.join(foreign)} on the way from "
            "an argument to a result, which has no pullback: the pass differentiates a "
            "function of tape ops (inline what a call does first)")
    seeds = [block.insert_arg(ret.arguments[i].type, len(block.args)) for i in of] if seed else []

    forward_ops = set(block.ops)
    with new_trace(block, before=ret) as trace:
        cotangents: dict[SSAValue, Any] = {}

        def accumulate(value: SSAValue, ct: Any) -> None:
            if value in active:
                cotangents[value] = ops.add(cotangents[value], ct) if value in cotangents else ct

        for k, i in enumerate(of):
            value = ret.arguments[i]
            one = np.ones((), tape.dtype_of(value.type))
            accumulate(value, Tracer(seeds[k] if seed else trace.operand(one), trace))
        for op in reversed(list(block.ops)):
            result = op.results[0] if op.results else None
            if result not in cotangents or not isinstance(op, TapeOp):
                continue
            _apply_pullback(trace, op, cotangents.pop(result), accumulate)
        gradients = [_gradient_of(trace, v, cotangents) for v in wrt_values]

    ret.operands = [*ret.arguments, *gradients]
    _erase_dead(block, forward_ops)
    _update_signature(f, [block.args[i] for i in wrt], seeds)
    _update_trees(f, len(wrt), len(seeds))
    record("tape-differentiate", len(block.ops) - 1, started,
           f"{len(block.ops) - len(forward_ops & set(block.ops))} backward ops appended")


def _erase_dead(block: Block, keep: set[Operation]) -> None:
    """Erase the backward ops nothing uses (a pullback computes every operand's cotangent,
    including those of operands that need none, such as constants)."""
    for op in reversed(list(block.ops)):
        if op not in keep and isinstance(op, TapeOp) and not op.results[0].uses:
            block.erase_op(op)


def _apply_pullback(trace: Trace, op: TapeOp, ct: Tracer, accumulate) -> None:
    trace.location = op.location
    try:
        operands = [Tracer(o, trace) for o in op.operands]
        rule = PULLBACKS[type(op)]
        cts = rule(ct, *operands, result=Tracer(op.results[0], trace), **op.params)
    finally:
        trace.location = None
    if len(cts) != len(op.operands):
        raise DifferentiateError(f"tape-differentiate: the pullback of {op.name} gave "
                                 f"{len(cts)} cotangents for {len(op.operands)} operands")
    for i, (operand, operand_ct) in enumerate(zip(op.operands, cts, strict=True)):
        if operand_ct is None:
            continue
        _check_cotangent(op, i, operand, operand_ct)
        accumulate(operand, operand_ct)


def _check_cotangent(op: TapeOp, i: int, operand: SSAValue, ct: Any) -> None:
    """A cotangent has its primal's shape and dtype: a pullback that gets one wrong is a bug
    in its rule, reported here instead of broadcast silently into the sum of cotangents."""
    shape, dtype = operand.type.get_shape(), tape.dtype_of(operand.type)
    if tuple(ct.shape) != shape or np.dtype(ct.dtype) != dtype:
        raise DifferentiateError(
            f"tape-differentiate: the pullback of {op.name} gave operand {i} ({operand.type}) "
            f"a cotangent of shape {tuple(ct.shape)} and dtype {np.dtype(ct.dtype)}; a "
            "cotangent has its operand's shape and dtype")


def _gradient_of(trace: Trace, value: SSAValue, cotangents: dict[SSAValue, Any]) -> SSAValue:
    ct = cotangents.get(value)
    if ct is None:  # the result does not depend on this argument
        ct = ops.broadcast_to(np.zeros((), tape.dtype_of(value.type)), value.type.get_shape())
    return trace.operand(ct)


def _update_signature(f: func.FuncOp, wrt: list[SSAValue], seeds: list[SSAValue]) -> None:
    block = f.body.block
    ret = block.last_op
    f.function_type = FunctionType.from_lists([a.type for a in block.args],
                                              [o.type for o in ret.operands])
    for k, value in enumerate(seeds):
        value.name_hint = f"seed{k}"
    own_args = list(block.args)[: len(block.args) - len(seeds)]
    arg_names = value_names(f.arg_attrs, own_args, "arg") + [f"seed{k}" for k in range(len(seeds))]
    if f.arg_attrs is not None or seeds:  # (an argument's other attributes kept: tapeml.fits)
        kept = [dict(d.data) for d in f.arg_attrs.data] if f.arg_attrs is not None else []
        f.arg_attrs = ArrayAttr([DictionaryAttr((kept[i] if i < len(kept) else {}) |
                                                {NAME_ATTR: StringAttr(n)})
                                 for i, n in enumerate(arg_names)])
    named = dict(zip(block.args, arg_names, strict=True))
    results = list(ret.operands)[: len(ret.operands) - len(wrt)]
    result_names = value_names(f.res_attrs, results, "result")
    f.res_attrs = _name_attrs(result_names + [f"grad.{named[v]}" for v in wrt])


def _update_trees(f: func.FuncOp, n_grads: int, n_seeds: int) -> None:
    """Keep a traced function's pytree attributes true: it now returns (results, (grads...)),
    and seeds come as one more positional argument, a tuple."""
    in_tree = attr_text(f.attributes.get(IN_TREE_ATTR))
    out_tree = attr_text(f.attributes.get(OUT_TREE_ATTR))
    if out_tree is not None:
        grads = _flat_tuple(n_grads)
        new_out = TreeDef("tuple", (0, 1), (TreeDef.from_text(out_tree), grads))
        f.attributes[OUT_TREE_ATTR] = StringAttr(new_out.to_text())
    if in_tree is not None and n_seeds:
        args, kwargs = TreeDef.from_text(in_tree).children
        args = TreeDef("tuple", tuple(range(len(args.children) + 1)),
                       (*args.children, _flat_tuple(n_seeds)))
        f.attributes[IN_TREE_ATTR] = StringAttr(
            TreeDef("tuple", (0, 1), (args, kwargs)).to_text())


def _flat_tuple(n: int) -> TreeDef:
    return TreeDef("tuple", tuple(range(n)), (LEAF,) * n)


def _name_attrs(names: list[str]) -> ArrayAttr:
    return ArrayAttr([DictionaryAttr({NAME_ATTR: StringAttr(n)}) for n in names])


@dataclass(frozen=True)
class DifferentiatePass(ModulePass):
    """Reverse-mode autodiff: append the backward ops of a function (see the module doc)."""

    name = "tape-differentiate"

    function: str = ""
    """The function to differentiate (default: the first)."""
    wrt: tuple[int, ...] = ()
    """Argument indices to differentiate with respect to (default: all)."""
    of: tuple[int, ...] = ()
    """Result indices whose gradient is taken (default: 0)."""
    seed: bool = False
    """Take cotangents of the `of` results as extra arguments (a VJP) instead of seeding 1."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        differentiate(_pick_function(op, self.function), self.wrt, self.of, self.seed)
