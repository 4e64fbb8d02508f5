"""The kernel dialect on xDSL's interpreter: `kernel.gemm` as numpy's matmul over strided views
of the buffers, `kernel.parallel_for` as one call over the whole range, `kernel.view` as an
array over the same memory from its offset on."""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import IndexType
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls
from xdsl.interpreters.builtin import scalar_attr
from xdsl.interpreters.shaped_array import ShapedArray
from xdsl.interpreters.utils.ptr import TypedPtr
from xdsl.traits import SymbolTable

from tapeml.dialects.kernel import GemmOp, GemmSpec, MarkOp, ParallelForOp, ViewOp


def _flat(buffer: ShapedArray, dtype: np.dtype) -> np.ndarray:
    raw = buffer.data_ptr.raw
    count = (len(raw.memory) - raw.offset) // dtype.itemsize
    return np.frombuffer(raw.memory, dtype, count, raw.offset)


@register_impls
class KernelFunctions(InterpreterFunctions):
    @impl(ParallelForOp)
    def run_parallel_for(self, interpreter: Interpreter, op: ParallelForOp,
                         args: PythonValues) -> PythonValues:
        callee = SymbolTable.lookup_symbol(op, op.callee)
        buffers = args[:len(op.buffers)]
        end = args[-1] if op.count is not None else scalar_attr(
            op.iterations.value.data, IndexType(), interpreter.index_bitwidth)
        interpreter.call_op(callee, (*buffers, scalar_attr(0, IndexType(),
                                                           interpreter.index_bitwidth), end))
        return ()

    @impl(MarkOp)
    def run_mark(self, interpreter: Interpreter, op: MarkOp, args: PythonValues) -> PythonValues:
        return ()  # (a profiled run's clock; nothing to compute)

    @impl(ViewOp)
    def run_view(self, interpreter: Interpreter, op: ViewOp, args: PythonValues) -> PythonValues:
        source, offset = args  # the offset a runtime scalar (an IntegerAttr)
        data = source.data_ptr
        start = TypedPtr(data.raw + offset.value.data * data.size, xtype=data.xtype)
        return (ShapedArray(start, list(op.result.type.get_shape())),)

    @impl(GemmOp)
    def run_gemm(self, interpreter: Interpreter, op: GemmOp, args: PythonValues) -> PythonValues:
        s = op.spec
        dtype = np.dtype(np.float32 if s.dtype == "f32" else np.float64)
        a, b, c = (_flat(x, dtype) for x in args[:3])
        if not (s.batch and s.m and s.n):
            return ()
        item = dtype.itemsize
        if s.a_taps:  # each column of A a window's tap (kernel.gemm's a_taps)
            columns = np.array([s.a_column(p) for p in range(s.k)], np.int64)
            lhs = a[s.a[0] * np.arange(s.batch)[:, None, None] + columns[None, None, :]
                    + s.a[1] * np.arange(s.m)[None, :, None]]
        else:
            lhs = np.lib.stride_tricks.as_strided(a, (s.batch, s.m, s.k),
                                                  [x * item for x in s.a], writeable=False)
        rhs = np.lib.stride_tricks.as_strided(b, (s.batch, s.k, s.n),
                                              [x * item for x in s.b], writeable=False)
        product = np.matmul(lhs, rhs)
        steps = (item, s.m * item) if s.c_transposed else (s.n * item, item)  # (i, j)
        blocks = np.lib.stride_tricks.as_strided(
            c, (s.batch, s.m, s.n), (s.c0 * item, *steps)) if s.c0 else None
        if blocks is None:  # every batch adds into one block, in batch order
            block = np.lib.stride_tricks.as_strided(c, (s.m, s.n), steps)
            if not s.accumulate:
                block[...] = 0
            for p in product:
                block += p
        elif s.accumulate:
            blocks += product
        else:
            blocks[...] = product
        extra = [_flat(x, dtype) for x in args[3:]]
        _epilogue(s, blocks if blocks is not None else block[None],
                  extra[0] if s.bias else None, extra[-1] if s.residual else None)
        return ()


def _epilogue(s: GemmSpec, blocks: np.ndarray, bias: np.ndarray | None,
              residual: np.ndarray | None) -> None:
    """kernel.gemm's epilogue on its C blocks (batch x m x n), in place: + bias[i] or bias[j],
    + the residual's blocks, then relu as tape.relu computes it (maximum(x, +0): NaN stays,
    -0 becomes +0)."""
    with np.errstate(all="ignore"):  # IEEE results, as the compiled code's
        if s.bias == "rows":
            blocks += bias[:s.m, None]
        elif s.bias == "columns":
            blocks += bias[:s.n]
        if s.residual:  # its blocks laid out as C's
            laid = residual[:blocks.size].reshape(len(blocks), *(
                (s.n, s.m) if s.c_transposed else (s.m, s.n)))
            blocks += laid.transpose(0, 2, 1) if s.c_transposed else laid
        if s.relu:
            zero = np.zeros((), blocks.dtype)
            blocks[...] = np.maximum(blocks, zero) + zero
