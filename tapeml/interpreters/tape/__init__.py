"""The reference semantics of every tape op, in numpy.

`SEMANTICS[Op](*arrays, **op.params)` computes an op's result. These functions are the single
source of each op's meaning: xDSL's interpreter runs them (`TapeFunctions`) and eager mode calls
them directly. They keep the element type (f32 in, f32 out) and never mutate their inputs.

One module per op family (those of `tapeml/dialects/tape/`), each registering its ops'
semantics with `@semantics(Op)`:

    registry.py      SEMANTICS, semantics(), evaluate(), ieee(), is_ufunc()
    elementwise.py   arithmetic (IEEE maximum, minimum), cmp, select, constant, cast
    layout.py        broadcast, reshape, permute, pad, slice, unfold, fold, concat
    reductions.py    sum, max (max_over)
    normalization.py layer_norm, softmax and their backward ops
    indexing.py      take, scatter
    scans.py         argmax, argmin, cumsum, iota
    contractions.py  matmul
    convolutions.py  conv2d, maxpool2d, avgpool2d and their backward ops
    fused.py         fused

This module imports them all (in that order: SEMANTICS keeps it), exports their functions under
their old names, and registers every op with xDSL's interpreter as `TapeFunctions`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from tapeml.dialects.base import TapeOp
from tapeml.interpreters.tape.registry import (
    SEMANTICS,
    Semantics,
    evaluate,
    ieee,
    is_ufunc,
    semantics,
)

# The families in the old file's order, which SEMANTICS (and TapeFunctions) keep.
# isort: off
from tapeml.interpreters.tape.elementwise import cast, cmp, constant, maximum, minimum, select
from tapeml.interpreters.tape.layout import (
    broadcast,
    concat,
    fold,
    pad,
    permute,
    reshape,
    slice_,
    unfold,
)
from tapeml.interpreters.tape.reductions import max_, max_over, sum_
from tapeml.interpreters.tape.contractions import matmul
from tapeml.interpreters.tape.convolutions import (
    avgpool2d,
    avgpool2d_backward,
    conv2d,
    conv2d_backward_input,
    conv2d_backward_weight,
    maxpool2d,
    maxpool2d_backward,
)
from tapeml.interpreters.tape.fused import fused  # (the name is the function's, not the module's)
from tapeml.interpreters.tape.indexing import scatter, take
from tapeml.interpreters.tape.scans import argmax, argmin, cumsum, iota
from tapeml.interpreters.tape.normalization import (
    layer_norm,
    layer_norm_backward,
    softmax,
    softmax_backward,
)
# isort: on


def _run(op_type: type[TapeOp]) -> Callable[..., tuple[np.ndarray]]:
    def run(self: InterpreterFunctions, interpreter: Interpreter, op: TapeOp, args: tuple):
        return (evaluate(op_type, *args, **op.params),)

    run.__name__ = f"run_{op_type.name.removeprefix('tape.')}"
    return run


TapeFunctions = register_impls(
    type(
        "TapeFunctions",
        (InterpreterFunctions,),
        {f"run_{op.name.removeprefix('tape.')}": impl(op)(_run(op)) for op in SEMANTICS},
    )
)
TapeFunctions.__doc__ = "xDSL interpreter implementations of the tape ops (see SEMANTICS)."

__all__ = [
    "SEMANTICS",
    "Semantics",
    "TapeFunctions",
    "argmax",
    "argmin",
    "avgpool2d",
    "avgpool2d_backward",
    "broadcast",
    "cast",
    "cmp",
    "concat",
    "constant",
    "conv2d",
    "conv2d_backward_input",
    "conv2d_backward_weight",
    "cumsum",
    "evaluate",
    "fold",
    "fused",
    "ieee",
    "iota",
    "is_ufunc",
    "layer_norm",
    "layer_norm_backward",
    "matmul",
    "max_",
    "max_over",
    "maximum",
    "maxpool2d",
    "maxpool2d_backward",
    "minimum",
    "pad",
    "permute",
    "reshape",
    "scatter",
    "select",
    "semantics",
    "slice_",
    "softmax",
    "softmax_backward",
    "sum_",
    "take",
    "unfold",
]
