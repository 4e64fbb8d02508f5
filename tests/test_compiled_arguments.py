"""Wrong (and unusual) arguments to compiled functions, on every backend: `tapeml.jit(f)` on the
CPU, `backend="interp"` and `backend="cuda", emulate=True`, called through `jit` and, for a
cached signature, through the compiled function itself.

Each case either computes the right numbers (read-only, non-contiguous, Fortran-order,
misaligned and byte-swapped arrays are inputs: they may be copied) or raises a TypeError or
ValueError (tapeml's ShapeError and InterpretError are ValueErrors) whose message names the
argument and what it must be and is. Never a crash: the CPU's cases run in a child process
(tests/isolated.py), where a segfault fails the cases rather than ending pytest; so do the
arrays past 2^31 elements, which are views of a tiny buffer (nothing of their size is ever
allocated: the child's address space is limited)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from isolated import run_isolated  # tests/isolated.py

import tapeml
from tapeml import ops

BACKENDS = {"cpu": {}, "interp": {"backend": "interp"},
            "cuda-emulated": {"backend": "cuda", "emulate": True, "gemm_tile": 2}}
"""(A GEMM tile of 2 x 2 threads: each emulated GPU thread is interpreted.)"""


def f(x, w):
    return ops.tanh(x @ w) + 1.0


def reference(x, w):
    return np.tanh(np.asarray(x, np.float64) @ np.asarray(w, np.float64)) + 1.0


def _x(shape=(4, 3), dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(1).standard_normal(shape).astype(dtype)


W = np.random.default_rng(2).standard_normal((3, 2)).astype(np.float32)


def _read_only() -> np.ndarray:
    x = _x()
    x.flags.writeable = False
    return x


def _misaligned() -> np.ndarray:
    raw = np.zeros(4 * 12 + 1, np.uint8)
    x = np.frombuffer(raw.data, np.float32, count=12, offset=1).reshape(4, 3)
    x[...] = _x()
    assert not x.flags.aligned
    return x


def _strided() -> np.ndarray:
    return np.repeat(_x(), 2, axis=1)[:, ::2]


@dataclass(frozen=True)
class Case:
    """Arguments for `f` (or `fn`), and what must come of them: the reference's numbers, or an
    exception of one of `raises` whose message has every piece of `says`. `direct`: the
    compiled function of the signature `f(_x(), W)` is called, not `jit`."""

    args: Callable[[], tuple]
    raises: tuple[type[BaseException], ...] = ()
    says: tuple[str, ...] = ()
    direct: bool = False
    fn: Callable = f
    ref: Callable = reference


CORRECT = {
    "read-only": Case(lambda: (_read_only(), W)),
    "non-contiguous view": Case(lambda: (_strided(), W)),
    "Fortran order": Case(lambda: (np.asfortranarray(_x()), W)),
    "misaligned": Case(lambda: (_misaligned(), W)),
    "byte-swapped": Case(lambda: (_x().astype(">f4"), W)),
    "a new shape: compiled again": Case(lambda: (_x((6, 3)), W)),
    "a batch of matrices: compiled again": Case(lambda: (_x((2, 4, 3)), W)),
    "float64: compiled again": Case(lambda: (_x(dtype=np.float64), W.astype(np.float64))),
    "0 rows (traced, and called)": Case(lambda: (_x((0, 3)), W)),
    "traced with 0 columns": Case(lambda: (_x(), np.zeros((3, 0), np.float32))),
    "traced with an empty sum (k = 0)": Case(lambda: (_x((4, 0)), np.zeros((0, 2), np.float32))),
    "a sum over 0 rows": Case(lambda: (_x((0, 3)),), fn=lambda x: ops.sum(x * 2.0, 0),
                              ref=lambda x: np.sum(x * 2.0, 0)),
    "a sum over a 0-size batch": Case(lambda: (_x((2, 0, 3)),), fn=lambda x: ops.sum(x, (0, 1)),
                                      ref=lambda x: np.sum(x, (0, 1))),
}
"""Arguments compiled code must compute the right numbers for (and leave as they were)."""

JIT_ERRORS = {
    "wrong shape": Case(lambda: (_x((4, 5)), W), (ValueError,),
                        ("tape.matmul", "tensor<4x5xf32>", "tensor<3x2xf32>")),
    "wrong rank": Case(lambda: (_x((12,)), W), (ValueError,), ("tape.matmul", "12 columns")),
    "wrong dtype": Case(lambda: (_x().astype(np.uint8), W), (TypeError, tapeml.TracingError),
                        ("`x`", "uint8", "float32")),  # int32 would promote (JAX's rule)
    "a Python list": Case(lambda: (_x().tolist(), W), (TypeError,), ("`x`", "list")),
    "a string": Case(lambda: ("abc", W), (TypeError,), ("`x`", "str")),
}
"""What `jit` says when the function cannot take its arguments (it compiles for each new
signature, so only the function's own rules can refuse a shape)."""

JIT_ERRORS_XFAIL = {
    "None": (Case(lambda: (None, W), (TypeError, ValueError), ("`x`", "None")),
             "None is an empty pytree (a legitimate argument, as in JAX), so jit cannot refuse "
             "it; the op that meets it says 'None is not an array' at f's line, not which "
             "argument it was"),
}
"""Defects of the frontend's tracing (tapeml/tracing/trace.py, tapeml/frontend/jit.py), reported."""

DIRECT_ERRORS = {
    "wrong shape": Case(lambda: (_x((4, 5)), W), (ValueError,),
                        ("`x`", "must have shape (4, 3), got (4, 5)"), direct=True),
    "wrong rank": Case(lambda: (_x((12,)), W), (ValueError,),
                       ("`x`", "(4, 3)", "(12,)"), direct=True),
    "zero-size dim": Case(lambda: (_x((0, 3)), W), (ValueError,), ("`x`", "(4, 3)", "(0, 3)"),
                          direct=True),
    "wrong dtype": Case(lambda: (_x(dtype=np.float64), W), (TypeError,),
                        ("`x`", "must be float32, got float64", "(4, 3)"), direct=True),
    "a float64 scalar for an array": Case(lambda: (_x(), np.float64(2.0)), (TypeError,),
                                          ("`w`", "float32", "float64"), direct=True),
    "a Python list": Case(lambda: (_x().tolist(), W), (TypeError,),
                          ("`x`", "float32 array of shape (4, 3)", "list"), direct=True),
    "None": Case(lambda: (None, W), (TypeError,), ("`x`", "(4, 3)", "None"), direct=True),
    "a string": Case(lambda: ("abc", W), (TypeError,), ("`x`", "str"), direct=True),
    "a masked array": Case(lambda: (np.ma.masked_less(_x(), 0), W), (TypeError,),
                           ("`x`", "masked"), direct=True),
    "too few arguments": Case(lambda: (_x(),), (TypeError,), ("takes 2 arrays, got 1",),
                              direct=True),
}
"""What a compiled function says to arguments not of its signature (what `jit` calls after a
cache hit, and what anyone holding one may call)."""

DIRECT_CORRECT = {f"{name} (direct)": Case(case.args, direct=True) for name, case in
                  CORRECT.items() if name in ("read-only", "non-contiguous view",
                                              "Fortran order", "misaligned", "byte-swapped")}

CASES = {**{f"jit: {k}": v for k, v in (*CORRECT.items(), *JIT_ERRORS.items())},
         **{f"direct: {k}": v for k, v in (*DIRECT_CORRECT.items(), *DIRECT_ERRORS.items())}}


@functools.cache
def jitted(backend: str, fn: Callable) -> Callable:
    """One jitted `fn` per backend, shared by the cases (as a program calls one)."""
    return tapeml.jit(fn, **BACKENDS[backend])


@functools.cache
def compiled(backend: str) -> Callable:
    """`f` compiled for the signature `f(_x(), W)`: what `jit` calls after a cache hit."""
    one = tapeml.jit(f, **BACKENDS[backend])
    one(_x(), W)
    ((_, program),) = one.cache.values()
    return program


def outcome(backend: str, name: str) -> dict[str, Any]:
    """What case `name` does on `backend`: the largest error against the reference (and
    whether the inputs were left as they were), or the exception raised."""
    case = CASES.get(name) or JIT_ERRORS_XFAIL[name.removeprefix("jit: ")][0]
    args = case.args()
    before = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    try:
        call = (lambda *a: compiled(backend)(*a)[0]) if case.direct else jitted(backend, case.fn)
        result = call(*args)
    except Exception as error:  # noqa: BLE001 - the outcome under test
        return {"raised": [k.__name__ for k in type(error).__mro__], "message": str(error)}
    got = np.asarray(result)
    want = case.ref(*args)
    unchanged = all(np.array_equal(a, b) for a, b in zip(args, before, strict=True)
                    if isinstance(a, np.ndarray))
    return {"shape": list(got.shape), "want": list(want.shape), "unchanged": unchanged,
            "error": float(np.max(np.abs(got - want), initial=0.0))
            if got.shape == want.shape else None}


def outcomes(backend: str, names: list[str]) -> dict[str, dict[str, Any]]:
    return {name: outcome(backend, name) for name in names}


_CHILD: dict[str, dict[str, Any]] = {}


def cpu_outcome(name: str) -> dict[str, Any]:
    """The CPU's cases, all run once in one child process (compiled code takes raw pointers:
    a wrong one would be a crash there, not here)."""
    if not _CHILD:
        names = [*CASES, *(f"jit: {k}" for k in JIT_ERRORS_XFAIL)]
        out = run_isolated(f"""
            import json
            import test_compiled_arguments as t
            print(json.dumps(t.outcomes("cpu", {names!r})))
        """)
        _CHILD.update(json.loads(out.splitlines()[-1]))
    return _CHILD[name]


def check(backend: str, name: str, case: Case) -> None:
    result = cpu_outcome(name) if backend == "cpu" else outcome(backend, name)
    if case.raises:
        assert "raised" in result, f"{name}: no error, {result}"
        assert any(k.__name__ in result["raised"] for k in case.raises), result
        missing = [s for s in case.says if s not in result["message"]]
        assert not missing, f"{name}: {missing} not in {result['message']!r}"
    else:
        assert "raised" not in result, f"{name}: {result}"
        assert result["shape"] == result["want"] and result["unchanged"], result
        assert result["error"] <= 1e-5, result


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", CASES)
def test_arguments(backend, name):
    check(backend, name, CASES[name])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=reason))
    for name, (_, reason) in JIT_ERRORS_XFAIL.items()])
