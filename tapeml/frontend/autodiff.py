"""`grad`, `value_and_grad`, `vjp` and `triangle_gradients`, with JAX's signatures, on tapeml's
machinery: trace the function, run the `tape-differentiate` pass on the traced program (the
gradient is more tape), run that program. As JAX's, they trace the function afresh on every
call, so what it reads from its enclosing scope is read anew (only `jit` compiles once); the
programs are themselves traceable, so `grad(grad(f))` works."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tapeml.dialects import tape
from tapeml.errors import ShapeError
from tapeml.frontend.program import Program, Spec, trace, trace_with
from tapeml.tracing import ops
from tapeml.tracing.pytree import TreeDef, flatten, leaf_paths, unflatten
from tapeml.tracing.trace import Tracer, at_user_line, is_weak_scalar
from tapeml.transforms.differentiate import differentiate


def _is_index(x: Any) -> bool:
    return isinstance(x, int | np.integer)


def _argnums(argnums: int | Sequence[int], n_args: int) -> tuple[int, ...]:
    """The positions `argnums` names: an int (numpy's too) or a non-empty sequence of them."""
    nums = (argnums,) if _is_index(argnums) else argnums
    if not isinstance(nums, Sequence) or not all(_is_index(i) for i in nums):
        raise TypeError(f"argnums must be an int or a sequence of ints, got {argnums!r}")
    if not nums:
        raise ValueError(f"argnums={argnums!r} names no argument: name at least one to "
                         "differentiate with respect to")
    for i in nums:
        if not -n_args <= i < n_args:
            raise ValueError(f"argnums={argnums!r} is out of range for {n_args} positional "
                             "arguments")
    return tuple(int(i) % n_args for i in nums)


def _is_weak_float(x: Any) -> bool:
    """A Python float, or a tracer standing for one (see `Tracer`)."""
    return (isinstance(x, float) and is_weak_scalar(x)) or (
        isinstance(x, Tracer) and x.weak and x.dtype.kind == "f")


def _weak_gradients(grads: Any, weak: list[bool]) -> Any:
    """The gradient of a weak float argument (traced as float64) as a weak result leaves a
    program: float32, JAX's dtype for it, so a float32 model's Python-float parameter stays
    float32 after an optimizer step; under another trace, a weak tracer."""
    leaves, tree = flatten(grads)
    return unflatten(tree, [(Tracer(g.value, g.trace, weak=True) if isinstance(g, Tracer)
                             else np.asarray(g, np.float32)) if w else g
                            for g, w in zip(leaves, weak, strict=True)])


def _leaf_ranges(args: tuple) -> list[range]:
    """The flat leaf indices each positional argument occupies in flatten((args, kwargs))."""
    ranges, start = [], 0
    for arg in args:
        n = flatten(arg)[1].num_leaves
        ranges.append(range(start, start + n))
        start += n
    return ranges


def _tuple_tree(children: Sequence[TreeDef]) -> TreeDef:
    return TreeDef("tuple", tuple(range(len(children))), tuple(children))


def _check_scalar(program: Program, has_aux: bool, name: str) -> None:
    out = program.shapes
    if has_aux:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"{name}(has_aux=True): the function must return (value, aux)")
        out = out[0]
    if not isinstance(out, Spec) or out.shape != ():
        raise TypeError(f"{name}: the function must return a scalar (a rank-0 array), got {out}")
    if out.dtype.kind != "f":
        raise TypeError(f"{name}: the function must return a float scalar, got {out}; an "
                        "integer or boolean result has no gradient")


def _check_float_arguments(program: Program, leaves: list[int]) -> None:
    """Gradients are taken with respect to float arguments only, as in JAX."""
    block = program.function.body.block
    for i in leaves:
        arg = block.args[i]
        dtype = tape.dtype_of(arg.type)
        if dtype.kind != "f":
            raise TypeError(
                f"grad: argument `{arg.name_hint}` is {dtype}; gradients are taken with respect "
                "to float arguments only (integers and booleans carry no gradient): leave it "
                "out of argnums, or cast it to float if it is a float in disguise")


def value_and_grad(fn: Callable, argnums: int | Sequence[int] = 0,
                   has_aux: bool = False) -> Callable:
    """`fn` and its gradient with respect to the `argnums` arguments, each gradient in its
    argument's structure: `(value, grads)`, or `((value, aux), grads)` with `has_aux`.
    An int `argnums` gives that argument's gradient; a sequence gives a tuple of them.
    Each call traces `fn` again (see the module doc)."""

    @functools.wraps(fn)
    def value_and_grad_fn(*args: Any, **kwargs: Any) -> Any:
        program = _differentiated(fn, args, kwargs, argnums, has_aux)
        out, grads = program.call_once(*args, **kwargs)
        weak = [_is_weak_float(x) for n in _argnums(argnums, len(args))
                for x in flatten(args[n])[0]]
        return out, _weak_gradients(grads, weak)

    return value_and_grad_fn


