"""The gpu dialect on xDSL's interpreter (xDSL 0.75 has no implementation of it): an emulated GPU
that runs the kernels `convert-loops-to-gpu` writes, thread by thread, so their results can be
checked against the tape interpreter without a GPU.

    gpu.launch_func     runs the gpu.func once per thread of every block (blocks and threads in
                        x-fastest order); a kernel with gpu.barrier runs each block's threads as
                        Python threads that meet at a threading.Barrier, each on its own
                        interpreter (an interpreter's frames are not shared between threads)
    gpu.thread_id, block_id, block_dim, grid_dim, global_id    the running thread's
    gpu.barrier         waits for the block's other threads (nothing without any)
    gpu.alloc / dealloc device memory is host memory here: zeroed buffers, as memref.alloc's
    kernel.shared       the running block's buffer (made when the block starts, zeroed)

Device buffers are the host's, so the host function's arguments are numpy buffers as for the
loop form. Slow (every thread interprets its ops): for small shapes.
"""

from __future__ import annotations

import itertools
import math
import threading
from dataclasses import dataclass, field
from typing import Any

from xdsl.dialects import gpu
from xdsl.dialects.builtin import IndexType
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    PythonValues,
    ReturnedValues,
    TerminatorValue,
    impl,
    impl_terminator,
    register_impls,
)
from xdsl.interpreters.builtin import scalar_attr, xtype_for_el_type
from xdsl.interpreters.shaped_array import ShapedArray
from xdsl.interpreters.utils.ptr import TypedPtr
from xdsl.ir import Operation
from xdsl.traits import SymbolTable

from tapeml.dialects import kernel


@dataclass
class _Thread:
    """Where the running GPU thread is, and what its block shares."""

    thread: tuple[int, int, int]
    block: tuple[int, int, int]
    block_dim: tuple[int, int, int]
    grid_dim: tuple[int, int, int]
    shared: dict[Operation, ShapedArray] = field(default_factory=dict)
    barrier: threading.Barrier | None = None


_running = threading.local()  # .thread: the _Thread this Python thread runs, if any
_AXES = {gpu.DimensionEnum.X: 0, gpu.DimensionEnum.Y: 1, gpu.DimensionEnum.Z: 2}


def _zeros(memref_type: Any, interpreter: Interpreter) -> ShapedArray:
    shape = list(memref_type.get_shape())
    xtype = xtype_for_el_type(memref_type.get_element_type(), interpreter.index_bitwidth)
    return ShapedArray(TypedPtr[Any].zeros(math.prod(shape), xtype=xtype), shape)


def _current(op: Operation) -> _Thread:
    state = getattr(_running, "thread", None)
    if state is None:
        raise RuntimeError(f"{op.name} outside a gpu.launch_func")
    return state


def _run_thread(interpreter: Interpreter, kernel_func: gpu.FuncOp, args: tuple[Any, ...],
                state: _Thread) -> None:
    previous = getattr(_running, "thread", None)
    _running.thread = state
    try:
        interpreter.run_ssacfg_region(kernel_func.body, args, kernel_func.sym_name.data)
    finally:
        _running.thread = previous


def _run_block_threaded(interpreters: list[Interpreter], kernel_func: gpu.FuncOp,
                        args: tuple[Any, ...], states: list[_Thread]) -> None:
    """Each thread of one block on a Python thread (and interpreter) of its own, meeting at the
    barriers."""
    barrier = threading.Barrier(len(states))
    errors: list[BaseException] = []

    def run(state: _Thread, interpreter: Interpreter) -> None:
        state.barrier = barrier
        try:
            _run_thread(interpreter, kernel_func, args, state)
        except threading.BrokenBarrierError:
            pass  # another thread failed first: its error is the one reported
        except BaseException as error:  # noqa: BLE001 - re-raised on the launching thread
            errors.append(error)
            barrier.abort()

    workers = [threading.Thread(target=run, args=pair)
               for pair in zip(states, interpreters, strict=True)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]


