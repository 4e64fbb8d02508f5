"""A convolution traced, fused and lowered by tape-to-loops with the options a test names, and
the lowered module printed, parsed back and interpreted: what the tests of the CPU's forms of a
convolution check against the trace's values."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, memref, scf
from xdsl.parser import Parser

import tapeml
from tapeml import nn
from tapeml.dialects import kernel
from tapeml.dialects.kernel import GemmSpec, Kernel
from tapeml.transforms.fuse import fuse
from tapeml.transforms.to_loops import lower_module


def lowered_convolution(w: np.ndarray, x: np.ndarray, padding: int, **options: Any
                        ) -> tuple[list[GemmSpec], np.ndarray, np.ndarray]:
    """conv2d(x, w, padding) lowered with `options`: its kernel.gemm specs, the interpreter's
    result of the lowered module (printed and parsed back first) and the trace's."""
    step = tapeml.trace(lambda x: nn.conv2d(x, w, padding=padding), x)
    expected = step(x)
    fuse(step.module)  # the traced im2col and matmul raised into tape.conv2d
    lowered = tapeml.Program.parse(str(step))
    lower_module(lowered.module, **options)
    specs = [op.spec for op in lowered.module.walk() if isinstance(op, kernel.GemmOp)]
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, memref.MemRef, scf.Scf, Kernel):
        ctx.load_dialect(dialect)
    module = Parser(ctx, str(lowered.module)).parse_module()
    module.verify()
    out = np.zeros(expected.size)
    tapeml.interpret(module, lowered.name, x.reshape(-1), out)
    return specs, out.reshape(expected.shape), expected