def test_arguments_the_frontend_words_unclearly(backend, name):
    check(backend, f"jit: {name}", JIT_ERRORS_XFAIL[name][0])


BIG = (1 << 31) + 8
"""Elements past what a 32-bit index reaches."""


def _big() -> np.ndarray:
    return np.broadcast_to(np.float32(0.5), (BIG,))  # a view of one element


def cpu_indexing() -> None:
    """Every address the program and its GEMM kernel compute is a getelementptr on an i64
    index, and the trip counts past 2^31 are i64 constants (nothing wraps at 32 bits)."""
    a = np.broadcast_to(np.float32(1), (2, BIG))
    stages = tapeml.jit(lambda x, a: (ops.tanh(x) + x, a @ a.T)).lower(_big(), a)
    program, optimized = stages["llvm ir"], stages["optimized llvm ir"]
    assert str(BIG) in program and f"i64 {BIG}" in optimized
    assert re.search(rf"define void @tapeml_gemm_f32_b1_m2_n2_k{BIG}_", optimized)
    for text in (program, optimized):
        geps = re.findall(r"getelementptr[^\n]*", text)
        narrow = [g for g in geps if re.search(r", i(32|16|8) %", g)]
        assert geps and not narrow, narrow[:3]


def gpu_indexing() -> None:
    """The thread's element index is widened before it is scaled and compared (one thread per
    element, 2^23 blocks)."""
    stages = tapeml.jit(lambda x: ops.tanh(x) + x, backend="cuda", arch="sm_90").lower(_big())
    kernel = stages["ptx"][stages["ptx"].index(".entry"):]
    assert "mul.wide.u32" in kernel, kernel[:2000]
    assert re.search(rf"setp\.\w+\.[us]64\s[^\n]*{BIG - 1}", kernel), kernel[:2000]


def with_a_scalar_constant() -> None:
    tapeml.jit(lambda x: ops.tanh(x) * 2.0).lower(_big())


@pytest.mark.parametrize("check", ["cpu_indexing", "gpu_indexing", "with_a_scalar_constant"])
def test_past_2_31_elements_compiles_with_64_bit_indices(check):
    """Compiled (not run) in a child with a limited address space: a compiler that
    materialized something of the shape's size fails there instead of taking the memory."""
    assert run_isolated(f"""
        import test_compiled_arguments as t
        t.{check}()
        print("compiled")
    """).endswith("compiled\n")


def test_past_2_31_elements_a_call_is_a_memory_error_not_a_crash():
    """A broadcast view is copied to a contiguous argument before the call; here, in a child
    with a limited address space, the copy's 8 GiB are refused: a MemoryError."""
    out = run_isolated("""
        import tapeml
        from tapeml import ops
        from test_compiled_arguments import _big
        try:
            tapeml.jit(lambda x: ops.tanh(x) + x)(_big())
        except MemoryError as error:
            print("MemoryError:", error)
    """)
    assert out.startswith("MemoryError: Unable to allocate 8.00 GiB")
