"""What `tapeml.jit` compiles once and reuses: its cache key, its eviction, and the arguments
it refuses (issue 15: FIFO eviction, two keys for one signature, 1 and 1.0 sharing an entry)."""

from __future__ import annotations

import numpy as np
import pytest

import tapeml
from tapeml import ops
from tapeml.frontend import jit as jit_module
from tapeml.tracing.pytree import flatten


def _counting(fn):
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return fn(*args, **kwargs)

    counted.__name__ = fn.__name__
    return counted, calls


def test_the_cache_keeps_the_most_recently_used():
    f, calls = _counting(lambda x: ops.sum(x))
    jitted = tapeml.jit(f, backend="interp", cache_size=2)
    a, b, c = np.ones(1), np.ones(2), np.ones(3)
    jitted(a), jitted(b)
    jitted(a)  # a is now the most recent: c evicts b
    jitted(c)
    assert len(calls) == 3
    jitted(a)
    assert len(calls) == 3
    jitted(b)
    assert len(calls) == 4


def test_one_signature_compiles_once_whichever_path_keys_it():
    """Arrays alone take a fast path; the same signature reached through the pytree walk (an
    ndarray subclass here) must find the same entry."""
    f, calls = _counting(lambda x: ops.sum(x))
    jitted = tapeml.jit(f, backend="interp")
    x = np.ones(3)
    jitted(x)
    jitted(x.view(type("Sub", (np.ndarray,), {})))
    assert len(calls) == 1
    assert jitted(x) == 3.0


def test_static_arguments_are_keyed_by_type_and_value():
    """1 == 1.0 == True, but a function may tell them apart: each compiles on its own."""
    def f(x, k):
        return x * 10.0 if isinstance(k, float) else x + k

    jitted = tapeml.jit(f, static_argnums=1, backend="interp")
    x = np.ones(2)
    assert jitted(x, 1).tolist() == [2.0, 2.0]
    assert jitted(x, 1.0).tolist() == [10.0, 10.0]
    assert jitted(x, True).tolist() == [2.0, 2.0]
    assert len(jitted.cache) == 3
    assert "static arguments changed from (1.0,) to (True,)" in jitted.explain()
    nested = tapeml.jit(lambda x, k: f(x, k[0]), static_argnums=1, backend="interp")
    assert nested(x, (1,)).tolist() == [2.0, 2.0]
    assert nested(x, (1.0,)).tolist() == [10.0, 10.0]


def test_a_python_number_is_one_signature_whatever_its_value():
    """One per kind, as JAX's weak types: every float shares one, every int another."""
    f, calls = _counting(lambda x, s: x * s)
    jitted = tapeml.jit(f)
    x = np.ones(2, np.float32)
    assert jitted(x, 2.0).tolist() == [2.0, 2.0]
    assert jitted(x, -0.5).tolist() == [-0.5, -0.5]
    assert len(calls) == 1
    assert jitted(x, 3).tolist() == [3.0, 3.0]
    assert jitted(x, 2**40).tolist() == [2.0**40] * 2
    assert len(calls) == 2
    assert "a weak float scalar" in jitted.explain()
    assert "a weak int scalar" in jitted.explain()


def test_a_spec_is_not_something_to_run_on():
    with pytest.raises(TypeError, match="runs on arrays, got a tapeml.Spec"):
        tapeml.jit(lambda x: x * 2)(tapeml.Spec((2,)))


def test_the_arrays_only_path_forgets_what_the_cache_drops():
    """Calls of arrays alone find their compilation by each array's type, shape and dtype;
    an entry the cache drops is dropped there too, and other types take the general path."""
    f, calls = _counting(lambda x: x * 2)
    jitted = tapeml.jit(f, backend="interp", cache_size=1)
    a, b = np.ones(2), np.ones(3)
    assert jitted(a).tolist() == [2.0, 2.0] and jitted(a).tolist() == [2.0, 2.0]
    assert len(calls) == 1
    jitted(b)  # evicts a's
    jitted(a)
    assert len(calls) == 3
    assert jitted(np.ones(3, np.float32)).dtype == np.float32  # another dtype: compiled
    assert len(calls) == 4
    assert jitted(2.0) == 4.0 and len(calls) == 5  # a number: the general path
    class Sub(np.ndarray):
        pass

    assert jitted(np.ones(3).view(Sub)).tolist() == [2.0] * 3  # a subclass: likewise


