"""An llvm-dialect module as LLVM IR text, written directly: the text xDSL's `convert_module`
and llvmlite's printer make of it, byte for byte, for the ops the CPU lowering produces
(convert-loops-to-llvm's, data.detach's), 3-4x faster: building llvmlite's IR objects and
printing them was 20 ms of W3's first call and 65 ms of the 2-layer GPT step's (5 and 20
now). With TAPEML_CHECKS (the test suite) the CPU backend writes both and compares them, so
every program the suite compiles checks it; tests/test_llvm_text.py makes sure the workloads'
kinds of program are printed here, not left to the fallback.

`llvm_ir(module, ...)` raises `Unsupported` for anything else (an op, a type, an attribute it
does not print as they do, a value used in a block before the block defining it); the CPU
backend then takes xDSL's way.

The text follows llvmlite's conventions: every local value and block is named ".N", numbered
per function in the order llvmlite's builder creates them (the parameters, the return value,
every block, each block's phis, then one per instruction, void ones included), and quoted; a
constant is printed in place, a float as the hexadecimal of its double; functions' and
globals' names are quoted; declarations of intrinsics follow the functions, in the order of
their first call.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection
from typing import Any

from xdsl.dialects import llvm
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue


class Unsupported(Exception):
    """The module holds something this printer does not write as xDSL's conversion does."""


def llvm_ir(module: ModuleOp, triple: str, data_layout: str = "", *,
            null_globals: Collection[str] = (), noalias: Callable[[str], bool] | None = None,
            noinline: Collection[str] = (), attributes: str = "") -> str:
    """`module` (llvm.func and llvm.mlir.global ops) as LLVM IR for `triple` and
    `data_layout`, with, as the CPU backend writes them into llvmlite's module before printing
    it: each global of `null_globals` defined as a null pointer (data.initialize's); each
    pointer parameter of a defined function for which `noalias(name)` holds noalias; the
    functions `noinline` noinline; `attributes` after every definition's signature."""
    return _Printer(null_globals, noalias, noinline, attributes).module(module, triple,
                                                                        data_layout)


def _type(t: Attribute) -> str:
    if isinstance(t, IntegerType):
        text = f"i{t.width.data}"
    elif isinstance(t, Float32Type):
        text = "float"
    elif isinstance(t, Float64Type):
        text = "double"
    elif isinstance(t, llvm.LLVMArrayType):
        text = f"[{t.size.data} x {_type(t.type)}]"
    elif isinstance(t, llvm.LLVMPointerType) and not (
            isinstance(t.addr_space, IntAttr) and t.addr_space.data):
        text = "ptr"
    elif isinstance(t, llvm.LLVMVoidType):
        text = "void"
    else:
        raise Unsupported(f"type {t}")
    return text


def _hex_double(value: float) -> str:
    """llvmlite's float constant: the bits of its double, '#16x' (space-padded, as it does)."""
    return format(struct.unpack("Q", struct.pack("d", value))[0], "#16x")


def _float(value: float, t: Attribute) -> str:
    if isinstance(t, Float32Type):
        value = struct.unpack("f", struct.pack("f", value))[0]
    elif not isinstance(t, Float64Type):
        raise Unsupported(f"float constant of type {t}")
    return _hex_double(value)


def _constant(value: Attribute, t: Attribute) -> str:
    """The constant as llvmlite prints it in an operand (without its type)."""
    if isinstance(value, IntegerAttr):
        return str(value.value.data)
    if isinstance(value, FloatAttr):
        return _float(value.value.data, t)
    raise Unsupported(f"constant {value}")


def _quoted(name: str) -> str:
    if "\\" in name or '"' in name:
        name = name.replace("\\", "\\5c").replace('"', "\\22")
    return f'"{name}"'


_BINARY = {llvm.AddOp: "add", llvm.SubOp: "sub", llvm.MulOp: "mul", llvm.SDivOp: "sdiv",
           llvm.UDivOp: "udiv", llvm.SRemOp: "srem", llvm.URemOp: "urem", llvm.AndOp: "and",
           llvm.OrOp: "or", llvm.XOrOp: "xor", llvm.ShlOp: "shl", llvm.AShrOp: "ashr",
           llvm.LShrOp: "lshr", llvm.FAddOp: "fadd", llvm.FSubOp: "fsub", llvm.FMulOp: "fmul",
           llvm.FDivOp: "fdiv", llvm.FRemOp: "frem"}
