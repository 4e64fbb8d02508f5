"""Tracing integer and boolean arrays (issue 17): JAX's type promotion with weak Python scalars,
numpy's integer semantics through the ops API, eager mode, jit, and autodiff refusing or
stopping at integers. References are numpy written plainly and a literal promotion table."""

from __future__ import annotations

import numpy as np
import pytest
from bits import assert_same_bits
from hypothesis import given, settings
from hypothesis import strategies as st

import tapeml

B, I32, I64, F32, F64 = "bool", "int32", "int64", "float32", "float64"

# operands of every type: strong arrays, Python scalars, and weak tracers (Python numbers passed
# to a traced function as arguments)
STRONG = {B: np.array([True, False]), I32: np.array([3, -4], np.int32),
          I64: np.array([3, -4], np.int64), F32: np.array([1.5, -2.0], np.float32),
          F64: np.array([1.5, -2.0], np.float64)}
PYTHON = {"True": True, "int": 3, "float": 0.5}

# JAX's lattice, bool < int* < i32 < i64 < float* < f32 < f64, written out as a table: the
# dtype of `a + b`, a weak int* leaving as int64 and a weak float* as float32
PROMOTED = {
    (B, B): B, (B, I32): I32, (B, I64): I64, (B, F32): F32, (B, F64): F64,
    (I32, I32): I32, (I32, I64): I64, (I32, F32): F32, (I32, F64): F64,
    (I64, I64): I64, (I64, F32): F32, (I64, F64): F64,
    (F32, F32): F32, (F32, F64): F64, (F64, F64): F64,
    (B, "True"): B, (B, "int"): I64, (B, "float"): F32,
    (I32, "True"): I32, (I32, "int"): I32, (I32, "float"): F32,
    (I64, "True"): I64, (I64, "int"): I64, (I64, "float"): F32,
    (F32, "True"): F32, (F32, "int"): F32, (F32, "float"): F32,
    (F64, "True"): F64, (F64, "int"): F64, (F64, "float"): F64,
}


@pytest.mark.parametrize("pair", sorted(PROMOTED), ids=lambda p: "+".join(p))
def test_promotion_follows_jax_lattice_eager_and_traced(pair):
    a_kind, b_kind = pair
    a = STRONG[a_kind]
    b = STRONG.get(b_kind, PYTHON.get(b_kind))
    expected = np.dtype(PROMOTED[pair])
    assert tapeml.add(a, b).dtype == expected
    assert tapeml.add(b, a).dtype == expected
    traced = tapeml.jit(lambda a: tapeml.add(a, b))(a)
    assert traced.dtype == expected
    assert tapeml.jit(tapeml.add)(a, b).dtype == expected  # b an argument: a weak one if a
    # Python int or float


def _exact(a, b, dtype):
    """numpy's a + b computed in `dtype` (bool + is or)."""
    a, b = np.asarray(a).astype(dtype), np.asarray(b).astype(dtype)
    return a | b if dtype == np.bool_ else a + b


@pytest.mark.parametrize("pair", sorted(PROMOTED), ids=lambda p: "+".join(p))
def test_promoted_values_are_numpy_in_the_promoted_dtype(pair):
    a = STRONG[pair[0]]
    b = STRONG.get(pair[1], PYTHON.get(pair[1]))
    dtype = np.dtype(PROMOTED[pair])
    assert_same_bits(tapeml.jit(lambda a: a + b)(a), _exact(a, b, dtype))


def test_a_python_float_keeps_every_digit_in_a_float64_program():
    x = np.linspace(-1, 1, 5)
    out = tapeml.jit(lambda x, s: x * s)(x, 0.1)
    assert out.dtype == np.float64
    assert_same_bits(out, x * 0.1)
    out32 = tapeml.jit(lambda x, s: x * s)(x.astype(np.float32), 0.1)
    assert_same_bits(out32, x.astype(np.float32) * np.float32(0.1))