def test_pytrees_of_arrays_find_their_compilation_by_structure_shapes_and_dtypes(monkeypatch):
    """A call whose arguments are a pytree of arrays (a model's parameters) takes a fast path
    keyed by its structure and each array's shape and dtype: a structure that differs (tuple
    against list, another dict key, None in place of a node, a leaf's shape or dtype) is
    another signature, compiled by the general path; the same one is found again, and drops
    out with the cache's entry."""
    def f(p, x):
        return sum(ops.sum(v) for v in flatten(p)[0]) * 0.0 + ops.sum(x)

    counted, calls = _counting(f)
    jitted = tapeml.jit(counted, backend="interp", cache_size=8)
    x = np.arange(3.0)
    trees = [
        [np.ones(2), {"a": np.ones(3), "b": (np.ones(1), None)}],
        (np.ones(2), {"a": np.ones(3), "b": (np.ones(1), None)}),  # a tuple, not a list
        [np.ones(2), {"a": np.ones(3), "c": (np.ones(1), None)}],  # another key
        [np.ones(2), {"a": np.ones(3), "b": (np.ones(1), [])}],  # [] in place of None
        [np.ones(2), {"a": np.ones(3), "b": (np.ones(2), None)}],  # a shape
        [np.ones(2), {"a": np.ones(3, np.float32), "b": (np.ones(1), None)}],  # a dtype
        [np.ones(2), {"a": np.ones(3), "b": (np.ones(1),)}],  # a leaf fewer
    ]
    for i, tree in enumerate(trees):
        assert jitted(tree, x) == 3.0
        assert len(calls) == i + 1, f"tree {i} took another's compilation"
    with monkeypatch.context() as patched:  # each found again by the fast path (which
        # walks no TreeDef), with its own arrays
        patched.setattr(jit_module, "flatten", None)
        for tree in trees:
            assert jitted(tree, x + 1.0) == 6.0
    assert len(calls) == len(trees)
    assert len(jitted._fast) == len(trees)
    assert jitted([np.ones(2), {"a": np.ones(3), "b": (np.ones(1), None)}], 2.0) == 0.0 + 2.0
    assert len(calls) == len(trees) + 1  # a number among the leaves: the general path
    small = tapeml.jit(counted, backend="interp", cache_size=1)
    small(trees[0], x), small(trees[1], x)  # trees[1]'s evicts trees[0]'s, there too
    assert len(small._fast) == 1
    assert small(trees[0], x) == 3.0 and len(calls) == len(trees) + 4


def test_a_pytree_call_on_the_fast_path_validates_its_arrays_as_any_call():
    """The fast path hands the compiled program the pytree's arrays in `flatten`'s order
    (dict keys sorted), and the program still checks each: a view is copied, not misread."""
    jitted = tapeml.jit(lambda p: p["w"] @ p["b"] - p["a"])
    w = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    tree = {"w": w, "b": np.ones(3, np.float32), "a": np.full(2, 0.5, np.float32)}
    want = w @ tree["b"] - tree["a"]
    np.testing.assert_array_equal(jitted(tree), want)
    np.testing.assert_array_equal(jitted(tree), want)  # the fast path
    wide = np.arange(12.0, dtype=np.float32).reshape(2, 6)
    view = {**tree, "w": wide[:, ::2]}  # not contiguous: copied by the program's check
    np.testing.assert_array_equal(jitted(view), wide[:, ::2] @ tree["b"] - tree["a"])
    assert len(jitted.cache) == 1


def test_eager_ops_on_arrays_of_one_dtype_compute_what_the_general_path_does():
    """The eager shortcut (operands of one dtype and shape need no promotion) gives the
    general path's result and dtype, and leaves what needs promotion or a refusal to it."""
    x = np.array([-1.5, 0.0, 2.0, np.nan], np.float32)
    assert ops.add(x, x).dtype == np.float32
    np.testing.assert_array_equal(ops.maximum(x, x[::-1].copy()),
                                  [np.nan, 2.0, 2.0, np.nan])
    i = np.array([7, -7, 3], np.int32)
    assert ops.divide(i, i).dtype == np.float64  # ints divide in f64, as the general path
    assert (ops.floor_divide(i, np.array([2, 2, 0], np.int32)) == [3, -4, 0]).all()
    t = np.array([True, False])
    assert ops.add(t, t).dtype == np.bool_ and ops.multiply(t, t).tolist() == [True, False]
    with pytest.raises(TypeError, match="not defined on bool"):
        ops.subtract(t, t)
    with np.errstate(all="raise"):  # no warnings from the eager ops' IEEE semantics
        assert np.isinf(ops.divide(x, np.zeros(4, np.float32))[0])


