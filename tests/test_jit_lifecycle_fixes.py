"""jit's and the disk cache's handling of what surrounds a program (session 62's tester): an
editor's lock file in the package, a cache bound or folder written as people write them,
static_argnums naming an argument twice, numpy ints as batch_argnums, a jitted method, a
batch-generic program another function left in the disk cache, a namedtuple argument."""

from __future__ import annotations

import collections
import dataclasses
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tapeml
from tapeml.codegen import cpu, disk_cache


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """The cache on, in a folder of this test's own (the thread pool loaded before: it is
    not stored there)."""
    cpu.load_pool()
    monkeypatch.setenv("TAPEML_CACHE", "1")
    monkeypatch.setenv("TAPEML_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TAPEML_CACHE_MAX_BYTES", raising=False)
    return tmp_path / "cache"


def test_an_editor_lock_file_is_no_source_and_an_unreadable_source_turns_the_cache_off(
        tmp_path):
    """A copy of the package holding emacs's lock file `.#jit.py` (a link to nowhere) failed
    every jit call with FileNotFoundError from sources_digest(), for good (the failure was not
    cached). It is no source now: calls compile and store, and the digest is the package's
    without it. A source that cannot be read (here a link to /proc/self/mem, whose read fails
    with EIO even for root) is one warning, then compiles without the cache."""
    package = tmp_path / "copy" / "tapeml"
    shutil.copytree(Path(tapeml.__file__).parent, package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    lock = package / "frontend" / ".#jit.py"
    lock.symlink_to("user@host.4242:1700000000")
    script = textwrap.dedent(f"""
        import os, warnings
        import numpy as np
        import tapeml
        from tapeml.codegen import disk_cache
        assert tapeml.__file__.startswith({str(package)!r}), tapeml.__file__
        x = np.ones(3, np.float32)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert (tapeml.jit(lambda x: x * 2.0)(x) == 2).all()
        assert not caught, [str(w.message) for w in caught]
        assert os.listdir({str(tmp_path / "cache")!r})  # stored
        digest = disk_cache.sources_digest()
        os.unlink({str(lock)!r})
        disk_cache._package_digest.cache_clear()
        assert disk_cache.sources_digest() == digest  # the lock file was no part of it
        os.symlink("/proc/self/mem", {str(package / "frontend" / "unreadable.py")!r})
        disk_cache._package_digest.cache_clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for k in (3.0, 4.0):
                assert (tapeml.jit(lambda x: x * k)(x) == k).all()
        assert [str(w.message) for w in caught if "cannot be read" in str(w.message)] and \\
            len(caught) == 1, [str(w.message) for w in caught]
        assert disk_cache.default() is None
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": str(package.parent), "TAPEML_CACHE": "1",
           "TAPEML_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_the_cache_bound_reads_sizes_as_written_and_a_bad_one_keeps_the_default(
        cache_dir, monkeypatch):
    """TAPEML_CACHE_MAX_BYTES=1e9 (or 2GiB) raised a ValueError through the first jit call,
    and -5 was taken, deleting every entry after each write. Sizes as people write them are
    read; any other value, or a negative one, warns once and keeps the default bound."""
    monkeypatch.setattr(disk_cache, "_WARNED_BOUNDS", set(), raising=False)
    x = np.ones(3, np.float32)
    monkeypatch.setenv("TAPEML_CACHE_MAX_BYTES", "1e9")
    assert (tapeml.jit(_times(7))(x) == 7).all()
    assert disk_cache.default().max_bytes == 10**9
    for k, text in enumerate(("-5", "a lot", "1.5", "5iB")):
        monkeypatch.setenv("TAPEML_CACHE_MAX_BYTES", text)
        with pytest.warns(RuntimeWarning, match=rf"TAPEML_CACHE_MAX_BYTES='{text}' is .* the "
                                                "default bound, 2 GiB"):
            assert (tapeml.jit(_times(k))(x) == k).all()
        assert disk_cache.default().max_bytes == disk_cache.DEFAULT_MAX_BYTES
        assert list(cache_dir.glob("*.tapeml"))  # (-5 deleted every entry after each write)
    for text, size in [("12345", 12345), ("2GiB", 2 << 30), ("500M", 5 * 10**8),
                       ("1.5 GB", 15 * 10**8), ("64kib", 65536), (" 0 ", 0)]:
        assert disk_cache.max_bytes(text) == size, text


def _times(k: int):
    return lambda x: x * float(k)


def test_a_tilde_in_the_cache_folder_is_the_home_folder(tmp_path, monkeypatch):
    """TAPEML_CACHE_DIR="~/..." (set where no shell expands it: os.environ, a Dockerfile's
    ENV, a .env file) made a folder literally named `~` under the current directory."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TAPEML_CACHE", "1")
    monkeypatch.setenv("TAPEML_CACHE_DIR", "~/tapeml-cache")
    assert disk_cache.default().directory == tmp_path / "tapeml-cache"
    monkeypatch.delenv("TAPEML_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "~/xdg")
    assert disk_cache.default().directory == tmp_path / "xdg" / "tapeml"


def test_static_argnums_naming_an_argument_twice_name_it_once():
    """(1, 1) or (1, -1) raised a bare StopIteration from the static arguments' wrapper (and
    from .lower()); as JAX, an argument named twice is one static argument."""
    x = np.arange(4, dtype=np.float32)
    for argnums in [(1, 1), (1, -1), (-1, 1, -1)]:
        f = tapeml.jit(lambda a, k: a * k, static_argnums=argnums)
        np.testing.assert_array_equal(f(x, 3), x * 3)
        np.testing.assert_array_equal(f(x, 3), x * 3)
        assert len(f.explain().splitlines()) == 1
        assert "tape" in f.lower(x, 3)


def test_batch_argnums_take_numpy_ints_as_static_argnums_do():
    """batch_argnums=np.int64(1) was "'numpy.int64' object is not iterable" and
    (np.int64(1),) "must be ints", though static_argnums takes them: one reading serves
    both."""
    f = lambda w, x: x * w  # noqa: E731
    w = np.float32(2)
    for argnums in [np.int64(1), (np.int64(1),), (np.int32(1), 1)]:
        jitted = tapeml.jit(f, batch_argnums=argnums)
        assert jitted.batch.argnums == (1,)
        for n in (4, 3):
            np.testing.assert_array_equal(jitted(w, np.ones((n, 3), np.float32)),
                                          np.full((n, 3), 2, np.float32))
        assert "batch-generic" in jitted.explain()
    with pytest.raises(TypeError, match=r"batch_argnums must be an int or a sequence of ints, "
                                        r"got \(1, 2.0\) \(argument positions must be ints, "
                                        "not float\\)"):
        tapeml.jit(f, batch_argnums=(1, 2.0))


class _Model:
    def __init__(self, scale: float) -> None:
        self.scale = scale

    @tapeml.jit
    def forward(self, x):
        return x * self.scale

    @tapeml.jit(static_argnums=0)
    def static_forward(self, x):
        return x * self.scale

    def plain(self, x):
        return x * self.scale + 1


@dataclasses.dataclass
class _Config:  # (eq and no frozen=True: unhashable)
    scale: float

    @tapeml.jit(static_argnums=0)
    def forward(self, x):
        return x * self.scale


def test_a_jitted_method_binds_self_and_says_to_make_it_static():
    """`@tapeml.jit` on a method never bound `self` (Jitted had no __get__): "forward()
    missing 1 required positional argument: 'x'" though x was passed. It binds as a function
    does; an instance that is no pytree of arrays is an error naming `self` and saying
    static_argnums=0 (hashable), with which the decorator and jit(Model.plain) work."""
    x = np.ones(3, np.float32)
    model = _Model(3.0)
    with pytest.raises(TypeError, match=r"argument `self` is a _Model; arguments are arrays.*"
                                        r"make it static: jit\(\.\.\., static_argnums=0\); it "
                                        "must then be hashable"):
        model.forward(x)
    np.testing.assert_array_equal(model.static_forward(x), x * 3)
    np.testing.assert_array_equal(_Model(2.0).static_forward(x), x * 2)
    np.testing.assert_array_equal(model.static_forward(x), x * 3)  # (its own compilation)
    assert len(_Model.static_forward.explain().splitlines()) == 2
    np.testing.assert_array_equal(tapeml.jit(_Model.plain, static_argnums=0)(model, x),
                                  x * 3 + 1)
    assert isinstance(_Model.__dict__["forward"], type(_Model.forward))  # the class: itself
    with pytest.raises(TypeError, match=r"static arguments \(0,\) must be hashable.*a "
                                        "dataclass where it is frozen=True"):
        _Config(2.0).forward(x)
    with pytest.raises(TypeError, match=r"argument `k` is a _Model.*static_argnums=1"):
        tapeml.jit(lambda x, k: x)(x, model)
    with pytest.raises(TypeError, match=r"argument `k` is a _Model.*static_argnums=2"):
        tapeml.jit(lambda s, x, k: x, static_argnums=0)(1, x, model)


class _Static:
    @tapeml.jit
    @staticmethod
    def inner(v):
        return v + 1.0

    @staticmethod
    @tapeml.jit
    def outer(v):
        return v + 2.0


def test_a_jitted_staticmethod_binds_nothing_and_a_bound_one_lowers_with_self():
    """jit over a staticmethod bound the instance as its first argument (it worked before
    jit bound methods); a bound jitted method's lower and profile dropped `self`."""
    x = np.ones(3, np.float32)
    for holder in (_Static, _Static()):
        np.testing.assert_array_equal(holder.inner(x), x + 1)
        np.testing.assert_array_equal(holder.outer(x), x + 2)
    model = _Model(3.0)
    assert "tape" in model.static_forward.lower(x)
    assert model.static_forward.profile(x, repeat=1) is not None


def test_a_namedtuple_argument_is_said_to_be_no_pytree():
    """A namedtuple argument was "a P; arguments are arrays, numbers or pytrees (tuples, ...)",
    though a P is a tuple: it is said that jit does not take namedtuples apart, and how to
    pass one."""
    P = collections.namedtuple("P", "w b")
    a = np.ones(2, np.float32)
    with pytest.raises(TypeError, match=r"argument `p` is a P, a namedtuple, which jit does "
                                        r"not take apart.*tuple\(p\).*p\._asdict\(\)"):
        tapeml.jit(lambda p: p.w + p.b)(P(a, a))


def test_a_batch_generic_program_another_function_stored_does_not_stop_sharing(cache_dir):
    """f and g trace alike at batch 16 alone (a factor 1.0 there), g compiled first: f's
    family took g's program with batch 16's instance from the disk cache, in which the factor
    is a constant, so every later batch size of f lowered otherwise and compiled on its own.
    The first that does makes f's own program, as an empty cache would have; the rest are
    instances of it."""
    w = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    g = lambda x: (x @ w) * (1.0 if x.shape[0] >= 8 else 2.0)  # noqa: E731
    f = lambda x: (x @ w) * float(x.shape[0] % 16 + 1)  # noqa: E731
    tapeml.jit(g, batch_argnums=0)(np.ones((16, 4), np.float32))
    jitted = tapeml.jit(f, batch_argnums=0)
    for n in (16, 2, 4, 8):
        x = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_array_equal(jitted(x), tapeml.jit(f)(x))
    log = jitted.explain().splitlines()
    assert "batch size 16 from the disk cache" in log[0], log
    assert "batch size 2 an instance of the program compiled at batch sizes 16 and 33" \
        in log[1], log
    assert all("an instance of the compiled program" in line for line in log[2:]), log


def test_a_bound_jitted_method_copies_and_describes_itself_as_a_bound_method():
    """The bound form recursed forever in copy.copy (its __getattr__ asked for __func__
    before it was set) and deep-copying a holder of it copied compiled code; its doc, module
    and signature were its own, not the method's."""
    import copy
    import inspect

    model = _Model(3.0)
    x = np.ones(3, np.float32)
    bound = model.static_forward
    np.testing.assert_array_equal(bound(x), x * 3)  # (compiled: deepcopy must not copy it)
    assert copy.copy(bound) == bound and bound == model.static_forward
    held = copy.deepcopy({"callback": bound})["callback"]
    assert held.__self__ is not model and held.__self__.scale == 3.0
    np.testing.assert_array_equal(held(x), x * 3)
    assert str(inspect.signature(bound)) == "(x)"
    assert (bound.__name__, bound.__module__) == ("static_forward", __name__)
    assert "explain" in dir(bound)
