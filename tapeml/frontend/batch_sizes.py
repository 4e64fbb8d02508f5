"""`jit(..., batch_argnums=...)`: one compiled program for every batch size.

The arrays in the arguments at `batch_argnums` (every leaf of them) have the batch as their
leading axis. The first call at a batch size B traces the function at B and at 2B + 1 (or,
where those two lower otherwise, at B + 1), lowers both with loops whose structure no batch
size changes (tape-to-loops' and outline-parallel-loops' `any_batch`), and compiles the
template of the two (tapeml/codegen/batch_generic.py): the program's machine code with
every value that differs between them loaded from a small module of the batch's own. A later
call at a new batch size traces and lowers the function at that size (tapeml's passes, no
LLVM optimization) and, where its lowering is an instance of the template, compiles only that
module. Where it is not (the lowering decided something otherwise at that size), or where no
template could be made, the call compiles as `jit` does without the option; so does a batch
size that traces to other ops than the first (at batch 1 a bias's broadcast over the batch is
no op), found before anything is lowered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.dialects.builtin import TensorType

from tapeml.codegen import Compiled
from tapeml.codegen.gemm import host_threads
from tapeml.errors import ShapeError, TracingError
from tapeml.frontend.program import Spec, trace
from tapeml.tracing.pytree import TreeDef, flatten, unflatten


class BatchSizes:
    """The batch-generic programs of one jitted function, by the structure of its arguments
    with the batch left out (None: the function makes none; each batch compiles apart)."""

    def __init__(self, argnums: tuple[int, ...]) -> None:
        self.argnums = argnums
        """batch_argnums, as jit's `_argnums` reads them (the one reading static_argnums has)."""
        self.programs: dict[tuple, Any] = {}
        """A family's GenericProgram, or None where it makes none."""
        self.outlines: dict[tuple, tuple] = {}
        """The outline of a family's traced program at its first batch size (`_outline`):
        a batch size that traces to other ops (at batch 1 a broadcast of a bias over the
        batch is none) is no instance, and is compiled on its own without being lowered for
        the comparison first."""
        self.borrowed: dict[tuple, int] = {}
        """The families whose program came from the disk cache with their first batch size's
        instance, by that size. The instance is keyed by the program traced at that size
        alone, so its program may be another function's that traced alike there (and made a
        constant of a value this one's batch changes): the first batch size that lowers
        otherwise makes the family's own, as an empty cache would have (`_own`)."""

    def batch_leaves(self, args: tuple, static: tuple[int, ...], dynamic: tuple
                     ) -> set[int]:
        """The indices, among the flattened (dynamic, kwargs) leaves, of the leaves of the
        arguments at `batch_argnums` (positions in `args`, the call's)."""
        count = len(args)
        positions = set()
        for i in self.argnums:
            if not -count <= i < count:
                raise TypeError(f"jit: batch_argnums {i} is out of range for a call with "
                                f"{count} positional argument{'s' if count != 1 else ''} "
                                "(batch arguments are found by position: pass them "
                                "positionally, not by keyword)")
            if i % count in static:
                raise TypeError(f"jit: argument {i % count} is in both static_argnums and "
                                "batch_argnums")
            positions.add(i % count)
        kept = [p for p in range(count) if p not in static]
        out, start = [], 0
        for p, arg in zip(kept, dynamic, strict=True):
            n = len(flatten(arg)[0])
            if p in positions:
                out.extend(range(start, start + n))
            start += n
        return set(out)

    def compile(self, backend: Any, fn: Callable, args: tuple[tuple, dict], tree: TreeDef,
                leaves: list[Any], specs: tuple, static_key: Any, batch: set[int]
                ) -> tuple[tuple[TreeDef, Compiled] | None, str]:
        """`fn` compiled for `args` (the dynamic arguments and keywords; flattened: `tree`,
        `leaves`, their `specs`) through its batch-generic program, made here if the family
        has none yet: its out tree and the program, or None where the family makes none or this
        batch size is no instance of it; and what happened, for explain() ("" if nothing)."""
        from tapeml.codegen.arguments import signature  # (these load LLVM)
        from tapeml.codegen.batch_generic import GenericProgram, Lowered, instance_key

        size = _batch_size(leaves, batch)
        family = (tree, tuple(((None, *spec[0][1:]), spec[1]) if i in batch else spec
                              for i, spec in enumerate(specs)), static_key)
        threads = host_threads()
        program = self.programs.get(family, False)
        if program is None:
            return None, ""
        traced = trace(fn, *args[0], **args[1])
        outline = _outline(traced.module)
        if program is not False and outline != self.outlines.setdefault(family, outline):
            return None, (f"batch-generic: batch size {size} traces to other ops than the "
                          "compiled program's; compiled on its own")
        key = instance_key(backend, traced.module, threads)
        found = GenericProgram.cached(key, *signature(traced.module)[1:],
                                      program=program or None)
        if found is not None:  # (seen at this batch size by another process)
            if program is False:  # (a family's program is its own once it has one)
                self.programs[family], self.borrowed[family] = found[0], size
                self.outlines[family] = outline
            return (traced.out_tree, found[1]), (f"batch-generic: batch size {size} from the "
                                                 "disk cache")
        lowered = Lowered.of(backend, traced.module, threads, key)
        at = _AtSizes(backend, fn, args, tree, leaves, batch, threads)
        if program is False:
            program, how = _template(lowered, size, at)
            self.programs[family] = program
            self.outlines[family] = outline
            if program is None:
                return None, f"batch-generic: none, {how.splitlines()[0]}"
        else:
            how = f"batch size {size} an instance of the compiled program"
        native = program.instance(lowered)
        if native is None and family in self.borrowed:
            native, how = self._own(family, program, lowered, size, at)
        if native is None:
            return None, (f"batch-generic: batch size {size} lowers otherwise than the compiled "
                          "program; compiled on its own")
        return (traced.out_tree, native), "batch-generic: " + how

    def _own(self, family: tuple, program: Any, lowered: Any, size: int, at: _AtSizes
             ) -> tuple[Any, str]:
        """Where `lowered` (at `size`) is no instance of `program`, the one the disk cache gave
        the family with its first batch size, the family's own program, made as an
        empty cache would have made it (at that first size and a second), if it is another;
        then the instance of it at `size` and how it was made, else (None, "")."""
        from tapeml.codegen.batch_generic import Lowered

        first = self.borrowed.pop(family)
        own, how = _template(Lowered.of(at.backend, at.trace(first).module, at.threads, ""),
                             first, at)
        if own is None or own.key == program.key:  # (the disk cache's was this family's)
            return None, ""
        self.programs[family] = own
        return own.instance(lowered), (f"batch size {size} an instance of the program "
                                       f"{how}; the disk cache's program for batch size "
                                       f"{first}, another function's that traces alike at "
                                       f"{first}, lowers otherwise")