_CASTS = {llvm.TruncOp: "trunc", llvm.ZExtOp: "zext", llvm.SExtOp: "sext",
          llvm.BitcastOp: "bitcast", llvm.FPExtOp: "fpext", llvm.FPTruncOp: "fptrunc",
          llvm.SIToFPOp: "sitofp"}
_ICMP = {0: "eq", 1: "ne", 2: "slt", 3: "sle", 4: "sgt", 5: "sge", 6: "ult", 7: "ule",
         8: "ugt", 9: "uge"}


class _Printer:
    def __init__(self, null_globals: Collection[str], noalias: Callable[[str], bool] | None,
                 noinline: Collection[str], attributes: str) -> None:
        self.null_globals = set(null_globals)
        self.noalias = noalias
        self.noinline = set(noinline)
        self.attributes = f" {attributes}" if attributes else ""
        self.functions: dict[str, llvm.FuncOp] = {}
        self.globals: dict[str, str] = {}  # name -> its type
        self.intrinsics: dict[str, str] = {}  # name -> its declaration, in first-call order
        self.types: dict[int, tuple[Attribute, str]] = {}  # id -> (the type, kept; its text)
        self.constant_indices: dict[int, tuple[Attribute, tuple[int, ...]]] = {}

    def type(self, t: Attribute) -> str:
        """_type, cached by the attribute's identity for this module (hashing an xDSL type
        costs more than printing it)."""
        known = self.types.get(id(t))
        if known is None:
            known = self.types[id(t)] = (t, _type(t))
        return known[1]

    def indices(self, raw: Any) -> tuple[int, ...]:
        """A getelementptr's constant indices (a dense array: slow to read)."""
        known = self.constant_indices.get(id(raw))
        if known is None:
            known = self.constant_indices[id(raw)] = (raw, tuple(raw.iter_values()))
        return known[1]

    def module(self, module: ModuleOp, triple: str, data_layout: str) -> str:
        if "llvm.target_triple" in module.attributes:
            raise Unsupported("llvm.target_triple")
        out = ['; ModuleID = ""', f'target triple = "{triple}"',
               f'target datalayout = "{data_layout}"', ""]
        functions = []
        for op in module.ops:
            if isinstance(op, llvm.GlobalOp):
                out.append(self.global_(op))
                self.globals[op.sym_name.data] = self.type(op.global_type)
            elif isinstance(op, llvm.FuncOp):
                functions.append(op)
                self.functions[op.sym_name.data] = op
            else:
                raise Unsupported(op.name)
        for op in functions:
            out += [self.function(op), ""]
        for declaration in self.intrinsics.values():
            out += [declaration, ""]
        return "\n".join(out)

    def global_(self, op: llvm.GlobalOp) -> str:
        name = op.sym_name.data
        if op.addr_space.value.data != 0 or op.thread_local_ is not None:
            raise Unsupported(f"global {name}")
        t = _type(op.global_type)
        if name in self.null_globals:
            if t != "ptr":
                raise Unsupported(f"global {name} defined null")
            return f"@{_quoted(name)} = global ptr null"
        linkage = op.linkage.linkage.data
        kind = "constant" if op.constant is not None else "global"
        head = f"@{_quoted(name)} = {'' if linkage == 'external' else linkage + ' '}"
        if op.value is None:
            if linkage != "external":
                raise Unsupported(f"global {name} without a value")
            return f"{head}{kind} {t}"
        return f"{head}{kind} {t} {self.literal(op.global_type, op.value)}"

    def literal(self, t: Attribute, value: Attribute) -> str:
        if isinstance(t, llvm.LLVMArrayType) and isinstance(value, DenseIntOrFPElementsAttr):
            element = _type(t.type)
            values = value.get_values()
            if len(values) != t.size.data:
                raise Unsupported("an array literal of another size")
            if isinstance(t.type, IntegerType):
                items = (f"{element} {int(v)}" for v in values)
            else:
                items = (f"{element} {_float(v, t.type)}" for v in values)
            return f"[{', '.join(items)}]"
        raise Unsupported(f"literal of type {t}")

    def signature(self, op: llvm.FuncOp, names: list[str], defined: bool) -> str:
        fty = op.function_type
        if fty.is_variadic or op.arg_attrs is not None:
            raise Unsupported(f"function {op.sym_name.data}'s signature")
        name = op.sym_name.data
        alias = defined and self.noalias is not None and self.noalias(name)
        params = []
        for t, value in zip(fty.inputs, names, strict=True):
            text = self.type(t)
            params.append(f"{text} noalias {value}" if alias and text == "ptr"
                          else f"{text} {value}")
        return f"{self.type(fty.output)} @{_quoted(name)}({', '.join(params)})"

    def function(self, op: llvm.FuncOp) -> str:
        if op.linkage.linkage.data != "external" or op.CConv.cconv_name != "ccc":
            raise Unsupported(f"function {op.sym_name.data}'s linkage or convention")
        count = len(op.function_type.inputs)
        params = [f'%".{i}"' for i in range(1, count + 1)]
        if not op.body.blocks:
            return f"declare {self.signature(op, params, False)}"
        return _Function(self, op, params).text()


