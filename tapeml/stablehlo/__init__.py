"""StableHLO out: a tape program as upstream StableHLO text, for IREE, XLA or any compiler that
reads it (`tapeml-opt -t stablehlo`, `Program.as_stablehlo()`).

    emit(module) -> str

writes the module's tape function (its first defined function, the one the backends compile)
as `func.func @main` inside a module named after it, one rule per tape op found in EMITTERS by
the op's class, one module per op family:

    writer.py        V (a value: name, shape, dtype) and Writer (one StableHLO op per call)
    registry.py      EMITTERS and @emits
    elementwise.py   arithmetic, cmp, select, constant, cast
    layout.py        broadcast, reshape, permute, pad, slice, concat, unfold, fold
    reductions.py    sum, max
    normalization.py layer_norm and its backward (written out)
    scans.py         argmax, argmin, cumsum, iota
    indexing.py      take (gather), scatter
    contractions.py  matmul (dot_general)
    convolutions.py  conv2d and its backward ops (convolution), the pools (reduce_window)
    fused.py         tape.fused, its body op by op over the group's shape

Every tape op has a rule (tests/test_op_registries.py); an op of another dialect (a lowered
module) is a StableHLOError naming it. The text uses StableHLO's ops and chlo.erf (StableHLO
has no erf; chlo is its companion dialect, read by every StableHLO consumer).
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tapeml.dialects import tape
from tapeml.dialects.names import value_names
from tapeml.errors import StableHLOError
from tapeml.stablehlo import (  # noqa: F401 (each family's module fills EMITTERS)
    contractions,
    convolutions,
    elementwise,
    fused,
    indexing,
    layout,
    normalization,
    reductions,
    scans,
)
from tapeml.stablehlo.registry import EMITTERS, V, Writer

__all__ = ["EMITTERS", "emit"]


SUMS_OF_NOTHING = (tape.SumOp, tape.MatmulOp, tape.Conv2dOp, tape.Conv2dBackwardInputOp,
                   tape.Conv2dBackwardWeightOp)
"""Ops whose result elements are sums over an operand's elements: with an empty operand, each
is the sum of nothing, 0, written as such (IREE 3.13's compiler crashes on an empty
contraction)."""


def _symbol(name: str) -> str:
    """@name, quoted unless it is an identifier: in MLIR's string escapes, every unprintable
    character as its UTF-8 bytes, \\XX (MLIR's lexer ends a string at a raw newline)."""
    if re.fullmatch(r"[A-Za-z_][\w$.]*", name):
        return f"@{name}"
    return '@"' + "".join("\\" + c if c in '"\\' else c if c.isprintable() else
                          "".join(f"\\{b:02X}" for b in c.encode()) for c in name) + '"'


def _comment(text: str) -> str:
    """`text` for a `//` line: a backslash and every unprintable character escaped as Python
    writes them (a newline or carriage return would end the comment, the rest read as ops)."""
    return "".join(c if c.isprintable() and c != "\\" else
                   c.encode("unicode_escape").decode("ascii") for c in text)


def _value(value: SSAValue) -> V:
    return V("", tuple(value.type.get_shape()), tape.dtype_of(value.type))


def emit(module: ModuleOp, name: str | None = None, module_name: str | None = None) -> str:
    """The module's tape function (the one called `name`, else the first defined) as a
    StableHLO module (text), the module named `module_name`, by default after the function
    (a runtime that names its modules after the program's, as IREE's, needs a name of its
    own: a function called `hal` is no module beside IREE's `hal`)."""
    f = next((op for op in module.ops if isinstance(op, func.FuncOp) and not op.is_declaration
              and name in (None, op.sym_name.data)), None)
    if f is None:
        raise StableHLOError(f"the module defines no function {'@' + name if name else ''} "
                             "to write as StableHLO".replace("  ", " "))
    block = f.body.block
    w = Writer()
    values: dict[SSAValue, V] = {}
    for i, arg in enumerate(block.args):
        values[arg] = replace(_value(arg), name=f"%arg{i}")
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            results = [values[v] for v in op.operands]
            break
        rule = EMITTERS.get(type(op))
        if rule is None:
            raise StableHLOError(f"{op.name} has no StableHLO form (StableHLO is written from "
                                 "tape ops, before any lowering)")
        out = _value(op.results[0])
        operands = [values[o] for o in op.operands]
        if out.size == 0:  # no elements: nothing to compute, whatever the op
            values[op.results[0]] = w.constant(np.zeros(out.shape, out.dtype))
            continue
        if isinstance(op, SUMS_OF_NOTHING) and any(o.size == 0 for o in operands):
            values[op.results[0]] = w.splat(0, out.shape, out.dtype)
            continue
        values[op.results[0]] = rule(w, out, *operands, **op.params)
    else:
        raise StableHLOError(f"@{f.sym_name.data} does not end in func.return")
    inputs = value_names(f.arg_attrs, list(block.args), "arg")
    outputs = value_names(f.res_attrs, list(block.last_op.operands), "result")
    args = ", ".join(f"{values[a].name}: {values[a].type}" for a in block.args)
    types = ", ".join(r.type for r in results)
    header = f"{f.sym_name.data}({', '.join(inputs)}) -> ({', '.join(outputs)})"
    returned = f" {', '.join(r.name for r in results)} : {types}" if results else ""
    lines = [
        f"// @{_comment(header)}, from tapeml",
        f"module {_symbol(module_name or f.sym_name.data)} {{",
        f"  func.func @main({args}) -> ({types}) {{",
        *w.lines,
        f"    func.return{returned}",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"