def _differentiated(fn: Callable, args: tuple, kwargs: dict, argnums: int | Sequence[int],
                    has_aux: bool) -> Program:
    """The traced program of `fn`, differentiated; it returns (out, grads)."""
    nums = _argnums(argnums, len(args))
    # under another trace, its ops join that one (call_once) and are verified there
    nested = any(isinstance(x, Tracer) for x in flatten((args, kwargs))[0])
    program = trace_with(fn, args, kwargs, verify=not nested)
    in_tree, out_tree = program.in_tree, program.out_tree
    ranges = _leaf_ranges(args)
    wrt = tuple(i for n in nums for i in ranges[n])
    _check_float_arguments(program, wrt)  # (first: an integer argument makes the result one)
    _check_scalar(program, has_aux, "grad")
    if wrt:  # (arguments with no leaves, {} or (), have no gradients to append; and
        # differentiate's empty wrt means every argument)
        differentiate(program.function, wrt=wrt, of=(0,))
    trees = [flatten(args[n])[1] for n in nums]
    grads_tree = trees[0] if _is_index(argnums) else _tuple_tree(trees)
    program.set_trees(in_tree, _tuple_tree([out_tree, grads_tree]))
    return program


def grad(fn: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False) -> Callable:
    """The gradient of scalar-valued `fn` with respect to the `argnums` arguments (in their
    structure); with `has_aux`, `fn` returns (value, aux) and this returns (grads, aux)."""
    value_and_grad_fn = value_and_grad(fn, argnums, has_aux)

    @functools.wraps(fn)
    def grad_fn(*args: Any, **kwargs: Any) -> Any:
        out, grads = value_and_grad_fn(*args, **kwargs)
        return (grads, out[1]) if has_aux else grads

    return grad_fn


def vjp(fn: Callable, *primals: Any, has_aux: bool = False) -> tuple[Any, ...]:
    """`(out, vjp_fn)`, or `(out, vjp_fn, aux)` where `fn` returns `(out, aux)` (`has_aux`):
    `out` as `fn`'s traced program computes it (`fn` runs once, on tracers); `vjp_fn`, given
    cotangents structured like `out`, returns one cotangent per primal, structured like it."""
    program = trace(fn, *primals)
    shapes = program.shapes
    if has_aux and not (isinstance(shapes, tuple) and len(shapes) == 2):
        raise TypeError(f"vjp(has_aux=True): the function must return (out, aux), got {shapes}")
    out, full_tree = program(*primals), program.out_tree  # what fn returns, as traced
    out_tree = full_tree.children[0] if has_aux else full_tree
    specs = flatten(shapes[0] if has_aux else shapes)[0]
    differentiate(program.function, of=tuple(range(len(specs))), seed=True)
    primal_trees = [flatten(p)[1] for p in primals]
    args_tree = _tuple_tree([*primal_trees, out_tree])
    program.set_trees(_tuple_tree([args_tree, TreeDef("dict")]),
                      _tuple_tree([full_tree, _tuple_tree(primal_trees)]))
    weak = [_is_weak_float(x) for x in flatten(primals)[0]]

    def vjp_fn(cotangents: Any) -> tuple[Any, ...]:
        leaves, cotangent_tree = flatten(cotangents)
        if cotangent_tree != out_tree:
            raise TypeError(f"vjp: cotangents must be structured like the outputs, "
                            f"{out_tree}, got {cotangent_tree}")
        leaves = [_cotangent(ct, spec, path) for ct, spec, path
                  in zip(leaves, specs, leaf_paths(out_tree, "out"), strict=True)]
        return _weak_gradients(program(*primals, unflatten(out_tree, leaves))[1], weak)

    return (out[0], vjp_fn, out[1]) if has_aux else (out, vjp_fn)


def _cotangent(ct: Any, spec: Spec, path: str) -> Any:
    """The cotangent of output `path` as its dtype: of its shape, a float for a float output
    (a Python float, or float64 for a float32 output, as JAX takes them)."""
    x = ct if isinstance(ct, Tracer) else np.asarray(ct)
    dtype, shape = np.dtype(x.dtype), tuple(x.shape)
    floating = spec.dtype.kind == "f"
    message = (f"vjp: the cotangent of output `{path}` ({spec.dtype}, shape {spec.shape}) must "
               f"be {'a float' if floating else 'an'} array of its shape, got {dtype} of shape "
               f"{shape}")
    if dtype.kind not in ("f" if floating else "biuf"):
        raise TypeError(at_user_line(message))
    if shape != spec.shape:
        raise ShapeError(at_user_line(message))
    return ops.astype(x, spec.dtype) if isinstance(x, Tracer) else x.astype(spec.dtype)


def triangle_gradients(direct: Callable, left: Callable, right: Callable, x: Any,
                       params: tuple[Any, Any, Any]) -> tuple[Any, tuple[Any, Any, Any]]:
    """Compositional training: the disagreement between a direct map h: E -> D and the
    composition g . f of f: E -> S and g: S -> D, `1/2 ||h(x) - g(f(x))||^2`, and the gradients
    of each map's parameters `(ph, pf, pg)`. Each map is called as `map(params, input)`."""

    def disagreement(params: tuple[Any, Any, Any], x: Any) -> Any:
        ph, pf, pg = params
        direct_leaves, direct_tree = flatten(direct(ph, x))
        composed_leaves, composed_tree = flatten(right(pg, left(pf, x)))
        if direct_tree != composed_tree:
            raise TypeError(f"triangle_gradients: h(x) is structured as {direct_tree} but "
                            f"g(f(x)) as {composed_tree}")
        total = 0.0
        for a, b in zip(direct_leaves, composed_leaves, strict=True):
            total = ops.add(total, ops.sum(ops.square(ops.subtract(a, b))))
        return ops.multiply(total, 0.5)

    return value_and_grad(disagreement)(tuple(params), x)
