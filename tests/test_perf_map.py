"""TAPEML_PERF_MAP: the functions of every object the CPU backend loads, where they were loaded,
in Linux perf's map of JIT code."""

from __future__ import annotations

import numpy as np
import pytest

import tapeml
from tapeml.codegen import cpu, llvm_worker, perf_map
from tapeml.codegen.gemm import Target, variant
from tapeml.dialects.kernel import GemmSpec


@pytest.fixture
def map_file(tmp_path, monkeypatch):
    out = tmp_path / "perf.map"
    monkeypatch.setattr(perf_map, "path", lambda: str(out))
    return out


def _kernel(dtype: str, size: int):
    """The variant of a size x size x size product and its kernel's object code."""
    spec = GemmSpec(dtype=dtype, batch=1, m=size, n=size, k=size, a=(0, size, 1),
                    b=(0, size, 1), c0=0, accumulate=False)
    v = variant(spec, Target.host())
    machine = cpu.target_machine()
    module, _ = cpu.kernel_modules(v)
    return module.prefix, module.published, llvm_worker.emit(machine, module.ir(machine))


def _entries(out) -> dict[str, tuple[int, int]]:
    entries = {}
    for line in out.read_text().splitlines():
        start, size, name = line.split(" ", 2)
        entries[name] = (int(start, 16), int(size, 16))
    return entries


def test_a_kernels_functions_are_mapped_where_the_engine_loaded_them(map_file, monkeypatch):
    monkeypatch.setenv(perf_map.ENABLED, "1")
    prefix, published, code = _kernel("f64", 40)
    engine = cpu.object_engine(code)
    entries = _entries(map_file)
    for symbol in published:  # the global ones: where the engine says
        assert entries[symbol][0] == engine.get_function_address(symbol)
    internal = {f"{prefix}.part", f"{prefix}.edge", f"{prefix}.finish"}
    assert internal <= set(entries)  # the local ones too, which the engine does not name
    spans = sorted(entries.values())
    assert all(size > 0 for _, size in spans)
    assert all(a + size <= b for (a, size), (b, _) in zip(spans, spans[1:], strict=False))


def test_a_programs_entry_is_mapped(map_file, monkeypatch):
    monkeypatch.setenv(perf_map.ENABLED, "1")
    offset = np.float32(np.random.default_rng().integers(1 << 20))  # a program not seen before

    def perf_mapped(x):
        return tapeml.tanh(x) + offset

    x = np.linspace(-1, 1, 16, dtype=np.float32)
    np.testing.assert_allclose(tapeml.jit(perf_mapped)(x), np.tanh(x) + offset, rtol=1e-6)
    assert any(name.endswith("perf_mapped") for name in _entries(map_file))


def test_nothing_is_written_unless_asked(map_file, monkeypatch):
    monkeypatch.delenv(perf_map.ENABLED, raising=False)
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(tapeml.jit(lambda x: x * 3.0)(x), x * 3.0)
    assert not map_file.exists()


@pytest.mark.parametrize("code", [b"", b"not an object", b"\x7fELF\x02\x01" + bytes(58),
                                  b"\x7fELF\x01\x01" + bytes(200)])
def test_what_is_not_a_64_bit_elf_object_maps_nothing(code):
    assert perf_map.lines(code, lambda name: 1 << 20) == []


def test_a_truncated_object_maps_nothing_and_raises_nothing():
    _, _, code = _kernel("f32", 3)
    assert perf_map.lines(code, lambda name: 1 << 20)  # whole: its functions
    for cut in (64, len(code) // 2, len(code) - 8):
        perf_map.lines(code[:cut], lambda name: 1 << 20)  # no exception, whatever it finds