@pytest.mark.parametrize("collecting", [True, False])
def test_a_compile_leaves_the_cycle_collector_as_it_found_it(collecting):
    """The collector is off while a program compiles (its IR is all cycles) and as it was
    after, also when the compile fails."""
    import gc

    from tapeml.errors import ShapeError

    seen = []

    def f(x):
        seen.append(gc.isenabled())
        return x * 2.0

    was = gc.isenabled()
    try:
        (gc.enable if collecting else gc.disable)()
        tapeml.jit(f)(np.ones(3, np.float32))
        assert seen == [False] and gc.isenabled() == collecting
        with pytest.raises(ShapeError):
            tapeml.jit(lambda x: x + np.ones(4, np.float32))(np.ones(3, np.float32))
        assert gc.isenabled() == collecting
    finally:
        (gc.enable if was else gc.disable)()


def test_static_floats_are_keyed_by_their_bits():
    """A static float compiles by its bits: -0.0 apart from 0.0 (it reused 0.0's program and
    returned +0 for x * -0.0), and a NaN once (NaN != NaN had compiled it at every call)."""
    f = tapeml.jit(lambda x, s: x * s, static_argnums=1)
    x = np.ones(3, np.float32)
    assert not np.signbit(f(x, 0.0)).any() and np.signbit(f(x, -0.0)).all()
    g = tapeml.jit(lambda x, s: x + s, static_argnums=1)
    for _ in range(3):
        assert np.isnan(g(x, float("nan"))).all()
    assert len(g.explain().splitlines()) == 1


def test_jit_checks_its_options_and_says_what_is_wrong():
    """static_argnums None or a numpy int are taken (as JAX's); a float, or a function that is
    not callable, or a backend flag that is not a bool, a TypeError saying so at jit(); a
    static argument passed by keyword is said to be one; a call that fails to compile is
    not in explain(), nor compared against by the next compilation."""
    x = np.ones(3, np.float32)
    np.testing.assert_array_equal(tapeml.jit(lambda x: x + 1, static_argnums=None)(x), x + 1)
    np.testing.assert_array_equal(
        tapeml.jit(lambda x, n: x * n, static_argnums=np.int64(1))(x, 3), x * 3)
    with pytest.raises(TypeError, match=r"static_argnums must be an int or a sequence of "
                                        r"ints, got 1.0"):
        tapeml.jit(lambda x: x, static_argnums=1.0)
    with pytest.raises(TypeError, match="the function to compile must be callable, got int 3"):
        tapeml.jit(3)
    with pytest.raises(TypeError, match="the cpu backend's libm must be True or False, got 'yes'"):
        tapeml.jit(lambda x: x, libm="yes")
    with pytest.raises(TypeError, match="static arguments are found by position"):
        tapeml.jit(lambda x, n: x * n, static_argnums=1)(x, n=3)
    f = tapeml.jit(lambda a: a * 2)
    f(x)
    with pytest.raises(tapeml.TracingError):
        f(np.ones(3, np.float16))
    f(np.ones(4, np.float32))
    log = f.explain().splitlines()
    assert len(log) == 2 and "float32[3] -> float32[4]" in log[1], log


def test_a_numpy_scalar_of_a_dtype_tape_has_not_is_refused_as_its_array_is():
    """After a compile for an int32 scalar, an int8 or uint8 scalar is the trace's refusal
    naming its dtype, as an int8 array's and a fresh jit's (it was keyed as int32, then the
    call's check said 'argument `x` must be int32, got int8')."""
    f = tapeml.jit(lambda x: x * 2)
    assert f(np.int32(7)) == 14
    for v in (np.int8(7), np.uint8(7)):
        with pytest.raises(tapeml.TracingError, match=rf"argument `x` has dtype {v.dtype}; tape "
                                                      "tensors hold"):
            f(v)
