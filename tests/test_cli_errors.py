"""tapeml-run and tapeml-opt on inputs a user testing pass found ending in a traceback or in
silence: each is now one located diagnostic and exit status 1, or the output a user expects."""

from __future__ import annotations

from pathlib import Path

import pytest

from tapeml.tools import opt, run

MLP = str(Path(__file__).resolve().parent.parent / "examples" / "mlp.mlir")


def _run(tool, argv: list[str], capsys) -> tuple[int, str, str]:
    rc = tool.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _file(tmp_path: Path, text: str, name: str = "f.mlir") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


IDENTITY = """func.func @f(%a: tensor<f32>) -> tensor<f32> {
  func.return %a : tensor<f32>
}
"""


@pytest.mark.parametrize("literal, type_", [("1.0 : f80", "f80"), ("3 : i128", "i128"),
                                            ("1.0 : bf16", "bf16"), ("200 : ui8", None)])
def test_run_names_an_argument_of_a_type_numpy_has_no_scalar_of(tmp_path, capsys, literal, type_):
    rc, out, err = _run(run, [_file(tmp_path, IDENTITY), "--args", literal], capsys)
    assert rc == 1 and out == ""
    if type_ is None:  # a ui8 is a uint8 (it was an int8, too small for 200: an OverflowError)
        assert err == ("tapeml-run: error: argument 0 (%a) of @f must have dtype float32 for "
                       "tensor<f32>, got uint8\n")
    else:  # (numpy has no float80, int128 or bfloat16: a TypeError; bf16 was read as f16)
        assert err == (f"tapeml-run: error: argument 0: tapeml-run passes numbers of type i1, "
                       f"i8, i16, i32, i64, index, f16, f32 or f64, not {type_}\n")


def test_run_names_an_empty_npy_argument(tmp_path, capsys):
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")  # numpy raised an EOFError
    rc, out, err = _run(run, [_file(tmp_path, IDENTITY), "--args", str(empty)], capsys)
    assert rc == 1 and out == ""
    assert err == (f"tapeml-run: error: argument 0: {empty} is not a numeric .npy file "
                   "(No data left in file)\n")


DIVIDE = """func.func @f(%a: i32, %b: i32) -> i32 {
  %lb = arith.constant 0 : index
  %ub = arith.constant 2 : index
  %st = arith.constant 1 : index
  %r = scf.for %i = %lb to %ub step %st iter_args(%acc = %a) -> (i32) {
    %c = arith.divsi %acc, %b : i32
    scf.yield %c : i32
  }
  func.return %r : i32
}
"""


def test_run_locates_an_op_the_interpreter_fails_on(tmp_path, capsys):
    path = _file(tmp_path, DIVIDE)
    assert _run(run, [path, "--args", "7 : i32", "2 : i32"], capsys) == (0, "1 : i32\n", "")
    # xDSL's arith.divsi asserts that the divisor is not 0: its AssertionError went through,
    # with the whole module as a note
    rc, out, err = _run(run, [path, "--args", "7 : i32", "0 : i32"], capsys)
    assert rc == 1 and out == ""
    assert err == (f"{path}:6:5: error: arith.divsi: the interpreter failed on "
                   "(7 : i32, 0 : i32): AssertionError\n"
                   "    %c = arith.divsi %acc, %b : i32\n"
                   "    ^^\n")


@pytest.mark.parametrize("target, message", [
    ("x86-asm", "-t x86-asm prints a module of x86 dialect instructions alone, not func.func "
                "(xDSL's x86 lowerings write them)"),
    ("riscv-asm", "-t riscv-asm prints a module of riscv dialect instructions alone, not "
                  "func.func (xDSL's riscv lowerings write them)"),
    ("arm-asm", "-t arm-asm prints a module of arm dialect instructions alone, not func.func "
                "(xDSL's arm lowerings write them)"),
    ("wgsl", "-t wgsl prints the module's gpu.module ops, and it holds none"),  # (it printed
    ("wat", "-t wat prints the module's wasm.module ops, and it holds none"),   # nothing, exit 0)
    ("mps", "-t mps: MPS backend not yet implemented"),  # (no hint to lower to llvm)
])
def test_opt_refuses_a_module_an_xdsl_target_cannot_print(capsys, target, message):
    # the assembly targets failed on an assertion, with the module dumped
    assert _run(opt, [MLP, "-t", target], capsys) == (1, "", f"tapeml-opt: error: {message}\n")


