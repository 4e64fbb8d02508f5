"""The persistent compilation cache (tapeml/codegen/disk_cache.py): a program compiled once is
loaded from disk after, bit for bit the same; each part of the key misses on its own; a damaged
entry is deleted and recompiled, never loaded; two processes may compile one program at once;
the size bound evicts the least recently used."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tapeml
from tapeml import nn, ops
from tapeml.codegen import cpu, disk_cache, get_backend


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """The cache on, in a folder of this test's own (which the thread pool, loaded once per
    process, is not stored in: loaded before)."""
    cpu.load_pool()
    monkeypatch.setenv("TAPEML_CACHE", "1")
    monkeypatch.setenv("TAPEML_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TAPEML_CACHE_MAX_BYTES", raising=False)
    return tmp_path / "cache"


def _mlp():
    rng = np.random.default_rng(0)
    params = {"lin1": nn.linear_init(rng, 24, 16), "lin2": nn.linear_init(rng, 16, 5)}
    x = rng.standard_normal((7, 24)).astype(np.float32)
    y = np.eye(5, dtype=np.float32)[rng.integers(0, 5, 7)]

    def loss(p, x, y):
        h = ops.tanh(nn.linear(p["lin1"], x))
        return nn.softmax_cross_entropy(nn.linear(p["lin2"], h), y)

    return tapeml.value_and_grad(loss), (params, x, y)


def _cnn():
    rng = np.random.default_rng(1)
    params = {"c": nn.conv2d_init(rng, 2, 4, 3), "out": nn.linear_init(rng, 4 * 3 * 3, 3)}
    x = rng.standard_normal((2, 2, 6, 6)).astype(np.float32)

    def loss(p, x):
        h = nn.max_pool2d(ops.relu(nn.conv2d(x, p["c"]["W"], p["c"]["b"], padding=1)), 2)
        return ops.sum(nn.linear(p["out"], ops.reshape(h, (2, -1))) ** 2)

    return tapeml.value_and_grad(loss), (params, x)


def _integers():
    rng = np.random.default_rng(2)
    tokens = rng.integers(-9, 9, (5, 6)).astype(np.int32)
    table = rng.standard_normal((18, 3))

    def f(tokens, table):
        rows = ops.take(table, tokens + 9, axis=0)
        return ops.where(tokens > 0, tokens // 4, tokens % 3), ops.exp(rows).sum(axis=1)

    return f, (tokens, table)


def _small():
    """Quick to compile: what the tests of the key and of damaged entries use."""
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)

    def small(x, y):
        return ops.sum(ops.tanh(x) * y, axis=1)

    return small, (x, x + 1)


PROGRAMS = {"mlp step (GEMM kernels)": _mlp, "cnn step": _cnn, "integers, f64": _integers}


def _leaves(tree):
    return tapeml.tracing.pytree.flatten(tree)[0]


def _same_bits(a, b):
    for x, y in zip(_leaves(a), _leaves(b), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


def _compile(fn, args, **options):
    program = tapeml.trace(fn, *args)
    return program, get_backend("cpu", **options).compile(program.module)


def _run(program, compiled, args):
    return compiled(*_leaves(args))


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_stored_program_loads_and_computes_the_same_bits(name, threads, cache_dir,
                                                           monkeypatch):
    monkeypatch.setenv("TAPEML_NUM_THREADS", threads)
    fn, args = PROGRAMS[name]()
    monkeypatch.setenv("TAPEML_CACHE", "0")
    program, fresh = _compile(fn, args)
    expected = _run(program, fresh, args)
    monkeypatch.setenv("TAPEML_CACHE", "1")
    _, stored = _compile(fn, args)
    assert stored.origin == "compiled" and len(list(cache_dir.iterdir())) == 1
    _, loaded = _compile(fn, args)
    assert loaded.origin == "disk cache"
    assert loaded.kernels == stored.kernels and loaded.arena_bytes == stored.arena_bytes
    for compiled in (stored, loaded):
        _same_bits(_run(program, compiled, args), expected)
        _same_bits(_run(program, compiled, args), expected)  # the arena, reused


def test_a_loaded_program_checks_its_arguments(cache_dir):
    fn, args = _small()
    _compile(fn, args)
    _, loaded = _compile(fn, args)
    assert loaded.origin == "disk cache"
    with pytest.raises(ValueError, match="must have shape"):
        loaded(args[0], args[1][:2])
    with pytest.raises(TypeError, match="must be float32"):
        loaded(args[0], args[1].astype(np.float64))


def _origin_after(change, cache_dir, monkeypatch) -> str:
    """Store the small program, apply `change` (a function of monkeypatch), compile it
    again."""
    fn, args = _small()
    _compile(fn, args)
    options = change(monkeypatch) or {}
    fn2, args2 = options.pop("program", (fn, args))
    return _compile(fn2, args2, **options)[1].origin


def _other_shape(monkeypatch):
    fn, (x, y) = _small()
    return {"program": (fn, (x[:2], y[:2]))}


def _other_dtype(monkeypatch):
    fn, (x, y) = _small()
    return {"program": (fn, (x.astype(np.float64), y))}


def _other_features(monkeypatch):
    features = cpu.llvm_binding.get_host_cpu_features()
    features["avx512f"] = not features.get("avx512f", False)
    monkeypatch.setattr(cpu.llvm_binding, "get_host_cpu_features", lambda: features)


KEY_PARTS = {
    "nothing": (lambda monkeypatch: None, "disk cache"),
    "a shape": (_other_shape, "compiled"),
    "a dtype": (_other_dtype, "compiled"),
    "an option (fuse)": (lambda monkeypatch: {"fuse": False}, "compiled"),
    "an option (libm)": (lambda monkeypatch: {"libm": True}, "compiled"),
    "the thread count": (lambda m: m.setenv("TAPEML_NUM_THREADS", "3"), "compiled"),
    "the CPU's features": (_other_features, "compiled"),
    "the CPU's name": (lambda m: m.setattr(cpu.llvm_binding, "get_host_cpu_name",
                                           lambda: "another-cpu"), "compiled"),
    "tapeml's sources": (lambda m: m.setattr(disk_cache, "sources_digest", lambda: "edited"),
                         "compiled"),
    "xDSL's version": (lambda m: m.setattr(disk_cache, "xdsl_version", lambda: "0.0.1"),
                       "compiled"),
}


@pytest.mark.parametrize("part", list(KEY_PARTS))
def test_each_part_of_the_key_misses_when_it_changes(part, cache_dir, monkeypatch):
    monkeypatch.setenv("TAPEML_NUM_THREADS", "1")
    change, origin = KEY_PARTS[part]
    assert _origin_after(change, cache_dir, monkeypatch) == origin


def _program_texts() -> dict[str, str]:
    """program_text of programs that differ in one thing each (and one traced twice)."""
    x = np.ones((3, 4), np.float32)
    y = np.ones((4, 3), np.float32)
    programs = {
        "x * 2 + y.T": (lambda x, y: x * 2.0 + y.T, (x, y)),
        "again": (lambda x, y: x * 2.0 + y.T, (x, y)),
        "another constant": (lambda x, y: x * 3.0 + y.T, (x, y)),
        "operands swapped": (lambda x, y: y.T + x * 2.0, (x, y)),
        "another op": (lambda x, y: x * 2.0 - y.T, (x, y)),
        "another dtype": (lambda x, y: x * 2.0 + y.T, (x.astype(np.float64), y)),
        "another shape": (lambda x, y: x[:2] * 2.0 + y.T[:2], (x, y)),
        "sum over axis 0": (lambda x, y: ops.sum(x * y.T, axis=0), (x, y)),
        "sum over axis 1": (lambda x, y: ops.sum(x * y.T, axis=1), (x, y)),
    }
    return {name: disk_cache.program_text(tapeml.trace(fn, *args).module)
            for name, (fn, args) in programs.items()}


def test_the_program_text_tells_programs_apart():
    """The key's program part: the same for a program traced twice, another for a program
    that differs in a constant, an operand's place, an op, a dtype, a shape or an attribute."""
    texts = _program_texts()
    assert texts["x * 2 + y.T"] == texts["again"]
    others = [t for name, t in texts.items() if name != "again"]
    assert len(set(others)) == len(others)