def launch(interpreter: Interpreter, kernel_func: gpu.FuncOp, grid: tuple[int, int, int],
           block: tuple[int, int, int], operands: tuple[Any, ...]) -> None:
    """Run `kernel_func` on `operands` over `grid` x `block` threads (see the module doc)."""
    body_ops = list(kernel_func.walk())
    shared = [o for o in body_ops if isinstance(o, kernel.SharedOp)]
    synchronized = any(isinstance(o, gpu.BarrierOp) for o in body_ops)
    threads = math.prod(block)
    interpreters = [_own_interpreter(interpreter) for _ in range(threads)] if (
        synchronized and threads > 1) else []
    for bz, by, bx in itertools.product(*(range(n) for n in reversed(grid))):
        memory = {o: _zeros(o.result.type, interpreter) for o in shared}
        states = [_Thread((tx, ty, tz), (bx, by, bz), block, grid, memory)
                  for tz, ty, tx in itertools.product(*(range(n) for n in reversed(block)))]
        if interpreters:
            _run_block_threaded(interpreters, kernel_func, operands, states)
            continue
        for state in states:
            _run_thread(interpreter, kernel_func, operands, state)


def _own_interpreter(interpreter: Interpreter) -> Interpreter:
    from tapeml.interpreters import make_interpreter

    own = make_interpreter(interpreter.module)
    own.index_bitwidth = interpreter.index_bitwidth
    return own


@register_impls
class GPUFunctions(InterpreterFunctions):
    @impl(gpu.LaunchFuncOp)
    def run_launch_func(self, interpreter: Interpreter, op: gpu.LaunchFuncOp,
                        args: PythonValues) -> PythonValues:
        sizes = [a.value.data if hasattr(a, "value") else int(a) for a in args[:6]]
        kernel_func = SymbolTable.lookup_symbol(op, op.kernel)
        if not isinstance(kernel_func, gpu.FuncOp):
            raise RuntimeError(f"gpu.launch_func: no gpu.func {op.kernel}")
        launch(interpreter, kernel_func, tuple(sizes[:3]), tuple(sizes[3:]),
               tuple(args[len(args) - len(op.kernelOperands):]))
        return ()

    def _index(self, interpreter: Interpreter, value: int) -> Any:
        return scalar_attr(value, IndexType(), interpreter.index_bitwidth)

    @impl(gpu.ThreadIdOp)
    def run_thread_id(self, interpreter: Interpreter, op: Operation, args: PythonValues):
        return (self._index(interpreter, _current(op).thread[_AXES[op.dimension.data]]),)

    @impl(gpu.BlockIdOp)
    def run_block_id(self, interpreter: Interpreter, op: Operation, args: PythonValues):
        return (self._index(interpreter, _current(op).block[_AXES[op.dimension.data]]),)

    @impl(gpu.BlockDimOp)
    def run_block_dim(self, interpreter: Interpreter, op: Operation, args: PythonValues):
        return (self._index(interpreter, _current(op).block_dim[_AXES[op.dimension.data]]),)

    @impl(gpu.GridDimOp)
    def run_grid_dim(self, interpreter: Interpreter, op: Operation, args: PythonValues):
        return (self._index(interpreter, _current(op).grid_dim[_AXES[op.dimension.data]]),)

    @impl(gpu.GlobalIdOp)
    def run_global_id(self, interpreter: Interpreter, op: Operation, args: PythonValues):
        state, axis = _current(op), _AXES[op.dimension.data]
        return (self._index(interpreter,
                            state.block[axis] * state.block_dim[axis] + state.thread[axis]),)

    @impl(gpu.BarrierOp)
    def run_barrier(self, interpreter: Interpreter, op: Operation, args: PythonValues):
        barrier = _current(op).barrier
        if barrier is not None:
            barrier.wait()
        return ()

    @impl_terminator(gpu.ReturnOp)
    def run_return(self, interpreter: Interpreter, op: Operation,
                   args: PythonValues) -> tuple[TerminatorValue, PythonValues]:
        return ReturnedValues(args), ()

    @impl(gpu.AllocOp)
    def run_alloc(self, interpreter: Interpreter, op: gpu.AllocOp, args: PythonValues):
        return (_zeros(op.result.type, interpreter),)

    @impl(gpu.DeallocOp)
    def run_dealloc(self, interpreter: Interpreter, op: Operation, args: PythonValues):
        return ()

    @impl(kernel.SharedOp)
    def run_shared(self, interpreter: Interpreter, op: kernel.SharedOp, args: PythonValues):
        return (_current(op).shared[op],)