class _Function:
    """One definition's text (llvmlite's numbering: the module doc). Operands are read from
    `Operation._operands` by unpacking, properties from `properties`: xDSL's named accessors
    cost more than the printing (a third of it)."""

    def __init__(self, printer: _Printer, op: llvm.FuncOp, params: list[str]) -> None:
        self.printer, self.op = printer, op
        self.next = len(params) + 2  # (the return value takes one)
        self.values: dict[SSAValue, str] = {}
        self.pointers: dict[SSAValue, str] = {}  # the values of typed pointer types: theirs
        self.blocks: dict[Block, str] = {}
        blocks = list(op.body.blocks)
        self.params = params
        for arg, name in zip(blocks[0].args, params, strict=True):
            self.values[arg] = name
        for block in blocks:
            if block.name_hint:
                raise Unsupported("a named block")
            self.blocks[block] = self.fresh()
        self.phis: dict[Block, list[tuple[str, str, list[str]]]] = {}
        for block in blocks[1:]:
            entries = []
            for arg in block.args:
                name = self.fresh()
                self.values[arg] = name
                entries.append((name, printer.type(arg.type), []))
            self.phis[block] = entries

    def fresh(self) -> str:
        name = f'%".{self.next}"'
        self.next += 1
        return name

    def value(self, value: SSAValue) -> str:
        name = self.values.get(value)
        if name is not None:
            return name
        owner = value.owner
        kind = type(owner)
        if kind is llvm.ConstantOp:
            name = _constant(owner.properties["value"], value.type)
        elif kind is llvm.AddressOfOp:
            name = self.address(owner)
        else:
            raise Unsupported(f"operand defined by {getattr(owner, 'name', owner)}")
        self.values[value] = name
        return name

    def typed(self, value: SSAValue) -> str:
        """`value` with its type, as an operand (a pointer's as llvmlite types it)."""
        return f"{self.type_of(value)} {self.value(value)}"

    def type_of(self, value: SSAValue) -> str:
        """The type llvmlite gives `value`: a global's address is a typed pointer to it (a
        function's: to its function type; a pointer global's: `ptr`), as are the bitcasts and
        getelementptrs made of it (the module doc); any other value has its own type."""
        typed = self.pointers.get(value)
        if typed is not None:
            return typed
        owner = value.owner
        if type(owner) is llvm.AddressOfOp:
            name = owner.properties["global_name"].root_reference.data
            function = self.printer.functions.get(name)
            if function is not None:
                fty = function.function_type
                inputs = ", ".join(self.printer.type(t) for t in fty.inputs)
                typed = f"{self.printer.type(fty.output)} ({inputs})*"
            else:
                pointee = self.printer.globals.get(name)
                if pointee is None:
                    raise Unsupported(f"the address of an unknown symbol {name}")
                typed = "ptr" if pointee == "ptr" else f"{pointee}*"
            self.pointers[value] = typed
            return typed
        return self.printer.type(value.type)

    def address(self, op: llvm.AddressOfOp) -> str:
        name = op.properties["global_name"].root_reference.data
        if name not in self.printer.functions and name not in self.printer.globals:
            raise Unsupported(f"the address of an unknown symbol {name}")
        return f"@{_quoted(name)}"

    def text(self) -> str:
        printer, op = self.printer, self.op
        head = "define " + printer.signature(op, self.params, True)
        if op.sym_name.data in printer.noinline:
            head += " noinline"
        lines = [head + printer.attributes, "{"]
        bodies = {}
        for block in op.body.blocks:  # (phi incomings come from the branches: bodies first)
            body = []
            for o in block.ops:
                kind = type(o)
                if kind is llvm.ConstantOp or kind is llvm.AddressOfOp:
                    continue  # (printed where they are used)
                if o.attributes:
                    raise Unsupported(f"{o.name} with attributes")
                write = _INSTRUCTIONS.get(kind)
                if write is None:
                    raise Unsupported(o.name)
                body.append(write(self, o, block))
            bodies[block] = body
        for block in op.body.blocks:
            lines.append(f"{self.blocks[block][2:-1]}:")
            for name, t, incoming in self.phis.get(block, ()):
                lines.append(f"  {name} = phi  {t} {', '.join(incoming)}")
            lines += [f"  {line}" for line in bodies[block]]
        lines.append("}")
        return "\n".join(lines)

    def result(self, op: Operation) -> str:
        """A name for the instruction `op` makes (every instruction takes one), its result's."""
        name = self.fresh()
        for result in op.results:
            self.values[result] = name
        return name

    def incoming(self, target: Block, arguments: Any, block: Block) -> None:
        for (_, _, incoming), value in zip(self.phis.get(target, ()), arguments, strict=True):
            incoming.append(f"[{self.value(value)}, {self.blocks[block]}]")

    def binary(self, op: Operation, block: Block) -> str:
        props = op.properties
        flags = props.get("overflowFlags")
        fast = props.get("fastmathFlags")
        if ((flags is not None and flags.value.data) or (fast is not None and fast.data)
                or len(props) > (flags is not None) + (fast is not None)):
            raise Unsupported(f"{op.name} with flags")
        lhs, rhs = op._operands
        return f"{self.result(op)} = {_BINARY[type(op)]} {self.printer.type(lhs.type)} " \
               f"{self.value(lhs)}, {self.value(rhs)}"

    def gep(self, op: Operation, block: Block) -> str:
        """llvmlite's: the base cast to a pointer to the element type first (an instruction
        where it is a typed pointer to something else: a global's address), the result of
        the base's type."""
        props = op.properties
        if props.get("noWrapFlags") is not None and props["noWrapFlags"].value.data:
            raise Unsupported("getelementptr's no-wrap flags")
        ptr, *ssa = op._operands
        element = self.printer.type(props["elem_type"])
        base_type, base = self.type_of(ptr), self.value(ptr)
        cast = ""
        if base_type != "ptr" and base_type != f"{element}*":
            name = self.fresh()
            cast = f"{name} = bitcast {base_type} {base} to {element}*\n  "
            base_type, base = f"{element}*", name
        indices = iter(ssa)
        parts = [self.typed(next(indices)) if i == llvm.GEP_USE_SSA_VAL else f"i32 {i}"
                 for i in self.printer.indices(props["rawConstantIndices"])]
        inbounds = "inbounds " if props.get("inbounds") is not None else ""
        name = self.result(op)
        if base_type != "ptr":
            self.pointers[op.results[0]] = base_type
        return f"{cast}{name} = getelementptr {inbounds}{element}, {base_type} {base}, " \
               f"{', '.join(parts)}"

    def load(self, op: Operation, block: Block) -> str:
        props = op.properties
        if props["ordering"].value.data or props.get("volatile_") is not None \
                or props.get("nontemporal") is not None:
            raise Unsupported("an atomic, volatile or nontemporal load")
        (ptr,) = op._operands
        alignment = props.get("alignment")
        align = f", align {alignment.value.data}" if alignment is not None else ""
        return f"{self.result(op)} = load {self.printer.type(op.results[0].type)}, " \
               f"{self.typed(ptr)}{align}"

    def store(self, op: Operation, block: Block) -> str:
        props = op.properties
        if props["ordering"].value.data or props.get("volatile_") is not None \
                or props.get("nontemporal") is not None:
            raise Unsupported("an atomic, volatile or nontemporal store")
        self.fresh()
        value, ptr = op._operands
        alignment = props.get("alignment")
        align = f", align {alignment.value.data}" if alignment is not None else ""
        return f"store {self.typed(value)}, {self.typed(ptr)}{align}"

    def branch(self, op: Operation, block: Block) -> str:
        self.fresh()
        (target,) = op.successors
        self.incoming(target, op._operands, block)
        return f"br label {self.blocks[target]}"

    def conditional_branch(self, op: Operation, block: Block) -> str:
        self.fresh()
        then, other = op.successors
        cond, *rest = op._operands
        sizes = op.properties["operandSegmentSizes"].get_values()
        self.incoming(then, rest[:sizes[1]], block)
        self.incoming(other, rest[sizes[1]:], block)
        return f"br {self.typed(cond)}, label {self.blocks[then]}, label {self.blocks[other]}"

    def icmp(self, op: Operation, block: Block) -> str:
        lhs, rhs = op._operands
        predicate = _ICMP[op.properties["predicate"].value.data]
        return f"{self.result(op)} = icmp {predicate} {self.printer.type(lhs.type)} " \
               f"{self.value(lhs)}, {self.value(rhs)}"

    def fcmp(self, op: Operation, block: Block) -> str:
        props = op.properties
        if props["fastmathFlags"].data:
            raise Unsupported("fast-math flags")
        lhs, rhs = op._operands
        predicate = llvm.FCmpPredicateFlag.from_int(props["predicate"].value.data).value
        return f"{self.result(op)} = fcmp {predicate} {self.printer.type(lhs.type)} " \
               f"{self.value(lhs)}, {self.value(rhs)}"

    def cast(self, op: Operation, block: Block) -> str:
        if op.properties:
            raise Unsupported("cast flags")
        (source,) = op._operands
        return f"{self.result(op)} = {_CASTS[type(op)]} {self.typed(source)} to " \
               f"{self.printer.type(op.results[0].type)}"

    def select(self, op: Operation, block: Block) -> str:
        if op.properties["fastmathFlags"].data:
            raise Unsupported("fast-math flags")
        cond, lhs, rhs = op._operands
        return f"{self.result(op)} = select  {self.typed(cond)}, {self.typed(lhs)}, " \
               f"{self.typed(rhs)}"

    def fneg(self, op: Operation, block: Block) -> str:
        if op.properties["fastmathFlags"].data:
            raise Unsupported("fast-math flags")
        (arg,) = op._operands
        return f"{self.result(op)} = fneg {self.typed(arg)}"

    def alloca(self, op: Operation, block: Block) -> str:
        props = op.properties
        if props.get("inalloca") is not None:
            raise Unsupported("inalloca")
        (size,) = op._operands
        alignment = props.get("alignment")
        align = f", align {alignment.value.data}" if alignment is not None else ""
        return f"{self.result(op)} = alloca {self.printer.type(props['elem_type'])}, " \
               f"{self.typed(size)}{align}"

    def return_(self, op: Operation, block: Block) -> str:
        self.fresh()
        operands = op._operands
        return f"ret {self.typed(operands[0])}" if operands else "ret void"

    def call(self, op: Operation, block: Block) -> str:
        props = op.properties
        if (props["op_bundle_sizes"].get_values() or props["TailCallKind"].data != "none"
                or props["fastmathFlags"].data or props.get("callee") is None):
            raise Unsupported("an indirect or tail call, operand bundles or fast-math flags")
        callee = self.printer.functions.get(props["callee"].string_value())
        if callee is None:
            raise Unsupported(f"a call of an undeclared {props['callee'].string_value()}")
        fty = callee.function_type
        args = ", ".join(self.typed(a) for a in op._operands)
        out = f"call {props['CConv'].cconv_name} {self.printer.type(fty.output)} " \
              f"@{_quoted(callee.sym_name.data)}({args})"
        name = self.result(op)
        return f"{name} = {out}" if op.results else out

    def call_intrinsic(self, op: Operation, block: Block) -> str:
        props = op.properties
        if props["op_bundle_sizes"].get_values() or props["fastmathFlags"].data:
            raise Unsupported("operand bundles or fast-math flags")
        intrinsic = props["intrin"].data
        printer = self.printer
        result = printer.type(op.results[0].type) if op.results else "void"
        if intrinsic in printer.functions or intrinsic in printer.globals:
            raise Unsupported(f"an intrinsic {intrinsic} also defined")
        args = op._operands
        types = [printer.type(a.type) for a in args]
        if intrinsic not in printer.intrinsics:
            params = ", ".join(f'{t} %".{i}"' for i, t in enumerate(types, 1))
            printer.intrinsics[intrinsic] = f"declare {result} @{_quoted(intrinsic)}({params})"
        text = ", ".join(f"{t} {self.value(a)}" for t, a in zip(types, args, strict=True))
        out = f"call {result} @{_quoted(intrinsic)}({text})"
        name = self.result(op)
        return f"{name} = {out}" if op.results else out


_INSTRUCTIONS: dict[type[Operation], Callable[[_Function, Operation, Block], str]] = {
    **dict.fromkeys(_BINARY, _Function.binary),
    **dict.fromkeys(_CASTS, _Function.cast),
    llvm.GEPOp: _Function.gep, llvm.LoadOp: _Function.load, llvm.StoreOp: _Function.store,
    llvm.BrOp: _Function.branch, llvm.CondBrOp: _Function.conditional_branch,
    llvm.ICmpOp: _Function.icmp, llvm.FCmpOp: _Function.fcmp, llvm.SelectOp: _Function.select,
    llvm.FNegOp: _Function.fneg, llvm.AllocaOp: _Function.alloca,
    llvm.ReturnOp: _Function.return_, llvm.CallOp: _Function.call,
    llvm.CallIntrinsicOp: _Function.call_intrinsic,
}
"""What writes each kind of instruction."""
