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

from collections.abc import Callable, Sequence
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

    def __init__(self, argnums: int | Sequence[int]) -> None:
        numbers = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in numbers):
            raise TypeError(f"jit: batch_argnums must be ints, got {argnums!r}")
        self.argnums = numbers
        self.programs: dict[tuple, Any] = {}
        """A family's GenericProgram, or None where it makes none."""
        self.outlines: dict[tuple, tuple] = {}
        """The outline of a family's traced program at its first batch size (`_outline`):
        a batch size that traces to other ops (at batch 1 a broadcast of a bias over the
        batch is none) is no instance, and is compiled on its own without being lowered for
        the comparison first."""

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
            self.programs[family] = found[0]
            self.outlines.setdefault(family, outline)
            return (traced.out_tree, found[1]), (f"batch-generic: batch size {size} from the "
                                                 "disk cache")
        lowered = Lowered.of(backend, traced.module, threads, key)
        if program is False:
            why = "its lowerings at other batch sizes differ beyond their values"
            given = flatten(args)[0]  # (a Python number as it came: weak, as traced above)
            for other in _second_sizes(size):
                at = unflatten(tree, [Spec((other, *np.shape(x)[1:]), x.dtype)
                                      if i in batch else given[i] for i, x in enumerate(leaves)])
                try:
                    second = trace(fn, *at[0], **at[1])
                except (ShapeError, TracingError) as error:  # (a batch size written in `fn`)
                    why = f"it does not trace at batch size {other}: {error}"
                    program = None
                    break
                program = GenericProgram.compile(
                    lowered, Lowered.of(backend, second.module, threads, key=""))
                if program is not None:
                    break
            self.programs[family] = program
            self.outlines[family] = outline
            if program is None:
                return None, f"batch-generic: none, {why.splitlines()[0]}"
            how = f"batch-generic: compiled at batch sizes {size} and {other}"
        else:
            how = f"batch-generic: batch size {size} an instance of the compiled program"
        native = program.instance(lowered)
        if native is None:
            return None, (f"batch-generic: batch size {size} lowers otherwise than the compiled "
                          "program; compiled on its own")
        return (traced.out_tree, native), how


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
