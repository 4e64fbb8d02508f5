"""Booleans as bytes: every backend stores True as the byte 1 (what numpy and compiled code
write), and takes a boolean argument whose bytes are other non-zero values (numpy's True, from
a view of other bytes) as numpy reads it. The emulated GPU stored 0xFF (xDSL packs an i1 true,
-1, as a signed byte), and the CPU read a byte of 2 as the number 2: astype gave 2, sum 257."""

from __future__ import annotations

import numpy as np
import pytest

import tapeml

BACKENDS = [dict(backend="interp"), dict(backend="cpu"), dict(backend="cuda", emulate=True)]


@pytest.mark.parametrize("options", BACKENDS, ids=lambda o: o["backend"])
def test_true_is_stored_as_the_byte_one(options):
    x = np.array([1.0, 2.0, 3.0, np.nan], np.float32)
    y = np.full(4, 2.0, np.float32)
    got = tapeml.jit(lambda x, y: (x < y, tapeml.logical_or(x < y, x > y)), **options)(x, y)
    for g, want in zip(got, (x < y, (x < y) | (x > y)), strict=True):
        assert g.view(np.uint8).tolist() == want.view(np.uint8).tolist()


@pytest.mark.parametrize("options", BACKENDS, ids=lambda o: o["backend"])
def test_a_boolean_argument_of_other_true_bytes_is_read_as_numpy_reads_it(options):
    b = np.array([2, 0, 255, 1], np.uint8).view(np.bool_)

    def f(b):
        return (b.astype(np.int32), tapeml.sum(b), ~b, tapeml.where(b, 1.0, 0.0),
                tapeml.logical_and(b, b))

    got = tapeml.jit(f, **options)(b)
    want = (b.astype(np.int32), b.sum(), ~b, np.where(b, 1.0, 0.0).astype(np.float32), b & b)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert got[2].view(np.uint8).tolist() == [0, 1, 0, 0]
