"""Running out of memory is a Python MemoryError, never a crash: the CPU backend's compiled
programs allocate nothing on their own (the arena, the outputs, copies of arguments and the
GEMM kernels' packing scratch are numpy buffers), and a kernel whose heap scratch is refused
waits for its kept one. Each case runs in a child process with a limited address space
(tests/isolated.py), so an allocation that must fail fails at once and a crash fails the test."""

from __future__ import annotations

import re

import numpy as np
import pytest
from isolated import run_isolated  # tests/isolated.py

import tapeml
from tapeml import nn, ops


def test_a_gemm_scratch_too_large_is_a_memory_error_when_compiling():
    """(4, 256) @ (256, 2^30): packing a block of B takes a TiB. The kernel's scratch used to
    be a static global, which LLVM's JIT loader failed to place and aborted the process."""
    out = run_isolated("""
        import tapeml
        from tapeml.codegen.cpu import CPUBackend
        program = tapeml.trace(lambda a, b: a @ b, tapeml.Spec((4, 256)),
                               tapeml.Spec((256, 1 << 30)))
        try:
            CPUBackend().compile(program.module)
        except MemoryError as error:
            print("MemoryError:", error)
    """)
    assert re.match(r"MemoryError: \S+'s (scratch|packed) takes [\d,]+ bytes, more than can "
                    "be allocated here", out), out


def test_an_arena_too_large_is_a_memory_error_on_the_first_call():
    out = run_isolated("""
        import numpy as np
        import tapeml
        from tapeml import ops
        f = tapeml.jit(lambda x: ops.sum(ops.tanh(ops.broadcast_to(x, (1 << 20, 1 << 20)))))
        try:
            f(np.ones(1 << 20, np.float32))
        except MemoryError as error:
            print("MemoryError:", error)
        ((_, native),) = f.cache.values()
        print(native.arena_bytes)
    """)
    first, arena = out.splitlines()
    assert first == (f"MemoryError: @_lambda_'s intermediates (its arena) takes {int(arena):,} "
                     "bytes, more than can be allocated here") and int(arena) >= 4 << 40


def test_a_result_or_arena_past_numpys_largest_array_is_a_memory_error():
    """Past numpy's largest array np.empty raises a ValueError ('Maximum allowed dimension
    exceeded'), which reached the user from inside tapeml; past what an index counts
    (2^63 - 1 elements) the compile already refuses the tensor, naming it, and it is a
    MemoryError too, as a merely too large one is; below, the arena or the result is."""
    f = tapeml.jit(lambda a: ops.sum(ops.broadcast_to(a, (4_000_000_000, 4_000_000_000))))
    with pytest.raises(MemoryError, match=r"tape.broadcast's result, "
                                          r"tensor<4000000000x4000000000xf32>, has too many"):
        f(np.float32(1))
    g = tapeml.jit(lambda a: ops.broadcast_to(a, (1 << 40, 1 << 40)))
    with pytest.raises(MemoryError, match=r"tensor<1099511627776x1099511627776xf32>, has too"):
        g(np.float32(1))
    h = tapeml.jit(lambda a: ops.sum(ops.broadcast_to(a, (1 << 31, 1 << 31))))  # 2^62: counted
    with pytest.raises(MemoryError, match=r"intermediates \(its arena\) takes "
                                          r"18,446,744,073,709,551,616 bytes"):
        h(np.float32(1))


