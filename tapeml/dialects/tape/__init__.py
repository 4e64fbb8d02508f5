"""The `tape` dialect: value-semantics ops on statically shaped f32/f64 tensors.

Each op is its definition, its parameters (`CLAUSES`) and its shape rule (`infer`); the shape rule
is both the builder's result-type inference and the verifier (see `tapeml/dialects/base.py`).
Numpy semantics live in `tapeml/interpreters/tape/` under the same op class.

Broadcasting is explicit: elementwise ops take operands of one type, `tape.broadcast` makes them so.

One module per op family, each defining its ops and their shape rules:

    types.py         element types, tensor types, the verifier helpers every shape rule uses
    elementwise.py   arithmetic, cmp, select, cast; ELEMENTWISE_BINARY/_UNARY, ELEMENTWISE
    constants.py     constant and its dense literals (printing, parsing, their diagnostics)
    layout.py        broadcast, reshape, permute, pad, slice, unfold, fold, concat
    reductions.py    sum, max
    contractions.py  matmul
    convolutions.py  conv2d, maxpool2d, avgpool2d and their backward ops
    fused.py         fused, yield
    canonicalize.py  the layout ops' canonicalization patterns (imported lazily by those ops)

This module assembles them: every op and helper under its old name (`tape.AddOp`,
`tape.numpy_to_dense`, ...), the tuple OPS of every op, and the Dialect `Tape`.
"""

from __future__ import annotations

from xdsl.ir import Dialect

from tapeml.dialects.base import TapeOp
from tapeml.dialects.tape.constants import (
    ConstantOp,
    DenseLiteralError,
    dense_literal_errors,
    dense_to_numpy,
    numpy_to_dense,
    print_dense,
)
from tapeml.dialects.tape.contractions import MatmulOp
from tapeml.dialects.tape.convolutions import (
    AvgPool2dBackwardOp,
    AvgPool2dOp,
    Conv2dBackwardInputOp,
    Conv2dBackwardWeightOp,
    Conv2dOp,
    MaxPool2dBackwardOp,
    MaxPool2dOp,
)
from tapeml.dialects.tape.elementwise import (
    CMP_PREDICATES,
    ELEMENTWISE,
    ELEMENTWISE_BINARY,
    ELEMENTWISE_UNARY,
    AddOp,
    CastOp,
    CmpOp,
    DivOp,
    ExpOp,
    LogOp,
    MaximumOp,
    MinimumOp,
    MulOp,
    NegOp,
    PowOp,
    ReluOp,
    SelectOp,
    SigmoidOp,
    SqrtOp,
    SubOp,
    TanhOp,
)
from tapeml.dialects.tape.fused import FusedOp, YieldOp
from tapeml.dialects.tape.layout import (
    BroadcastOp,
    ConcatOp,
    FoldOp,
    PadOp,
    PermuteOp,
    ReshapeOp,
    SliceOp,
    UnfoldOp,
)
from tapeml.dialects.tape.reductions import MaxOp, SumOp
from tapeml.dialects.tape.types import dtype_of, element_type, tensor_type, window_count

OPS: tuple[type[TapeOp], ...] = (
    *ELEMENTWISE_BINARY,
    *ELEMENTWISE_UNARY,
    CmpOp,
    SelectOp,
    ConstantOp,
    CastOp,
    BroadcastOp,
    ReshapeOp,
    PermuteOp,
    PadOp,
    SliceOp,
    UnfoldOp,
    FoldOp,
    ConcatOp,
    SumOp,
    MaxOp,
    MatmulOp,
    Conv2dOp,
    MaxPool2dOp,
    AvgPool2dOp,
    Conv2dBackwardInputOp,
    Conv2dBackwardWeightOp,
    MaxPool2dBackwardOp,
    AvgPool2dBackwardOp,
    FusedOp,
)

Tape = Dialect("tape", [*OPS, YieldOp], [])

__all__ = [
    "CMP_PREDICATES",
    "ELEMENTWISE",
    "ELEMENTWISE_BINARY",
    "ELEMENTWISE_UNARY",
    "OPS",
    "AddOp",
    "AvgPool2dBackwardOp",
    "AvgPool2dOp",
    "BroadcastOp",
    "CastOp",
    "CmpOp",
    "ConcatOp",
    "ConstantOp",
    "Conv2dBackwardInputOp",
    "Conv2dBackwardWeightOp",
    "Conv2dOp",
    "DenseLiteralError",
    "DivOp",
    "ExpOp",
    "FoldOp",
    "FusedOp",
    "LogOp",
    "MatmulOp",
    "MaxOp",
    "MaxPool2dBackwardOp",
    "MaxPool2dOp",
    "MaximumOp",
    "MinimumOp",
    "MulOp",
    "NegOp",
    "PadOp",
    "PermuteOp",
    "PowOp",
    "ReluOp",
    "ReshapeOp",
    "SelectOp",
    "SigmoidOp",
    "SliceOp",
    "SqrtOp",
    "SubOp",
    "SumOp",
    "TanhOp",
    "Tape",
    "TapeOp",
    "UnfoldOp",
    "YieldOp",
    "dense_literal_errors",
    "dense_to_numpy",
    "dtype_of",
    "element_type",
    "numpy_to_dense",
    "print_dense",
    "tensor_type",
    "window_count",
]