def test_the_program_text_reaches_into_regions():
    """A fused program's groups are regions: a change inside one changes the text."""
    from tapeml.transforms.fuse import fuse

    x = np.ones((3, 4), np.float32)
    texts = []
    for fn in (lambda x: ops.exp(x) * 2.0 + 1.0, lambda x: ops.exp(x) * 2.0 - 1.0):
        module = tapeml.trace(fn, x).module
        fuse(module)
        assert "tape.fused" in str(module)
        texts.append(disk_cache.program_text(module))
    assert texts[0] != texts[1]


def _damage_truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


def _damage_flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))


def _damage_other_format(path: Path) -> None:
    path.write_bytes(b"not a cache entry at all")


def _damage_empty(path: Path) -> None:
    path.write_bytes(b"")


def _damage_other_program(path: Path) -> None:
    """A whole entry (right magic and digest) of a program of another name."""
    payload = disk_cache._payload(path.read_bytes())
    cache = disk_cache.DiskCache(path.parent)
    cache.put(path.name.removesuffix(disk_cache.SUFFIX),
              payload.replace(b'"name": "small"', b'"name": "smell"'))


@pytest.mark.parametrize("damage", [_damage_truncate, _damage_flip, _damage_other_format,
                                    _damage_empty, _damage_other_program],
                         ids=lambda f: f.__name__.removeprefix("_damage_"))
