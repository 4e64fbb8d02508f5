"""A compiled program's large outputs come from blocks it recycles (tapeml/codegen/outputs.py):
a block is written again only once no array refers to it, so a result the caller keeps (or
any view of it) is never overwritten by a later call."""

import gc
import threading
import weakref

import numpy as np
import pytest

import tapeml
from tapeml.codegen.outputs import KEPT, RECYCLED_BYTES
from tapeml.tracing.pytree import flatten, unflatten

N = RECYCLED_BYTES // 4  # float32 elements: an output just large enough to be recycled


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _scaled():
    f = tapeml.jit(lambda x, s: x * s)
    x = np.arange(N, dtype=np.float32)
    return f, x


def test_a_dropped_result_gives_its_block_to_the_next_call():
    f, x = _scaled()
    first = f(x, np.float32(2))
    where = _address(first)
    del first
    second = f(x, np.float32(3))
    assert _address(second) == where
    np.testing.assert_array_equal(second, x * 3)


def test_kept_results_and_views_are_never_written_again():
    f, x = _scaled()
    kept = [f(x, np.float32(s)) for s in range(KEPT + 2)]  # more than the pool keeps
    view = f(x, np.float32(-1))[5:]  # only a view of this result lives on
    later = [f(x, np.float32(10 + s)) for s in range(KEPT + 2)]
    for s, out in enumerate(kept):
        np.testing.assert_array_equal(out, x * s)
    np.testing.assert_array_equal(view, x[5:] * -1)
    for s, out in enumerate(later):
        np.testing.assert_array_equal(out, x * (10 + s))
    addresses = {_address(a) for a in kept + later} | {_address(view) - 5 * 4}
    assert len(addresses) == len(kept) + len(later) + 1


def test_a_small_output_is_a_plain_array():
    f = tapeml.jit(lambda x: x + 1)
    out = f(np.zeros(16, np.float32))
    assert out.base is None and out.flags.owndata


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.bool_])
def test_recycled_outputs_of_every_dtype(dtype):
    f = tapeml.jit(lambda x: x)
    x = (np.arange(N) % 3).astype(dtype)
    for _ in range(3):
        out = f(x)
        assert out.dtype == dtype and out.shape == x.shape and out.flags.writeable
        np.testing.assert_array_equal(out, x)


def test_calls_from_two_threads_at_once_never_share_a_block():
    f, x = _scaled()
    errors: list[str] = []

    def work(scale: float) -> None:
        for _ in range(50):
            out = f(x, np.float32(scale))
            if not np.array_equal(out, x * np.float32(scale)):
                errors.append(f"scale {scale}")

    threads = [threading.Thread(target=work, args=(s,)) for s in (2.0, 3.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_flatten_and_unflatten_keep_no_leaf_alive():
    """No reference cycle holds a tree's leaves after the call (a closure calling itself did,
    until the cyclic collector ran, so results were never free to be recycled)."""
    gc.disable()
    try:
        leaf = np.zeros(3)
        probe = weakref.ref(leaf)
        leaves, tree = flatten({"a": (leaf, [leaf]), "b": None})
        rebuilt = unflatten(tree, leaves)
        del leaf, leaves, rebuilt
        assert probe() is None
    finally:
        gc.enable()