def test_a_caller_refused_heap_scratch_waits_for_the_kept_one():
    """Four threads in one kernel at once: all but one find its scratch taken and ask the heap,
    which here refuses every time (aligned_alloc replaced by a function returning NULL). They
    must wait for the kept scratch and compute their products, not write through NULL."""
    out = run_isolated("""
        import ctypes
        import llvmlite.binding as llvm
        import numpy as np
        from concurrency import at_once
        from tapeml.codegen.cpu import bind_scratch, load_pool, target_machine
        from tapeml.codegen.gemm import GemmSpec, Target, definition

        spec = GemmSpec("f32", 1, 96, 200, 300, (0, 300, 1), (0, 200, 1), 96 * 200, False)
        text = definition(spec, Target.host())
        assert "declare ptr @aligned_alloc(i64, i64)" in text
        text = text.replace("declare ptr @aligned_alloc(i64, i64)", "").replace(
            "@aligned_alloc(", "@refused_alloc(") + '''
        @refusals = global i64 0
        define ptr @refused_alloc(i64 %align, i64 %size) {
          atomicrmw add ptr @refusals, i64 1 monotonic
          ret ptr null
        }'''
        load_pool()
        machine = target_machine()
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(text), machine)
        engine.finalize_object()
        scratch = bind_scratch(engine, [spec.symbol])
        kernel = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 3)(
            engine.get_function_address(spec.symbol))
        rng = np.random.default_rng(11)
        pairs = [(rng.standard_normal((96, 300)).astype(np.float32),
                  rng.standard_normal((300, 200)).astype(np.float32)) for _ in range(4)]

        def work(i):
            a, b = pairs[i]
            expected = a.astype(np.float64) @ b.astype(np.float64)
            for _ in range(200):  # (enough calls to overlap on a loaded machine)
                out = np.full((96, 200), np.nan, np.float32)
                kernel(a.ctypes.data, b.ctypes.data, out.ctypes.data)  # ctypes drops the GIL
                np.testing.assert_allclose(out, expected, rtol=0, atol=4e-6 * 300)

        at_once(work)
        print(ctypes.c_int64.from_address(engine.get_global_value_address("refusals")).value)
    """)
    assert int(out) > 0  # the heap was asked, and refused, at least once


def test_heap_scratch_is_asked_for_a_multiple_of_its_alignment():
    """C11's aligned_alloc wants its size a multiple of the alignment: the kernel asks for the
    plan's total, the caller's kept scratch has that size."""
    import re

    from tapeml.codegen.gemm import GemmSpec, Target, definition
    from tapeml.codegen.gemm.plan import INDEX, plan

    for batch, m, n, k, c0 in [(1, 33, 65, 300, 33 * 65), (9, 5, 3, 7, 0), (20, 16, 9, 784, 0)]:
        spec = GemmSpec("f32", batch, m, n, k, (m * k, k, 1), (k * n, n, 1), c0, False)
        text = definition(spec, Target.host())
        total = plan(spec, Target.host())[INDEX["total"]]
        (size,) = re.findall(r"@aligned_alloc\(i64 64, i64 (%[\w.]+)\)", text)
        assert size.startswith("%total.")  # the plan's
        (kept,) = re.findall(r"scratch_bytes = constant i64 (\d+)", text)
        assert total > 0 and total % 64 == 0 and int(kept) == total


def test_compiled_programs_call_no_allocator():
    """Every intermediate lives in the arena (plan-arena), which Python allocates: an
    allocation in compiled code would have no way to report that it failed."""
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((4, 1, 3, 3)).astype(np.float32),
              "v": rng.standard_normal((4 * 4 * 4, 3)).astype(np.float32)}
    x = rng.standard_normal((8, 1, 8, 8)).astype(np.float32)
    y = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 8)]

    def loss(p, x, y):
        h = nn.max_pool2d(ops.tanh(nn.conv2d(x, p["w"], padding=1)), 2)
        return nn.softmax_cross_entropy(ops.reshape(h, (8, -1)) @ p["v"], y)

    stages = tapeml.jit(tapeml.value_and_grad(loss)).lower(params, x, y)
    assert re.search(r"call (ccc )?void @\"?tapeml_gemm_", stages["llvm ir"])
    assert "@malloc" not in stages["llvm ir"] and "@malloc" not in stages["optimized llvm ir"]


def test_the_tools_say_out_of_memory_for_a_huge_splat(tmp_path):
    """A splat of a huge type expands as xDSL parses it: a MemoryError traceback from the
    parser reached the user of tapeml-opt and tapeml-run; it is one line and exit 1."""
    path = tmp_path / "huge.mlir"
    path.write_text("func.func @main() -> tensor<100000x100000xf32> {\n"
                    "  %0 = tape.constant dense<1.0> : tensor<100000x100000xf32>\n"
                    "  func.return %0 : tensor<100000x100000xf32>\n}\n")
    out = run_isolated(f"""
        import contextlib, io
        from tapeml.tools import opt, run
        for tool in (opt, run):
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                status = tool.main([{str(path)!r}])
            print(status, err.getvalue().strip())
    """)
    lines = out.splitlines()
    assert lines == ["1 tapeml-opt: error: out of memory (a tensor too large for this machine?)",
                     "1 tapeml-run: error: out of memory (a tensor too large for this machine?)"]