def test_a_damaged_entry_is_deleted_and_recompiled_never_loaded(damage, cache_dir):
    fn, args = _small()
    program, stored = _compile(fn, args)
    expected = _run(program, stored, args)
    (entry,) = [e for e in cache_dir.glob("*" + disk_cache.SUFFIX)  # (not its shared code)
                if b'"arena_bytes"' in e.read_bytes()]
    damage(entry)
    _, again = _compile(fn, args)
    assert again.origin == "compiled"
    _same_bits(_run(program, again, args), expected)
    _, loaded = _compile(fn, args)  # the entry written again is whole
    assert loaded.origin == "disk cache"
    _same_bits(_run(program, loaded, args), expected)


def test_two_processes_compiling_one_program_at_once_both_succeed(cache_dir):
    code = textwrap.dedent("""
        import sys, numpy as np, tapeml
        sys.path.insert(0, sys.argv[1])
        import test_disk_cache as t
        fn, args = t._mlp()
        program, compiled = t._compile(fn, args)
        out = t._run(program, compiled, args)
        sys.stdout.write(compiled.origin + " " + b"".join(np.asarray(o).tobytes()
                                                          for o in out).hex())
        """)
    env = {**os.environ, "TAPEML_CACHE": "1", "TAPEML_CACHE_DIR": str(cache_dir)}
    here = str(Path(__file__).parent)
    children = [subprocess.Popen([sys.executable, "-c", code, here], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(2)]
    outputs = [child.communicate(timeout=300) for child in children]
    assert all(child.returncode == 0 for child in children), outputs
    bits = {out.split()[1] for out, _ in outputs}
    assert len(bits) == 1
    fn, args = _mlp()
    program, loaded = _compile(fn, args)
    assert loaded.origin == "disk cache"
    # the program, the thread pool where its code runs on more than one thread (a process
    # pinned to one core compiles none), its GEMM kernels' modules (a kernel, the tiles of
    # each height: cpu.kernel_modules), its shared functions' module, and no temporary file
    entries = list(cache_dir.iterdir())
    modules = {prefix for v in loaded.variants for prefix in (v.symbol, v.tiles)}
    shared = set(loaded.shared.values())
    assert loaded.variants and len(entries) == 1 + loaded.pooled + len(modules) + len(shared)
    assert {p.suffix for p in entries} == {disk_cache.SUFFIX}
    assert b"".join(np.asarray(o).tobytes() for o in _run(program, loaded, args)).hex() in bits


def test_the_size_bound_evicts_the_least_recently_used(tmp_path):
    cache = disk_cache.DiskCache(tmp_path, max_bytes=3 * 1100)
    for i, name in enumerate("abcd"):
        cache.put(name, bytes([i]) * 1000)
        os.utime(cache.path(name), (i, i))  # the order of use, without waiting for the clock
    assert sorted(p.stem for p in tmp_path.iterdir()) == ["b", "c", "d"]  # a went
    assert cache.get("b") == bytes([1]) * 1000  # used now: the most recent
    cache.put("e", b"\4" * 1000)
    assert sorted(p.stem for p in tmp_path.iterdir()) == ["b", "d", "e"]  # c went, not b


def test_the_environment_turns_it_off_and_moves_it(tmp_path, monkeypatch):
    monkeypatch.delenv("TAPEML_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for off in ("0", "off", "False", "no"):
        monkeypatch.setenv("TAPEML_CACHE", off)
        assert disk_cache.default() is None
    monkeypatch.setenv("TAPEML_CACHE", "1")
    assert disk_cache.default().directory == tmp_path / "tapeml"
    monkeypatch.setenv("TAPEML_CACHE_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("TAPEML_CACHE_MAX_BYTES", "12345")
    cache = disk_cache.default()
    assert (cache.directory, cache.max_bytes) == (tmp_path / "elsewhere", 12345)
    monkeypatch.setenv("TAPEML_CACHE_MAX_BYTES", "a lot")  # (a compile goes on: the default)
    with pytest.warns(RuntimeWarning,
                      match="TAPEML_CACHE_MAX_BYTES='a lot' is not a number of bytes"):
        assert disk_cache.default().max_bytes == disk_cache.DEFAULT_MAX_BYTES


def test_a_cache_that_cannot_be_written_warns_and_compiles(tmp_path, monkeypatch):
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    monkeypatch.setenv("TAPEML_CACHE", "1")
    monkeypatch.setenv("TAPEML_CACHE_DIR", str(blocked / "cache"))
    fn, args = _small()
    with pytest.warns(RuntimeWarning, match="cannot be written"):
        program, compiled = _compile(fn, args)
    assert compiled.origin == "compiled" and len(_run(program, compiled, args)) == 1


def test_stages_are_compiled_not_loaded(cache_dir):
    fn, args = _small()
    program = tapeml.trace(fn, *args)
    get_backend("cpu").compile(program.module)
    kept = get_backend("cpu").compile(program.module, stages=True)
    assert kept.origin == "compiled" and "llvm ir" in kept.stages


def test_explain_says_which_compilation_came_from_the_disk_cache(cache_dir):
    fn, args = _small()
    tapeml.jit(fn)(*args)
    step = tapeml.jit(fn)  # another jit of the same function: this process's second compile
    step(*args)
    assert "its machine code came from the disk cache" in step.explain()


_KEPT_KERNELS = []  # engines of kernels loaded by these tests: their code must outlive them


@pytest.fixture
def fresh_kernels(monkeypatch):
    """load_kernel as in a new process: no kernel loaded yet."""
    def fresh():
        kernels: dict = {}
        _KEPT_KERNELS.append(kernels)
        monkeypatch.setattr(cpu, "_KERNELS", kernels)

    fresh()
    return fresh


def _kernel_spec():
    from tapeml.codegen.gemm import GemmSpec
    return GemmSpec("f64", 3, 13, 21, 300, (13 * 300, 1, 13), (300 * 21, 21, 1), 13 * 21, False)


def _kernel_computes(spec):
    """The caller of `spec`, linked to the kernel loaded now, against numpy."""
    import ctypes

    import llvmlite.binding as llvm

    machine = cpu.target_machine()
    engine = llvm.create_mcjit_compiler(cpu.callers_module([spec], machine), machine)
    engine.finalize_object()
    scratch = cpu.bind_scratch(engine, [spec.symbol])
    rng = np.random.default_rng(5)
    a = rng.standard_normal((spec.batch, spec.k, spec.m))  # A transposed: read in place
    b = rng.standard_normal((spec.batch, spec.k, spec.n))
    out = np.full((spec.batch, spec.m, spec.n), np.nan)
    ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 3)(engine.get_function_address(spec.symbol))(
        a.ctypes.data, b.ctypes.data, out.ctypes.data)
    _KEPT_KERNELS.append((engine, scratch))
    np.testing.assert_allclose(out, a.transpose(0, 2, 1) @ b, rtol=0, atol=1e-12 * spec.k)


def test_a_kernel_is_compiled_once_per_process_then_loaded_from_disk(cache_dir, fresh_kernels):
    from tapeml.codegen.gemm import Target, variant

    spec = _kernel_spec()
    v = variant(spec, Target.host())
    assert cpu.load_kernel(v) == "compiled"
    assert cpu.load_kernel(v) == "loaded"
    assert len(list(cache_dir.glob("*" + disk_cache.SUFFIX))) == 2  # the kernel, its tiles
    fresh_kernels()  # a new process, the same disk
    assert cpu.load_kernel(v) == "disk cache"
    _kernel_computes(spec)


def test_a_second_tile_height_compiles_only_its_tiles(cache_dir, fresh_kernels):
    """Two products whose tiles differ in height (13 rows, and 128 rows in tiles of 8) call one
    kernel module with two modules of tiles: the second compiles only its tiles, and each
    computes its product."""
    from tapeml.codegen.gemm import GemmSpec, Target, variant

    short = _kernel_spec()
    tall = GemmSpec("f64", 3, 128, 21, 300, (128 * 300, 1, 128), (300 * 21, 21, 1), 128 * 21,
                    False)
    first, second = (variant(spec, Target.host()) for spec in (short, tall))
    assert first.mr != second.mr and first.symbol == second.symbol
    assert cpu.load_kernel(first) == "compiled"
    assert cpu.load_kernel(second) == "compiled"
    assert set(cpu._KERNELS) == {first.symbol, first.tiles, second.tiles}
    assert len(list(cache_dir.glob("*" + disk_cache.SUFFIX))) == 3
    _kernel_computes(short)
    _kernel_computes(tall)


@pytest.mark.parametrize("damage", [_damage_truncate, _damage_flip, _damage_other_format],
                         ids=lambda f: f.__name__.removeprefix("_damage_"))
def test_a_damaged_kernel_entry_is_recompiled_never_loaded(damage, cache_dir, fresh_kernels):
    from tapeml.codegen.gemm import Target, variant

    spec = _kernel_spec()
    v = variant(spec, Target.host())
    assert cpu.load_kernel(v) == "compiled"
    for entry in cache_dir.glob("*" + disk_cache.SUFFIX):  # the kernel's and its tiles'
        damage(entry)
    fresh_kernels()
    assert cpu.load_kernel(v) == "compiled"
    _kernel_computes(spec)
    fresh_kernels()
    assert cpu.load_kernel(v) == "disk cache"  # the entry written again is whole


def test_the_thread_pool_is_compiled_once_then_loaded_from_disk(cache_dir):
    """The pool every threaded program and kernel calls (pool.py) is kept on disk as the
    kernels are: a new process loads its object code, and it runs a range over threads."""
    import ctypes
    import threading

    from tapeml.codegen import pool

    source = pool.ir(pool.platform(cpu.llvm_binding.get_default_triple()))
    engines = [cpu.cached_engine("thread pool", source, pool.compile_for, "tapeml_parallel_for")
               for _ in range(2)]
    assert [origin for _, origin in engines] == ["compiled", "disk cache"]
    part = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    parallel_for = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                    ctypes.c_int64)(
        engines[1][0].get_function_address("tapeml_parallel_for"))
    covered: list[int] = []
    lock = threading.Lock()

    def run(context, start, end):
        with lock:
            covered.extend(range(start, end))

    callback = part(run)
    parallel_for(ctypes.cast(callback, ctypes.c_void_p), None, 100, 2)
    assert sorted(covered) == list(range(100))
    _KEPT_KERNELS.append(engines)  # the engines' code outlives the test, as a process's


def test_a_program_loaded_from_disk_loads_the_kernels_it_calls(cache_dir, fresh_kernels):
    """A program's entry holds its calls, not its kernels: loading it in a new process loads
    them first (here from the disk too), and it computes the same bits."""
    fn, args = _mlp()
    program, stored = _compile(fn, args)
    assert stored.variants and len(stored.kernels) >= len(stored.variants)
    expected = _run(program, stored, args)
    fresh_kernels()
    with tapeml.profile() as stages:
        _, loaded = _compile(fn, args)
    assert loaded.origin == "disk cache" and loaded.variants == stored.variants
    assert all(cpu.load_kernel(v) == "loaded" for v in loaded.variants)
    assert not any(s.name == "GEMM kernels" for s in stages)  # nothing linked: loaded
    _same_bits(_run(program, loaded, args), expected)


def _weights():
    """A program holding constants above and below data.DATA_BYTES, of three dtypes."""
    rng = np.random.default_rng(5)
    big = rng.standard_normal((64, 48)).astype(np.float32)  # 12 KB: data
    big64 = rng.standard_normal((40, 30))  # 9.6 KB of float64: data
    table = rng.integers(-9, 9, (1200, 3))  # int64: data
    small = rng.standard_normal((48,)).astype(np.float32)  # in the code

    def f(x, i):
        y = ops.tanh(x @ big + small)
        return y, ops.sum(big64 * ops.astype(x[0, 0], np.float64)), ops.take(table, i, axis=0)

    x = rng.standard_normal((5, 64)).astype(np.float32)
    i = np.array([0, 7, 1199, 3])
    expected = (np.tanh(x @ big + small), np.sum(big64 * np.float64(x[0, 0])), table[i])
    return f, (x, i), expected


def test_large_constants_are_data_bound_at_load_and_kept_in_the_cache(cache_dir):
    """The constants above DATA_BYTES leave the code (pointers bound to copies of their bytes,
    stored once per content in the cache); the program computes the same from the cache, and
    a program whose data is gone from the cache is compiled again, not run on nothing."""
    from tapeml.codegen import data

    fn, args, expected = _weights()
    program, stored = _compile(fn, args)
    assert stored.origin == "compiled" and len(stored.data) == 3
    assert all(len(b) > data.DATA_BYTES for b in stored.data.values())
    got = stored(*args)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-12)
    np.testing.assert_array_equal(got[2], expected[2])
    _, loaded = _compile(fn, args)
    assert loaded.origin == "disk cache"
    _same_bits(loaded(*args), got)
    for payload in stored.data.values():  # the data gone: compiled again
        (cache_dir / f"{disk_cache.key('data', data.digest(payload))}.tapeml").unlink()
    _, again = _compile(fn, args)
    assert again.origin == "compiled"
    _same_bits(again(*args), got)


def test_binding_data_to_code_without_its_global_raises():
    """data.bind on an engine whose code lacks the global (a damaged entry, a bad link): an
    error naming it, not a write through address 0."""
    from tapeml.codegen import data, llvm_worker

    code = llvm_worker.object_code("define void @f() {\n  ret void\n}\n", None)
    engine = cpu.object_engine(code)
    with pytest.raises(RuntimeError, match="'weights'"):
        data.bind(engine, {"weights": bytes(64)})


def test_the_program_text_digests_dense_literals():
    a = np.arange(4096, dtype=np.float32)
    f, g = (lambda x: x + a), (lambda x: x + a[::-1].copy())
    x = np.ones(4096, np.float32)
    text_f = disk_cache.program_text(tapeml.trace(f, x).module)
    assert text_f != disk_cache.program_text(tapeml.trace(g, x).module)
    assert len(text_f) < 2000  # a digest, not the 4096 elements
