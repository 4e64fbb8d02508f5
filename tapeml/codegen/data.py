"""A program's large constants as data beside its machine code, not in it.

A constant the program reads (a model's weights, when an imported or traced function holds
them) lowers to an llvm global holding its literal; LLVM then parses, keeps and emits every
element (a 1 MB weight cost 1.7 s of compile, a ResNet's 100 MB would cost minutes). Instead,
each constant global of more than DATA_BYTES becomes a pointer global of the same name, null in
the code and bound when the code is loaded to a 64-byte-aligned copy of the bytes, which the
compiled program keeps (`Native.data`); every address of it in the code becomes a load of that
pointer. The disk cache stores the bytes once per content (`store`, `fetch`), beside the object
code that refers to them by name.
"""

from __future__ import annotations

import ctypes
import hashlib
from typing import Any

import numpy as np
from llvmlite import ir
from xdsl.dialects import llvm
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp
from xdsl.rewriter import InsertPoint, Rewriter

from tapeml.codegen import disk_cache
from tapeml.transforms.arena import ALIGN

DATA_BYTES = 4096
"""A constant global larger than this is data; a smaller one stays in the code, where LLVM
may fold its elements."""

PTR = llvm.LLVMPointerType()


def detach(module: ModuleOp, larger_than: int = DATA_BYTES) -> dict[str, bytes]:
    """(The llvm dialect, in place.) Each constant global of more than `larger_than` bytes
    as a pointer global of its name (`initialize` makes it null in the LLVM IR), every address
    of it a load of the pointer; the globals' bytes, by name."""
    data: dict[str, bytes] = {}
    for op in list(module.ops):
        if (isinstance(op, llvm.GlobalOp) and op.constant is not None
                and isinstance(op.value, DenseIntOrFPElementsAttr)
                and len(op.value.data.data) > larger_than
                and op.value.get_element_type().bitwidth % 8 == 0):
            name = op.sym_name.data
            data[name] = op.value.data.data
            Rewriter.replace_op(op, llvm.GlobalOp(PTR, name, "external", alignment=8))
    if not data:
        return data
    for op in list(module.walk()):
        if isinstance(op, llvm.AddressOfOp) and op.global_name.root_reference.data in data:
            load = llvm.LoadOp(op.result, PTR, alignment=8)
            Rewriter.insert_op(load, InsertPoint.after(op))
            op.result.replace_uses_with_if(load.dereferenced_value,
                                           lambda use, load=load: use.operation is not load)
    return data


def initialize(ir_module: ir.Module, names: list[str]) -> None:
    """The detached globals in the LLVM IR: defined, null until `bind`."""
    for name in names:
        g = ir_module.get_global(name)
        g.linkage = ""  # (defined here, visible to the loader)
        g.initializer = ir.Constant(ir.PointerType(), None)


def bind(engine: Any, data: dict[str, bytes]) -> list[np.ndarray]:
    """Point each detached global of `engine`'s code at an aligned copy of its bytes; the
    copies, which must live as long as the code."""
    kept = []
    for name, payload in data.items():
        buffer = np.empty(len(payload) + ALIGN, np.uint8)
        start = (-buffer.__array_interface__["data"][0]) % ALIGN
        copy = buffer[start:start + len(payload)]
        copy[:] = np.frombuffer(payload, np.uint8)
        address = engine.get_global_value_address(name)
        if not address:  # (writing through it would crash the process)
            raise RuntimeError(f"tapeml: the compiled program does not define its data "
                               f"global {name!r}")
        ctypes.c_void_p.from_address(address).value = copy.__array_interface__["data"][0]
        kept.append(buffer)
    return kept


def digest(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def store(cache: Any, data: dict[str, bytes]) -> dict[str, str]:
    """Each global's bytes in the disk cache, keyed by their content; name -> that key."""
    keys = {}
    for name, payload in data.items():
        keys[name] = disk_cache.key("data", digest(payload))
        if cache.get(keys[name]) is None:
            cache.put(keys[name], payload)
    return keys


def fetch(cache: Any, keys: dict[str, str]) -> dict[str, bytes] | None:
    """The bytes `store` kept, by name; None if any is gone (evicted, damaged)."""
    data = {}
    for name, key in keys.items():
        payload = cache.get(key)
        if payload is None:
            return None
        data[name] = payload
    return data