class _AtSizes:
    """One call's function and arguments, traced at other batch sizes: its batch arguments'
    arrays as Specs of that leading axis, the rest as they came (a Python number weak)."""

    def __init__(self, backend: Any, fn: Callable, args: tuple[tuple, dict], tree: TreeDef,
                 leaves: list[Any], batch: set[int], threads: int) -> None:
        self.backend, self.fn, self.args, self.tree = backend, fn, args, tree
        self.leaves, self.batch, self.threads = leaves, batch, threads

    def trace(self, size: int) -> Any:
        """The function traced at batch size `size`."""
        given = flatten(self.args)[0]
        at = unflatten(self.tree, [Spec((size, *np.shape(x)[1:]), x.dtype)
                                   if i in self.batch else given[i]
                                   for i, x in enumerate(self.leaves)])
        return trace(self.fn, *at[0], **at[1])


def _template(lowered: Any, size: int, at: _AtSizes) -> tuple[Any, str]:
    """The batch-generic program of `lowered` (at batch size `size`) and the function's
    lowering at a second size (`_second_sizes`, in turn) and how it was made ("compiled at
    batch sizes 16 and 33"), or None and why there is none."""
    from tapeml.codegen.batch_generic import GenericProgram, Lowered

    for other in _second_sizes(size):
        try:
            second = at.trace(other)
        except (ShapeError, TracingError) as error:  # (a batch size written in `fn`)
            return None, f"it does not trace at batch size {other}: {error}"
        program = GenericProgram.compile(
            lowered, Lowered.of(at.backend, second.module, at.threads, key=""))
        if program is not None:
            return program, f"compiled at batch sizes {size} and {other}"
    return None, "its lowerings at other batch sizes differ beyond their values"


def _second_sizes(size: int) -> tuple[int, ...]:
    """The batch sizes a template is tried at beside `size`, in turn: 2 * size + 1 first, where
    every quotient of the batch by a smaller count and every remainder by a power of two
    differs (they do not at size + 1: 16 // 8 == 17 // 8), so each value that depends on the
    batch is a slot; then size + 1."""
    return (2 * size + 1, size + 1)


def _outline(module: Any) -> tuple:
    """The traced program `module` as its ops' names and their operands', results' and
    results' dimensions' counts: the same at two batch sizes that trace to the same ops. Two
    sizes whose outlines differ could still lower alike only where the ops they differ by
    lower to no code (an alias); such a size is then compiled on its own: a compile more,
    never a wrong program."""
    return tuple((op.name, len(op.operands),
                  tuple(len(r.type.get_shape()) if isinstance(r.type, TensorType) else -1
                        for r in op.results)) for op in module.walk())


def _batch_size(leaves: list[Any], batch: set[int]) -> int:
    """The leading axis the batch leaves share; a TypeError where they share none."""
    sizes = {np.shape(leaves[i])[0] if np.ndim(leaves[i]) else None for i in batch}
    if not batch or None in sizes or len(sizes) != 1:
        shapes = [np.shape(leaves[i]) for i in sorted(batch)]
        raise TypeError("jit: the arrays at batch_argnums must share a leading axis (the "
                        f"batch), got shapes {shapes}")
    return sizes.pop()
