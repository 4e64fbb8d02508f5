"""The `tape` dialect: value-semantics ops on statically shaped tensors of i1, i32, i64, f32 and
f64 (types.py; each op says which it takes).

Each op is its definition, its parameters (`CLAUSES`) and its shape rule (`infer`); the shape rule
is both the builder's result-type inference and the verifier (see `tapeml/dialects/base.py`).
Numpy semantics live in `tapeml/interpreters/tape/` under the same op class.

Broadcasting is explicit: elementwise ops take operands of one type, `tape.broadcast` makes them so.

One module per op family, each defining its ops and their shape rules:

    types.py         element types, tensor types, the verifier helpers every shape rule uses
    elementwise.py   arithmetic, cmp, select, cast, stop_gradient; ELEMENTWISE_BINARY/_UNARY,
                     NUMERIC_UNARY, NUMERIC_BINARY, IDENTITY_UNARY, ELEMENTWISE
    constants.py     constant and its dense literals (printing, parsing, their diagnostics)
    layout.py        broadcast, reshape, permute, pad, slice, unfold, fold, concat
    reductions.py    sum, max
    normalization.py layer_norm, softmax and their backward ops (over the last axis)
    indexing.py      take, scatter (gather and scatter along one axis)
    scans.py         argmax, argmin, cumsum, iota (along one axis)
    contractions.py  matmul
    convolutions.py  conv2d, maxpool2d, avgpool2d and their backward ops
    fused.py         fused, and its body's yield and index
    canonicalize.py  the layout ops' canonicalization patterns (imported lazily by those ops)

This module assembles them: every name a family exports (its `__all__`: `tape.AddOp`,
`tape.numpy_to_dense`, ...), the tuple OPS of every op, and the Dialect `Tape`. A new
elementwise op joins OPS through ELEMENTWISE_BINARY/_UNARY; any other op is listed in OPS.
"""

from __future__ import annotations

from xdsl.ir import Dialect

from tapeml.dialects.base import TapeOp
from tapeml.dialects.tape import (
    constants,
    contractions,
    convolutions,
    elementwise,
    fused,
    indexing,
    layout,
    normalization,
    reductions,
    scans,
    types,
)
from tapeml.dialects.tape.constants import *  # noqa: F403 (each family's __all__)
from tapeml.dialects.tape.contractions import *  # noqa: F403
from tapeml.dialects.tape.convolutions import *  # noqa: F403
from tapeml.dialects.tape.elementwise import *  # noqa: F403
from tapeml.dialects.tape.fused import *  # noqa: F403
from tapeml.dialects.tape.indexing import *  # noqa: F403
from tapeml.dialects.tape.layout import *  # noqa: F403
from tapeml.dialects.tape.normalization import *  # noqa: F403
from tapeml.dialects.tape.reductions import *  # noqa: F403
from tapeml.dialects.tape.scans import *  # noqa: F403
from tapeml.dialects.tape.types import *  # noqa: F403

OPS: tuple[type[TapeOp], ...] = (
    *elementwise.ELEMENTWISE_BINARY,
    *elementwise.ELEMENTWISE_UNARY,
    *elementwise.NUMERIC_UNARY,
    *elementwise.NUMERIC_BINARY,
    *elementwise.INTEGER_BINARY,
    *elementwise.INTEGER_UNARY,
    *elementwise.IDENTITY_UNARY,
    elementwise.CmpOp,
    elementwise.SelectOp,
    constants.ConstantOp,
    elementwise.CastOp,
    layout.BroadcastOp,
    layout.ReshapeOp,
    layout.PermuteOp,
    layout.PadOp,
    layout.SliceOp,
    layout.UnfoldOp,
    layout.FoldOp,
    layout.ConcatOp,
    indexing.TakeOp,
    indexing.ScatterOp,
    reductions.SumOp,
    reductions.MaxOp,
    normalization.LayerNormOp,
    normalization.LayerNormBackwardOp,
    normalization.SoftmaxOp,
    normalization.SoftmaxBackwardOp,
    *scans.SCANS,
    contractions.MatmulOp,
    convolutions.Conv2dOp,
    convolutions.MaxPool2dOp,
    convolutions.AvgPool2dOp,
    convolutions.Conv2dBackwardInputOp,
    convolutions.Conv2dBackwardWeightOp,
    convolutions.MaxPool2dBackwardOp,
    convolutions.AvgPool2dBackwardOp,
    fused.FusedOp,
)

Tape = Dialect("tape", [*OPS, fused.YieldOp, fused.IndexOp], [])  # body-only ops: fused's

__all__ = ["OPS", "Tape", "TapeOp", *constants.__all__, *contractions.__all__,
           *convolutions.__all__, *elementwise.__all__, *fused.__all__, *indexing.__all__,
           *layout.__all__, *normalization.__all__,
           *reductions.__all__, *scans.__all__, *types.__all__]