def test_opt_prints_a_module_of_x86_instructions_as_assembly(tmp_path, capsys):
    path = _file(tmp_path, "x86_func.func @main() {\n  x86_func.ret\n}\n")
    rc, out, err = _run(opt, [path, "-t", "x86-asm"], capsys)
    assert (rc, err) == (0, "")
    assert out.split() == [".intel_syntax", "noprefix", ".text", "main:", "ret"]


SCALARS = """func.func @f(%a: i1, %b: i32) -> (i1, i32) {
  func.return %a, %b : i1, i32
}
"""

BOOL_TENSOR = """func.func @f(%c: tensor<i1>) -> tensor<i1> {
  func.return %c : tensor<i1>
}
"""


def test_run_prints_a_number_as_a_literal_of_its_type(tmp_path, capsys):
    path = _file(tmp_path, SCALARS)
    # they printed as -1 : i64 and 5 : i64, which the function does not take
    assert _run(run, [path, "--args", "1 : i1", "5 : i32"], capsys) == (0, "true\n5 : i32\n", "")
    assert _run(run, [path, "--args", "true", "5 : i32"], capsys) == (0, "true\n5 : i32\n", "")
    assert _run(run, [path, "--args", "false", "-3 : i32"], capsys) == (0, "false\n-3 : i32\n",
                                                                        "")


@pytest.mark.parametrize("literal", ["true", "1 : i1", "dense<true> : tensor<i1>"])
def test_run_takes_a_bool_for_a_bool_tensor(tmp_path, capsys, literal):
    # true and 1 : i1 were int8s: "must have dtype bool for tensor<i1>, got int8"
    rc, out, err = _run(run, [_file(tmp_path, BOOL_TENSOR), "--args", literal], capsys)
    assert (rc, out, err) == (0, "dense<true> : tensor<i1>\n", "")


# tape-to-loops' form of IDENTITY (outputs are written to the buffers named out.*)
LOOPS = """func.func @f(%a: memref<1xf32> {tapeml.name = "a"},
                  %out.a: memref<1xf32> {tapeml.name = "out.a"}) {
  %0 = arith.constant 0 : index
  %1 = memref.load %a[%0] : memref<1xf32>
  %2 = arith.addf %1, %1 : f32
  memref.store %2, %out.a[%0] : memref<1xf32>
  func.return
}
"""

UNNAMED = """func.func @f(%a: memref<2xf32>, %b: memref<2xf32>) {
  %0 = arith.constant 0 : index
  %1 = memref.load %a[%0] : memref<2xf32>
  memref.store %1, %b[%0] : memref<2xf32>
  func.return
}
"""


def test_run_prints_the_buffers_a_loop_function_writes(tmp_path, capsys):
    # it printed nothing: the function has no results
    rc, out, err = _run(run, [_file(tmp_path, LOOPS), "--args", "dense<2.5> : tensor<1xf32>",
                              "dense<0.0> : tensor<1xf32>"], capsys)
    assert (rc, out, err) == (0, "dense<5.000000e+00> : tensor<1xf32>\n", "")
    # with no buffer named out.*, every buffer
    rc, out, err = _run(run, [_file(tmp_path, UNNAMED), "--args",
                              "dense<[1.0, 2.0]> : tensor<2xf32>", "dense<0.0> : tensor<2xf32>"],
                        capsys)
    assert (rc, err) == (0, "")
    assert out == ("dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>\n"
                   "dense<[1.000000e+00, 0.000000e+00]> : tensor<2xf32>\n")