def test_weak_values_alone_stay_weak_and_leave_as_python_dtypes():
    f = tapeml.jit(lambda n, s: (n * 2, n * s, n // 2, s * 2))
    n2, ns, half, s2 = f(7, 0.25)
    assert (n2.dtype, ns.dtype, half.dtype, s2.dtype) == (I64, F32, I64, F32)
    assert (int(n2), float(ns), int(half), float(s2)) == (14, 1.75, 3, 0.5)
    # a weak int meeting an int32 array computes in int32 (wrapping), as JAX
    ids = np.array([2**31 - 1, 5], np.int32)
    out = tapeml.jit(lambda ids, n: ids + n)(ids, 1)
    assert out.dtype == np.int32
    assert_same_bits(out, np.array([-2**31, 6], np.int32))


def test_a_python_int_too_big_for_the_array_it_meets_is_an_overflow_error():
    ids = np.array([1, 2], np.int32)
    with pytest.raises(OverflowError, match=r"add: the Python integer 4294967296 does not fit "
                                            r"in int32.*\n  at .*test_integer_tracing.py"):
        tapeml.jit(lambda ids: ids + 2**32)(ids)
    with pytest.raises(OverflowError, match="does not fit in int64"):
        tapeml.jit(lambda x, n: x * n)(np.ones(2), 2**64)


def test_numpy_scalars_are_strong():
    x = np.ones(2, np.float32)
    assert tapeml.multiply(x, np.float64(2)).dtype == np.float64
    assert tapeml.jit(lambda x: x * np.float64(2))(x).dtype == np.float64
    assert tapeml.jit(lambda i: i + np.int64(1))(np.ones(2, np.int32)).dtype == np.int64


def test_narrow_numpy_dtypes_of_constants_are_widened_and_arguments_refused():
    small = np.array([200, 7], np.uint8)
    out = tapeml.jit(lambda x: x + small)(np.ones(2, np.int32))
    assert_same_bits(out, np.array([201, 8], np.int32))
    with pytest.raises(tapeml.TracingError, match="argument `x` has dtype uint8"):
        tapeml.jit(lambda x: x)(small)
    with pytest.raises(TypeError, match="tape tensors hold bool, int32, int64, float32 or "
                                        "float64, got uint64"):
        tapeml.add(np.ones(2, np.uint64), 1)


# ----------------------------------------------------------------------------------------------
# numpy's integer semantics through the API, every mode alike

EXTREMES = {np.int32: [0, 1, -1, 7, -7, 2**31 - 1, -2**31, 3, -3],
            np.int64: [0, 1, -1, 7, -7, 2**63 - 1, -2**63, 3, -3]}


def _integer_program(a, b, s):
    """tapeml's functions (so that on numpy arrays, eagerly, it is tapeml that computes; the
    operators on tracers are the same functions, tested below)."""
    t = tapeml
    return (t.floor_divide(a, b), t.remainder(a, b), t.bitwise_and(a, b), t.bitwise_or(a, b),
            t.bitwise_xor(a, b), t.invert(a), t.left_shift(a, s), t.right_shift(a, s),
            t.multiply(a, b), t.subtract(a, b), t.negative(a), t.abs(a), t.maximum(a, b),
            t.minimum(a, b), t.less(a, b), t.equal(a, b), t.where(t.less(a, b), a, b),
            t.sum(a), t.max(a), t.min(a), t.sum(t.greater(a, 0)), t.mean(a), t.divide(a, b),
            t.power(a, 3))


def _operator_program(a, b, s):
    return (a // b, a % b, a & b, a | b, a ^ b, ~a, a << s, a >> s, a * b, a - b, -a)


def _integer_reference(a, b, s):
    dt = a.dtype
    with np.errstate(all="ignore"):
        safe = np.where(b == 0, 1, b)
        floordiv = np.where(b == 0, 0, a // safe).astype(dt)
        rem = np.where(b == 0, 0, a % safe).astype(dt)
        # numpy's INT_MIN // -1 wraps to INT_MIN; a plain rule says so
        floordiv = np.where((a == np.iinfo(dt).min) & (b == -1), a, floordiv).astype(dt)
        shift = np.clip(s, 0, 8 * dt.itemsize - 1)
        left = np.where((s < 0) | (s >= 8 * dt.itemsize), 0, a << shift).astype(dt)
        right = np.where(s < 0, np.where(a < 0, -1, 0), a >> shift).astype(dt)
        return (floordiv, rem, a & b, a | b, a ^ b, ~a, left, right, a * b, a - b, -a,
                np.where(a < 0, -a, a), np.maximum(a, b), np.minimum(a, b), a < b, a == b,
                np.where(a < b, a, b), a.sum(dtype=dt), a.max(), a.min(),
                (a > 0).sum(dtype=np.int64), a.astype(np.float64).sum() / a.size,
                a.astype(np.float64) / b.astype(np.float64), a * a * a)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_integer_ops_match_numpy_in_every_mode(dtype, data):
    values = st.sampled_from(EXTREMES[dtype]) | st.integers(np.iinfo(dtype).min,
                                                             np.iinfo(dtype).max)
    a = np.array(data.draw(st.lists(values, min_size=4, max_size=4)), dtype)
    b = np.array(data.draw(st.lists(values, min_size=4, max_size=4)), dtype)
    s = np.array(data.draw(st.lists(st.integers(-2, 70), min_size=4, max_size=4)), dtype)
    expected = _integer_reference(a, b, s)
    with np.errstate(all="ignore"):
        eager = _integer_program(a, b, s)
        for mode, results in (("eager", eager),
                              ("interpreter", tapeml.trace(_integer_program, a, b, s)(a, b, s)),
                              ("cpu", tapeml.jit(_integer_program)(a, b, s))):
            for k, (got, want) in enumerate(zip(results, expected, strict=True)):
                assert_same_bits(got, want, context=f"{mode}, result {k}")
        for k, got in enumerate(tapeml.jit(_operator_program)(a, b, s)):
            assert_same_bits(got, expected[k], context=f"operator on tracers, result {k}")


def test_bool_arithmetic_is_logic_and_refuses_subtract_and_negative():
    p, q = np.array([True, True, False, False]), np.array([True, False, True, False])
    f = tapeml.jit(lambda p, q: (p + q, p * q, tapeml.maximum(p, q), tapeml.minimum(p, q),
                                 p & q, p | q, p ^ q, ~p, tapeml.logical_not(p)))
    for got, want in zip(f(p, q), (p | q, p & q, p | q, p & q, p & q, p | q, p ^ q, ~p, ~p),
                         strict=True):
        assert_same_bits(got, want)
    with pytest.raises(TypeError, match="subtract: not defined on bool operands"):
        tapeml.jit(lambda p, q: p - q)(p, q)
    with pytest.raises(TypeError, match="negative: not defined on bool operands"):
        tapeml.negative(p)
    with pytest.raises(TypeError, match="left_shift: not defined on float32"):
        tapeml.jit(lambda x: x << 1)(np.ones(2, np.float32))
    with pytest.raises(TypeError, match="where: the condition must be boolean"):
        tapeml.where(np.ones(2, np.int32), 1, 2)


def test_matrix_products_of_integers_and_booleans_are_numpys():
    """matmul, dot and einsum of integers wrap around as numpy's do (the same bits, eager and
    jitted, at the extremes); of booleans they are numpy's logical or of ands (it was a
    TypeError that said to cast: tape.matmul took floats only); an integer beside a float
    promotes as before. (Every stage's bits: test_integer_tensors.py.)"""
    rng = np.random.default_rng(5)
    calls = {"matmul": tapeml.matmul, "dot": tapeml.dot,
             "einsum": lambda a, b: tapeml.einsum("ij,jk->ik", a, b),
             "@": lambda a, b: a @ b}
    for dtype in (np.int32, np.int64):
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, (4, 9), dtype=dtype, endpoint=True)
        b = rng.integers(info.min, info.max, (9, 3), dtype=dtype, endpoint=True)
        a[0], b[:, 0] = info.min, -1  # INT_MIN * -1, summed: wraps
        with np.errstate(over="ignore"):
            expected = a @ b
        for name, f in calls.items():
            for run in (f, tapeml.jit(f)):
                got = run(a, b)
                assert got.dtype == dtype and np.array_equal(got, expected), (name, dtype)
        v = rng.integers(-5, 5, 9, dtype=dtype)  # a vector on either side, as numpy's
        assert_same_bits(tapeml.jit(tapeml.matmul)(a, v), a @ v)
        assert_same_bits(tapeml.jit(tapeml.dot)(v, v), np.dot(v, v))
    p, q = rng.random((5, 7)) < 0.2, rng.random((7, 4)) < 0.2
    for f in calls.values():
        for run in (f, tapeml.jit(f)):
            assert_same_bits(run(p, q), p @ q)
    assert_same_bits(tapeml.jit(lambda p: tapeml.einsum("ij->i", p))(p), np.einsum("ij->i", p))
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    np.testing.assert_array_equal(tapeml.jit(tapeml.matmul)(x, np.ones((3, 2), np.float32)),
                                  (x @ np.ones((3, 2))).astype(np.float32))
    assert tapeml.einsum("ij->ji", x).dtype == np.int32


def test_a_dtype_name_numpy_does_not_know_is_named_at_the_users_line():
    """numpy's "data type 'floot32' not understood", with the function it was given to and
    the user's line (it was numpy's message alone, raised from inside tapeml)."""
    x, labels = np.ones(3, np.float32), np.array([1, 0], np.int32)
    calls = {"astype": lambda d: tapeml.astype(x, d), "zeros": lambda d: tapeml.zeros(2, d),
             "ones": lambda d: tapeml.ones(2, d), "full": lambda d: tapeml.full(2, 1, d),
             "full_like": lambda d: tapeml.full_like(x, 1, d),
             "zeros_like": lambda d: tapeml.zeros_like(x, d),
             "ones_like": lambda d: tapeml.ones_like(x, d),
             "iota": lambda d: tapeml.iota(2, dtype=d),
             "arange": lambda d: tapeml.arange(3, dtype=d),
             "one_hot": lambda d: tapeml.one_hot(labels, 3, dtype=d)}
    for name, call in calls.items():
        with pytest.raises(TypeError, match=rf"^{name}: data type 'floot32' not understood\n"
                           r"  at .*test_integer_tracing.py"):
            call("floot32")
    with pytest.raises(TypeError, match=r"^astype: data type 'floot32'.*\n  at .*test_integer_"):
        tapeml.jit(lambda a: a.astype("floot32"))(x)
    # dtype=None is full's reading of the fill value, as before (not np.dtype(None): float64)
    assert tapeml.zeros(2, None).dtype == tapeml.ones(2, None).dtype == np.int64


def test_float_functions_of_integers_compute_in_float64():
    ids = np.array([0, 1, 2], np.int32)
    for fn, ref in ((tapeml.exp, np.exp), (tapeml.sqrt, np.sqrt), (tapeml.tanh, np.tanh)):
        got = tapeml.jit(fn)(ids)
        assert got.dtype == np.float64
        assert_same_bits(got, ref(ids.astype(np.float64)), ulp=1)
    assert tapeml.jit(lambda n: tapeml.exp(n))(1).dtype == np.float32  # weak stays weak


def _astype(x: np.ndarray, dtype: str) -> np.ndarray:
    """numpy's astype, but float to integer truncates and saturates, NaN to 0 (numpy leaves
    out-of-range conversions undefined; tapeml defines them, the same on every backend)."""
    if x.dtype.kind != "f" or np.dtype(dtype).kind != "i":
        return x.astype(dtype)
    info = np.iinfo(dtype)
    out = [0 if np.isnan(v) else info.max if v >= 2.0**(info.bits - 1) else
           info.min if v < -2.0**(info.bits - 1) else int(v) for v in x.astype(np.float64)]
    return np.array(out, dtype)


def test_astype_between_every_pair_matches_numpy():
    values = np.array([0, 1, -1, 3, -2**31, 2**31 - 1], np.int64)
    for src in (B, I32, I64, F32, F64):
        x = values.astype(src)
        if src.startswith("float"):
            x = np.concatenate([x, np.array([np.nan, np.inf, -np.inf, -0.0, 2.5, -2.5, 1e30],
                                            src)])
        for dst in (B, I32, I64, F32, F64):
            got = tapeml.jit(lambda x, dst=dst: x.astype(dst))(x)
            assert_same_bits(got, _astype(x, dst), context=f"{src} -> {dst}")
            assert_same_bits(tapeml.astype(x, dst), _astype(x, dst), context="eager")


def test_closed_over_boolean_mask_is_an_i1_constant():
    mask = np.tril(np.ones((3, 3), bool))
    program = tapeml.trace(lambda x: tapeml.where(mask, x, -np.inf), np.ones((3, 3)))
    assert "tensor<3x3xi1>" in str(program)
    got = tapeml.jit(lambda x: tapeml.where(mask, x, -np.inf))(np.ones((3, 3)))
    assert_same_bits(got, np.where(mask, 1.0, -np.inf))


def test_tracer_operators_take_python_ints_on_either_side():
    ids = np.array([5, -6, 7], np.int64)
    f = tapeml.jit(lambda i: (17 // i, 17 % i, 1 << (i & 3), 255 & i, 1 | i, 1 ^ i, 64 >> (i & 7)))
    want = (17 // ids, 17 % ids, 1 << (ids & 3), 255 & ids, 1 | ids, 1 ^ ids, 64 >> (ids & 7))
    for got, w in zip(f(ids), want, strict=True):
        assert_same_bits(got, w)


# ----------------------------------------------------------------------------------------------
# Autodiff: integers carry no gradient


def test_grad_refuses_integer_arguments_and_results():
    x, ids = np.ones(3), np.array([0, 1, 2])
    with pytest.raises(TypeError, match="grad: argument `ids` is int64; gradients are taken "
                                        "with respect to float arguments only"):
        tapeml.grad(lambda x, ids: tapeml.sum(x * ids), argnums=1)(x, ids)
    with pytest.raises(TypeError, match="must return a float scalar"):
        tapeml.grad(lambda x, ids: tapeml.sum(ids))(x, ids)
    for fn, arg in ((lambda ids: tapeml.sum(ids), ids), (lambda n: n * n, 3)):
        # an integer argument makes an integer result: the argument is named, not the result
        with pytest.raises(TypeError, match="grad: argument `.*` is int64; gradients are taken"):
            tapeml.grad(fn)(arg)


def test_integer_intermediates_stop_cotangents():
    """f(x) = sum(x * trunc(x)): the truncation is an integer path, so df/dx = trunc(x)."""
    x = np.array([1.5, -2.5, 3.25, 0.75])

    def f(x):
        return tapeml.sum(x * x.astype(np.int32).astype(np.float64))

    g = tapeml.grad(f)(x)
    assert_same_bits(g, np.trunc(x))
    assert_same_bits(tapeml.jit(tapeml.grad(f))(x), np.trunc(x))


def test_vjp_gives_integer_primals_zero_cotangents():
    x, ids = np.ones((3, 2)), np.array([1, 2, 3])
    out, pullback = tapeml.vjp(lambda x, ids: x * ids.reshape(3, 1), x, ids)
    dx, dids = pullback(np.ones((3, 2)))
    assert_same_bits(dx, np.repeat(ids.astype(np.float64).reshape(3, 1), 2, axis=1))
    assert_same_bits(dids, np.zeros(3, np.int64))


def test_tril_and_triu_keep_a_boolean_mask_boolean():
    """tril and triu of booleans are booleans, as numpy's (they were int64: the zeros a Python
    0 promoted them to), eager and jitted, so a causal mask made by tril goes into where."""
    m = np.ones((3, 4), bool)
    for f, ref in ((tapeml.tril, np.tril), (tapeml.triu, np.triu)):
        for run in (f, tapeml.jit(f), tapeml.jit(lambda m, f=f: f(m, 1))):
            got = run(m)
            assert got.dtype == np.bool_
        assert_same_bits(f(m, -1), ref(m, -1))
    scores = np.arange(12, dtype=np.float32).reshape(3, 4)
    masked = tapeml.jit(lambda s, m: tapeml.where(tapeml.tril(m), s, -np.inf))(scores, m)
    assert_same_bits(masked, np.where(np.tril(m), scores, np.float32(-np.inf)))


def test_a_python_int_argument_must_fit_the_integers_it_meets():
    """A Python int passed as an argument is traced as a weak i64; where it (or a value made
    of Python ints only) meets int32 arrays it is converted to int32, so the call checks that
    it fits, as numpy does and as the constant form (x + 2**40) already did: an OverflowError
    naming the argument, on every backend and the interpreter (it wrapped: ids + 2**40 gave
    ids). An int that fits still wraps as numpy's int32 sums do; an int64 array argument is
    strong and promotes."""
    ids = np.array([1, 2, -3], np.int32)
    for run in (tapeml.jit(lambda x, s: x + s), tapeml.jit(lambda x, s: x * (s + 1)),
                tapeml.jit(lambda x, s: x + s, backend="interp"),
                tapeml.trace(lambda x, s: x + s, ids, 3)):
        with pytest.raises(OverflowError, match=r"argument `s`, the Python integer "
                                                r"1099511627776, does not fit in int32"):
            run(ids, 2**40)
        assert run(ids, 2**31 - 1).dtype == np.int32
    got = tapeml.jit(lambda x, s: x + s)(ids, 2**31 - 1)
    with np.errstate(over="ignore"):
        assert_same_bits(got, ids + np.int32(2**31 - 1))
    assert_same_bits(tapeml.jit(lambda x, s: x + s)(ids, np.int64(2**40)),
                     ids.astype(np.int64) + 2**40)
    assert_same_bits(tapeml.jit(lambda x, s: x * 2.5 + s)(np.ones(2, np.float32), 2**40),
                     np.full(2, 2.5 + 2**40, np.float32))


def test_a_python_int_update_or_arange_bound_must_fit_the_dtype():
    """x.at[i].set/add/max(a Python int) on int32 and arange(..., dtype=int32) are an
    OverflowError where the int does not fit (they wrapped: x.at[i].set(2**40) wrote 0),
    eager and jitted, as x + 2**40 is; arrays of updates are cast, as JAX's."""
    x, i = np.zeros(4, np.int32), np.array([0, 1])
    for kind in ("set", "add", "max", "min"):
        for run in (lambda x, i, k=kind: getattr(tapeml.at(x)[i], k)(2**40),
                    tapeml.jit(lambda x, i, k=kind: getattr(x.at[i], k)(2**40))):
            with pytest.raises(OverflowError, match=r"at\[...\]: the Python integer "
                                                    r"1099511627776 does not fit in int32"):
                run(x, i)
    assert_same_bits(tapeml.jit(lambda x, i: x.at[i].add(2**31 - 1))(x, i),
                     np.array([2**31 - 1] * 2 + [0, 0], np.int32))
    assert_same_bits(tapeml.jit(lambda x, i, u: x.at[i].add(u))(x, i, np.array([2**40 + 3, 1])),
                     np.array([3, 1, 0, 0], np.int32))
    for bounds in ((2**40, 2**40 + 4), (0, 2**33, 2**31)):
        with pytest.raises(OverflowError, match=r"arange: \d+ does not fit in int32"):
            tapeml.arange(*bounds, dtype=np.int32)
    assert_same_bits(tapeml.arange(2**31 - 3, 2**31, dtype=np.int32),
                     np.arange(2**31 - 3, 2**31, dtype=np.int32))


def test_max_and_min_of_booleans_are_any_and_all():
    """max and min of booleans are booleans, as numpy's (whether any, whether all is True);
    they were a ShapeError naming tape.max, min's too."""
    m = np.array([[True, False], [True, True]])
    for f, ref in ((tapeml.max, np.max), (tapeml.min, np.min)):
        for axis in (None, 0, 1):
            for run in (f, tapeml.jit(f, static_argnums=1)):
                assert_same_bits(np.asarray(run(m, axis)), np.asarray(ref(m, axis=axis)))


def test_the_fit_check_follows_python_ints_only_and_through_grad_and_programs():
    """Only a Python int that reaches the int32 conversion must fit: one that feeds a
    comparison (a where's condition) or a Python float does not (they were refused: a
    spurious OverflowError); and the check holds through value_and_grad inside jit and a
    Program replayed inside jit (it was lost there: the int wrapped)."""
    ids = np.array([1, 2, 3], np.int32)
    f = tapeml.jit(lambda ids, n: ids + tapeml.where(n > 2**35, 1, 0))
    assert_same_bits(f(ids, 2**40), ids + 1)
    g = tapeml.jit(lambda ids, x: ids + tapeml.where(x > 0, 1, 2))
    assert_same_bits(g(ids, 1e10), ids + 1)
    w = np.ones(3, np.float32)

    def loss(w, ids, n):
        return tapeml.sum(w * (ids + n))

    program = tapeml.trace(lambda ids, n: ids + n, ids, 3)
    for run in (tapeml.jit(lambda w, ids, n: tapeml.value_and_grad(loss)(w, ids, n)[0]),
                tapeml.jit(lambda w, ids, n: program(ids, n))):
        with pytest.raises(OverflowError, match="the Python integer 4294967303, does not fit"):
            run(w, ids, 2**32 + 7)


def test_a_program_in_a_trace_refuses_an_array_of_another_dtype():
    """A numpy array of another dtype given to a Program inside a trace is a TypeError, as the
    interpreter's check is (it was converted silently: floats truncated into an int32
    argument)."""
    program = tapeml.trace(lambda x, y: x + y, np.ones(3, np.float32), np.ones(3, np.int32))
    with pytest.raises(TypeError, match=r"argument 1 \(`y`\) must have dtype int32, the dtype "
                                        r"it was traced \(or loaded\) with, got float64"):
        tapeml.jit(lambda x: program(x, np.array([1.7, 2.7, -3.7])))(np.ones(3, np.float32))
