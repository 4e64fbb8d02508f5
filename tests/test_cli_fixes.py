"""tapeml-run and tapeml-opt on inputs a tester found giving a wrong answer, a misleading message
or a traceback-like one: integer numbers of another type than their argument's, merged loop
nests for the GPU, failed writes, tensors of more elements than an index counts, and files
that are not what tapeml-run takes."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_cli_errors import _file, _run  # (the CLI tests' helpers)

from tapeml.tools import opt, run

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"



SCALARS = """func.func @f(%a: i32, %b: f32) -> (i32, f32) {
  %c = arith.addi %a, %a : i32
  %d = arith.addf %b, %b : f32
  func.return %c, %d : i32, f32
}
"""


@pytest.mark.parametrize("literal, given", [
    ("4294967295 : i64", "an int64 value"),  # ran: -2 : i32
    ("255 : i8", "an int8 value"),  # ran
    ("99999999999 : i64", "an int64 value"),  # "out of range for type i32", unnamed
    ("true", "a bool value"),  # "got np.True_"
    ("dense<[1, 2]> : tensor<2xi32>", "an array of shape (2,)"),  # ran on the first
])
def test_run_checks_an_integer_argument_s_type(tmp_path, capsys, literal, given):
    rc, out, err = _run(run, [_file(tmp_path, SCALARS), "--args", literal, "1.0 : f32"], capsys)
    assert (rc, out) == (1, "")
    assert err == f"tapeml-run: error: argument 0 (%a) of @f must be i32, got {given}\n"


def test_run_checks_a_float_argument_s_type_as_an_integer_s(tmp_path, capsys):
    path = _file(tmp_path, SCALARS)
    rc, out, err = _run(run, [path, "--args", "5 : i32", "1 : i32"], capsys)
    assert (rc, out) == (1, "")  # (it said "got a int32 value")
    assert err == "tapeml-run: error: argument 1 (%b) of @f must be f32, got an int32 value\n"
    assert _run(run, [path, "--args", "5 : i32", "1.5 : f32"], capsys) == (
        0, "10 : i32\n3.000000e+00 : f32\n", "")


CHAIN = """func.func @f(%a: tensor<4x3xf32>, %w: tensor<3x3xf32>) -> tensor<4x3xf32> {
  %1 = tape.matmul %a, %w : tensor<4x3xf32>, tensor<3x3xf32> -> tensor<4x3xf32>
  %2 = tape.tanh %1 : tensor<4x3xf32>
  %3 = tape.matmul %2, %w : tensor<4x3xf32>, tensor<3x3xf32> -> tensor<4x3xf32>
  %4 = tape.tanh %3 : tensor<4x3xf32>
  func.return %4 : tensor<4x3xf32>
}
"""


def _gpu_result(tmp_path: Path, passes: str, capsys) -> str:
    """CHAIN through `passes`, then run on the interpreter (the launches' kernels)."""
    lowered = str(tmp_path / "lowered.mlir")
    assert _run(opt, [_file(tmp_path, CHAIN), "-p", passes, "-o", lowered], capsys) == (0, "", "")
    a = "dense<[" + ", ".join(str(i / 10) for i in range(12)) + "]> : tensor<12xf32>"
    w = "dense<[0.5, -0.2, 0.1, 0.3, 0.4, -0.6, 0.2, 0.1, 0.9]> : tensor<9xf32>"
    rc, out, err = _run(run, [lowered, "--symbol", "f", "--args", a, w,
                              "dense<0.0> : tensor<12xf32>"], capsys)
    assert (rc, err) == (0, "")
    return out


@pytest.mark.parametrize("passes", ["tape-to-loops,merge-loop-nests",
                                    "tape-to-loops,merge-loop-nests{every=true}",
                                    "tape-to-loops{share=true}"])
def test_opt_converts_functions_of_loop_nests_to_gpu(tmp_path, capsys, passes):
    # the func.call went into a kernel: "'@f_nest0' could not be found in symbol table"
    expected = _gpu_result(tmp_path, "tape-to-loops,convert-loops-to-gpu", capsys)
    assert _gpu_result(tmp_path, f"{passes},convert-loops-to-gpu", capsys) == expected


def test_opt_says_the_gpu_takes_no_thread_pool_parts(tmp_path, capsys):
    # it said @f_part0 "is not in the loop form ... run tape-to-loops first"
    rc, out, err = _run(opt, [_file(tmp_path, CHAIN), "-p", "tape-to-loops,outline-parallel-"
                              "loops{min_work=0},convert-loops-to-gpu"], capsys)
    assert (rc, out) == (1, "")
    assert err == ("tapeml-opt: error: convert-loops-to-gpu: @f: kernel.parallel_for @f_part0 "
                   "runs a loop on the CPU's thread pool (outline-parallel-loops), which the "
                   "GPU does not take: leave outline-parallel-loops out (each scf.parallel "
                   "becomes a kernel)\n")


IDENTITY = """func.func @f(%a: tensor<f32>) -> tensor<f32> {
  func.return %a : tensor<f32>
}
"""

NO_SPACE = "No space left on device"
needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")


def _command(tool: str, path: str) -> list[str]:
    args = ["--args", "dense<1.0> : tensor<f32>"] if tool == "run" else []
    return [sys.executable, "-m", f"tapeml.tools.{tool}", path, *args]


@needs_dev_full
def test_opt_names_the_output_file_it_cannot_write(tmp_path, capsys):
    # "cannot open None: No space left on device"
    rc, out, err = _run(opt, [_file(tmp_path, IDENTITY), "-o", "/dev/full"], capsys)
    assert (rc, out) == (1, "")
    assert err == f"tapeml-opt: error: cannot write /dev/full: {NO_SPACE}\n"


@needs_dev_full
@pytest.mark.parametrize("tool", ["opt", "run"])
def test_tools_name_stdout_when_they_cannot_write_it(tmp_path, tool):
    with open("/dev/full", "w") as full:
        done = subprocess.run(_command(tool, _file(tmp_path, IDENTITY)), stdout=full,
                              stderr=subprocess.PIPE, text=True)
    # (and no "Exception ignored" as Python flushed stdout again at exit, status 120)
    assert (done.returncode, done.stderr) == (1, f"tapeml-{tool}: error: cannot write stdout: "
                                                 f"{NO_SPACE}\n")


@pytest.mark.parametrize("tool", ["opt", "run"])
def test_tools_end_quietly_when_stdout_s_reader_has_gone(tmp_path, tool):
    # "cannot open None: Broken pipe", status 1; now as cat's: 128 + SIGPIPE, no message
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(_command(tool, _file(tmp_path, IDENTITY)), stdout=write,
                              stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


HUGE_TYPE = "tensor<99999999999x99999999999xf32>"
HUGE = f"""func.func @f(%a: {HUGE_TYPE}) -> {HUGE_TYPE} {{
  %c = tape.exp %a : {HUGE_TYPE}
  func.return %c : {HUGE_TYPE}
}}
"""
TOO_MANY = ("has too many elements: 9999999999800000000001, more than an index counts "
            "(2^63 - 1)")


@pytest.mark.parametrize("passes", ["tape-to-loops", "tape-to-llvm"])
def test_opt_locates_a_tensor_of_too_many_elements(tmp_path, capsys, passes):
    # tape-to-loops wrote an index constant of 9999999999800000000001, which the LLVM
    # lowering refused, neither located nor naming the tensor
    path = _file(tmp_path, HUGE)
    rc, out, err = _run(opt, [path, "-p", passes], capsys)
    assert (rc, out) == (1, "")
    assert err == (f"{path}:1:1: error: tape-to-loops: @f's argument 0 (%a), {HUGE_TYPE}, "
                   f"{TOO_MANY}\n{HUGE.splitlines()[0]}\n^^^^^^^^^\n")


BROADCAST = """func.func @f(%a: tensor<1xf32>) -> tensor<4294967296x4294967296xf32> {
  %b = tape.broadcast %a : tensor<1xf32> -> tensor<4294967296x4294967296xf32>
  func.return %b : tensor<4294967296x4294967296xf32>
}
"""


def test_opt_locates_an_op_result_of_too_many_elements(tmp_path, capsys):
    path = _file(tmp_path, BROADCAST)
    rc, out, err = _run(opt, [path, "-p", "tape-to-loops"], capsys)
    assert (rc, out) == (1, "")
    assert err == (f"{path}:2:3: error: tape-to-loops: tape.broadcast's result, "
                   "tensor<4294967296x4294967296xf32>, has too many elements: "
                   "18446744073709551616, more than an index counts (2^63 - 1)\n"
                   f"{BROADCAST.splitlines()[1]}\n  ^^\n")


def test_run_locates_a_tensor_of_too_many_elements(tmp_path, capsys):
    # "a value is too large for the element type of tensor<...>", at the argument's literal
    path = _file(tmp_path, HUGE)
    rc, out, err = _run(run, [path, "--args", f"dense<1.0> : {HUGE_TYPE}"], capsys)
    assert (rc, out) == (1, "")
    assert err == (f"{path}:1:1: error: @f's argument 0 (%a), {HUGE_TYPE}, {TOO_MANY}\n"
                   f"{HUGE.splitlines()[0]}\n^^^^^^^^^\n")


def test_run_says_a_file_named_npy_is_not_one(tmp_path, capsys):
    junk = tmp_path / "junk.npy"
    junk.write_bytes(b"hello")  # numpy took it for a pickle: "... allow_pickle ..."
    rc, out, err = _run(run, [_file(tmp_path, IDENTITY), "--args", str(junk)], capsys)
    assert (rc, out) == (1, "")
    assert err == (f"tapeml-run: error: argument 0: {junk} is not an .npy file (it does not "
                   "start as one does)\n")


def test_run_says_it_takes_no_npz(tmp_path, capsys):
    archive = tmp_path / "a.npz"
    np.savez(archive, a=np.float32(1.0))  # it was read as a literal: "attribute expected"
    rc, out, err = _run(run, [_file(tmp_path, IDENTITY), "--args", str(archive)], capsys)
    assert (rc, out) == (1, "")
    assert err == (f"tapeml-run: error: argument 0: {archive}: tapeml-run takes one array per "
                   ".npy file, not an .npz archive of several\n")


def test_run_takes_a_big_endian_npy(tmp_path, capsys):
    big = tmp_path / "big.npy"
    np.save(big, np.array(2.5, dtype=">f4"))  # "must have dtype float32 ..., got >f4"
    rc, out, err = _run(run, [_file(tmp_path, IDENTITY), "--args", str(big)], capsys)
    assert (rc, out, err) == (0, "dense<2.500000e+00> : tensor<f32>\n", "")


def test_run_says_it_runs_no_llvm_dialect(tmp_path, capsys):
    lowered = str(tmp_path / "llvm.mlir")
    assert _run(opt, [_file(tmp_path, IDENTITY), "-p", "tape-to-llvm", "-o", lowered],
                capsys) == (0, "", "")
    # "no function @main in the module (functions: none)"
    rc, out, err = _run(run, [lowered], capsys)
    assert (rc, out) == (1, "")
    assert err == ("tapeml-run: error: the module holds llvm.func @tapeml.f: tapeml-run runs "
                   "tape and func programs (tapeml-opt's before convert-loops-to-llvm), not "
                   "the llvm dialect\n")


def _stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))


