"""Running programs on xDSL's interpreter: tape ops in numpy, plus every dialect our lowerings
emit (xDSL's own implementations, and ours where xDSL 0.75 has none)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    AnyFloat,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    TensorType,
)
from xdsl.interpreter import Interpreter
from xdsl.interpreters import register_implementations
from xdsl.interpreters.shaped_array import ShapedArray
from xdsl.interpreters.utils.ptr import RawPtr, TypedPtr
from xdsl.ir import Attribute, Operation

from tapeml.dialects.tape import dtype_of
from tapeml.errors import InterpretError
from tapeml.interpreters.gpu import GPUFunctions
from tapeml.interpreters.kernel import KernelFunctions
from tapeml.interpreters.scalars import ScalarFunctions
from tapeml.interpreters.scf import ParallelFunctions
from tapeml.interpreters.stores import BooleanStores
from tapeml.interpreters.tape import TapeFunctions


def make_interpreter(module: ModuleOp, ctx: Context | None = None) -> Interpreter:
    """An xDSL interpreter for `module` that knows every op tapeml emits."""
    interpreter = Interpreter(module)
    register_implementations(interpreter, ctx or Context())
    for functions in (TapeFunctions(), ScalarFunctions(), ParallelFunctions(),
                      KernelFunctions(), GPUFunctions()):
        interpreter.register_implementations(functions)
    interpreter.register_implementations(BooleanStores(), override=True)  # (xDSL's memref's)
    return interpreter


def scalar_op_on_tensors(module: ModuleOp) -> tuple[Operation, str] | None:
    """The first arith or math op of `module` on tensors, and why it cannot run: valid IR
    (MLIR's arith ops are elementwise on tensors too), but the interpreter's arith and math
    run on scalars (xDSL's own failed on an assertion)."""
    for op in module.walk():
        dialect = op.name.split(".", 1)[0]
        if dialect in ("arith", "math"):
            for value in (*op.operands, *op.results):
                if isinstance(value.type, TensorType):
                    return op, (f"{op.name} on {value.type}: the interpreter runs {dialect} ops "
                                "on scalars (on tensors, the tape dialect's: tape.constant, "
                                "tape.add, tape.mul, ...)")
    return None


def _find_function(module: ModuleOp, name: str) -> func.FuncOp:
    functions = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    for f in functions:
        if f.sym_name.data == name:
            return f
    known = ", ".join(f"@{f.sym_name.data}" for f in functions) or "none"
    raise InterpretError(f"no function @{name} in the module (functions: {known})")


def _checked_array(value: Any, t: TensorType | MemRefType, where: str) -> np.ndarray:
    dtype = dtype_of(t)
    if value is None:  # (np.asarray(None) is an object array of shape ())
        raise InterpretError(f"{where} must be an array for {t}, got None")
    # numpy values keep their dtype (and must match); Python numbers and lists take t's
    typed = isinstance(value, np.ndarray | np.generic)
    array = np.asarray(value) if typed else np.asarray(value, dtype=dtype)
    if array.dtype != dtype:
        raise InterpretError(f"{where} must have dtype {dtype} for {t}, got {array.dtype}")
    if array.shape != t.get_shape():
        raise InterpretError(f"{where} must have shape {t.get_shape()} for {t}, got {array.shape}")
    return array


def _to_runtime(value: Any, t: Attribute, where: str) -> Any:
    """A Python argument as the interpreter's value for type `t`, checked against it."""
    if isinstance(t, TensorType):
        return _checked_array(value, t, where)
    if isinstance(t, MemRefType):
        # a buffer: the interpreter reads and writes the caller's array in place
        array = _checked_array(value, t, where)
        if not (array.flags.c_contiguous and array.flags.writeable):
            raise InterpretError(f"{where} must be a writable C-contiguous array for {t}")
        raw = RawPtr(array.reshape(-1).view(np.uint8))
        return ShapedArray(TypedPtr(raw, xtype=t.get_element_type()), list(t.get_shape()))
    if isinstance(t, AnyFloat):
        given = getattr(value, "dtype", None)  # numpy scalars are checked; Python floats take t
        if given is not None and np.dtype(given) != np.dtype(f"float{t.bitwidth}"):
            raise InterpretError(f"{where} must be {t}, got a {np.dtype(given)} value")
        return FloatAttr(float(value), t)
    if isinstance(t, IntegerType | IndexType):
        if not isinstance(value, int | np.integer):
            raise InterpretError(f"{where} must be an integer for {t}, got {value!r}")
        return IntegerAttr(int(value), IntegerType(64) if isinstance(t, IndexType) else t)
    raise InterpretError(f"{where} has type {t}, which tapeml.interpret cannot pass")


def _from_runtime(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        # a fresh array the caller owns: never a view of an argument or a read-only broadcast
        return np.array(value, copy=True, order="C")
    if isinstance(value, ShapedArray):
        dtype = dtype_of(TensorType(value.element_type, value.shape))
        memory = bytes(value.data_ptr.raw.memory)
        return np.frombuffer(memory, dtype=dtype).reshape(value.shape).copy()
    if isinstance(value, FloatAttr):
        return np.dtype(f"float{value.type.bitwidth}").type(value.value.data)
    if isinstance(value, IntegerAttr):
        return value.value.data
    return value


def interpret(module: ModuleOp, name: str, *args: Any) -> tuple[Any, ...]:
    """Run function `@name` of `module` on xDSL's interpreter.

    Tensor arguments are numpy arrays (or array-likes) whose shape and dtype must match the
    function's argument types; memref arguments are C-contiguous arrays the function may write
    in place; scalar arguments are Python numbers. Returns the results as a tuple of fresh numpy
    arrays / scalars.
    """
    f = _find_function(module, name)
    if (found := scalar_op_on_tensors(module)) is not None:
        raise InterpretError(found[1])
    inputs: Sequence[Attribute] = f.function_type.inputs.data
    if len(args) != len(inputs):
        raise InterpretError(f"@{name} takes {len(inputs)} arguments, got {len(args)}")
    names = [f" (%{a.name_hint})" if a.name_hint else "" for a in f.body.blocks[0].args]
    values = tuple(
        _to_runtime(a, t, f"argument {i}{names[i]} of @{name}")
        for i, (a, t) in enumerate(zip(args, inputs, strict=True))
    )
    with np.errstate(all="ignore"):
        results = make_interpreter(module).call_op(f, values)
    return tuple(_from_runtime(r) for r in results)
