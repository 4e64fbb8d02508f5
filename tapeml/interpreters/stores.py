"""`memref.store` for xDSL's interpreter, with an i1 stored as the byte compiled code stores.

xDSL keeps an i1 true as the integer -1 and packs it as a signed byte, 0xFF. numpy reads any
non-zero byte as True, so the values compare equal, but the bytes are not what the CPU backend
(zext: 1) or a GPU (`selp.b16 1, 0`) stores, and a buffer the emulated GPU returned then read
as a number by compiled code (astype, sum, ~) counted 255."""

from __future__ import annotations

from typing import Any

from xdsl.dialects import memref
from xdsl.dialects.builtin import IntegerType
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    PythonValues,
    impl,
    register_impls,
)


@register_impls
class BooleanStores(InterpreterFunctions):
    @impl(memref.StoreOp)
    def run_store(self, interpreter: Interpreter, op: memref.StoreOp, args: PythonValues
                  ) -> PythonValues:
        value, buffer, *indices = args
        data: Any = value.value.data
        element = op.value.type
        if isinstance(element, IntegerType) and element.width.data == 1:
            data &= 1
        buffer.store(tuple(i.value.data for i in indices), data)
        return ()