def test_run_reads_the_program_from_stdin_for_a_dash(capsys, monkeypatch):
    _stdin(monkeypatch, IDENTITY)  # "cannot open -: No such file or directory"
    assert _run(run, ["-", "--args", "dense<1.5> : tensor<f32>"], capsys) == (
        0, "dense<1.500000e+00> : tensor<f32>\n", "")


def test_opt_reads_the_program_from_stdin_for_a_dash(capsys, monkeypatch):
    _stdin(monkeypatch, "func.func @f(%a: tensor<f32>) -> tensor<f32> {\n"
                        "  func.return %b : tensor<f32>\n}\n")
    rc, out, err = _run(opt, ["-"], capsys)
    assert (rc, out) == (1, "")  # located in stdin, as with no file
    assert err.startswith("stdin:2:15: error: use of undefined value %b\n")


@pytest.mark.parametrize("dims", ["?x?", "?x3"])
def test_opt_locates_a_dynamic_dim_tape_to_loops_does_not_lower(tmp_path, capsys, dims):
    # `?` reads as -2^63: two made "too many elements", one a negative buffer size, silently
    text = (f"func.func @f(%x: tensor<{dims}xf32>) -> tensor<{dims}xf32> {{\n"
            f"  func.return %x : tensor<{dims}xf32>\n}}\n")
    path = _file(tmp_path, text)
    rc, out, err = _run(opt, [path, "-p", "tape-to-loops"], capsys)
    assert (rc, out) == (1, "")
    assert err.startswith(f"{path}:1:1: error: tape-to-loops: @f's argument 0 (%x), "
                          f"tensor<{dims}xf32>, has a dynamic dim: tape-to-loops lowers "
                          "static shapes only\n")
