"""The pullbacks of tape.take and tape.scatter (issue 17, indexing): vector-Jacobian products
against finite differences in f64, to second order, and against the rules written out (a clamped
read's cotangent goes to the element read; a dropped update gets none; a set's winner gets it;
max/min split ties evenly). Through tape-differentiate on the module: tracing integer arrays is
the frontend's part. Their semantics and stages: test_gather_scatter.py."""

from __future__ import annotations

import numpy as np
import pytest
from bits import assert_same_bits

import tapeml
from tapeml.transforms.differentiate import differentiate

KINDS = ("set", "add", "max", "min")


# ----------------------------------------------------------------------------------------------
# Pullbacks: vector-Jacobian products against finite differences (f64), to second order, and
# against the rules written out


def _vjp_program(text: str, wrt: tuple[int, ...]) -> tapeml.Program:
    """The program, its result 0's vector-Jacobian product appended (one more argument, the
    cotangent; one more result per `wrt` argument)."""
    program = tapeml.Program.parse(text)
    differentiate(program.function, wrt=wrt, of=(0,), seed=True)
    program.module.verify()
    return tapeml.Program.parse(str(program))


def _run(program: tapeml.Program, *args) -> list[np.ndarray]:
    return tapeml.interpret(program.module, program.name, *args)


def check_vjp(text: str, args: list, wrt: tuple[int, ...], seed: int = 0,
              eps: float = 1e-6) -> None:
    """<J^T c, v> for the `wrt` arguments against (<f(a + eps v), c> - <f(a - eps v), c>)/2eps."""
    rng = np.random.default_rng(seed)
    forward = tapeml.Program.parse(text)
    out = _run(forward, *args)[0]
    c = rng.standard_normal(out.shape)
    directions = {i: rng.standard_normal(args[i].shape) for i in wrt}
    grads = _run(_vjp_program(text, wrt), *args, c)[-len(wrt):]
    analytic = sum(float(np.vdot(g, directions[i])) for g, i in zip(grads, wrt, strict=True))

    def along(t: float) -> float:
        moved = [a + t * directions[i] if i in directions else a for i, a in enumerate(args)]
        return float(np.vdot(_run(forward, *moved)[0], c))

    numeric = (along(eps) - along(-eps)) / (2 * eps)
    assert np.isclose(analytic, numeric, rtol=1e-6, atol=1e-6), (analytic, numeric)


def _tensor(shape) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}f64>"


def _loss_text(op: str, x_shape, index_shape, axis: int) -> tuple[str, str]:
    """f(x, i, u) = tanh(op(...)) * x-ish: nonlinear, so the second order has something to
    check. Returns the text and the result's type."""
    xt = _tensor(x_shape)
    it = f"tensor<{''.join(f'{d}x' for d in index_shape)}i32>"
    gathered = (*x_shape[:axis], *index_shape, *x_shape[axis + 1:])
    ut = _tensor(gathered)
    if op == "take":
        body = (f"%r = tape.take %x, %i axis = {axis} : {xt}, {it} -> {ut}\n"
                f"  %y = tape.tanh %r : {ut}")
        rt = ut
    else:
        body = (f"%r = tape.scatter {op}, %x, %i, %u axis = {axis} : {xt}, {it}, {ut} -> {xt}\n"
                f"  %s = tape.sin %r : {xt}\n  %y = tape.mul %s, %x : {xt}")
        rt = xt
    text = (f"func.func @f(%x: {xt}, %i: {it}, %u: {ut}) -> {rt} {{\n  {body}\n"
            f"  func.return %y : {rt}\n}}\n")
    return text, rt


GRADIENT_CASES = [  # x's shape, the indices (repeats, negatives, out of range), axis
    ((5,), np.array([1, -4, 3, 1, 7, -6], np.int32), 0),
    ((3, 4), np.array([[0, -1, 2], [5, -5, 2]], np.int32), 1),
    ((4, 2, 3), np.array([3, -1, 0, 0], np.int32), 0),
    ((2, 3, 4), np.array([[1], [2]], np.int32), 2),
]


@pytest.mark.parametrize("op", ["take", *KINDS])
@pytest.mark.parametrize("case", range(len(GRADIENT_CASES)))
def test_pullbacks_match_finite_differences_to_second_order(op, case):
    x_shape, indices, axis = GRADIENT_CASES[case]
    rng = np.random.default_rng(case)
    x = rng.standard_normal(x_shape)
    u = rng.standard_normal((*x_shape[:axis], *indices.shape, *x_shape[axis + 1:]))
    text, _ = _loss_text(op, x_shape, indices.shape, axis)
    wrt = (0,) if op == "take" else (0, 2)
    check_vjp(text, [x, indices, u], wrt, seed=case)
    # second order: the gradient program's own vector-Jacobian product (its result 1, the
    # cotangent of x; the seed argument stays an input)
    first = _vjp_program(text, wrt)
    c = rng.standard_normal(_run(tapeml.Program.parse(text), x, indices, u)[0].shape)
    program = tapeml.Program.parse(str(first))
    ret = program.function.body.block.last_op
    # make the x-cotangent the first result, as check_vjp differentiates result 0
    ret.operands = [ret.operands[1], *ret.operands[:1], *ret.operands[2:]]
    program.function.function_type = type(program.function.function_type).from_lists(
        [a.type for a in program.function.body.block.args], [o.type for o in ret.operands])
    check_vjp(str(program), [x, indices, u, c], (0, 3) if op == "take" else (0, 2, 3),
              seed=case + 10, eps=1e-5)


def _vjp(text: str, args: list, c: np.ndarray, wrt: tuple[int, ...]) -> list[np.ndarray]:
    return _run(_vjp_program(text, wrt), *args, c)[-len(wrt):]


def test_take_pullback_sends_a_clamped_read_to_the_element_it_read():
    text = ("func.func @f(%x: tensor<4xf64>, %i: tensor<5xi64>) -> tensor<5xf64> {\n"
            "  %r = tape.take %x, %i axis = 0 : tensor<4xf64>, tensor<5xi64> -> tensor<5xf64>\n"
            "  func.return %r : tensor<5xf64>\n}\n")
    c = np.array([1.0, 10.0, 100.0, 1000.0, 10000.0])
    (ct_x,) = _vjp(text, [np.zeros(4), np.array([9, -9, -1, 2, 2])], c, (0,))
    assert ct_x.tolist() == [10.0, 0.0, 11000.0, 101.0]


def test_scatter_set_pullback_gives_the_winner_the_cotangent():
    text = ("func.func @f(%x: tensor<4xf64>, %i: tensor<6xi32>, %u: tensor<6xf64>)"
            " -> tensor<4xf64> {\n"
            "  %r = tape.scatter set, %x, %i, %u axis = 0 : tensor<4xf64>, tensor<6xi32>, "
            "tensor<6xf64> -> tensor<4xf64>\n  func.return %r : tensor<4xf64>\n}\n")
    c = np.array([1.0, 2.0, 3.0, 4.0])
    indices = np.array([1, -3, 4, 3, -5, -1], np.int32)  # 1 twice (the second wins), 3 twice
    ct_x, ct_u = _vjp(text, [np.zeros(4), indices, np.zeros(6)], c, (0, 2))
    assert ct_x.tolist() == [1.0, 0.0, 3.0, 0.0]
    assert ct_u.tolist() == [0.0, 2.0, 0.0, 0.0, 0.0, 4.0]


def test_scatter_add_pullback_drops_what_was_dropped():
    text = ("func.func @f(%x: tensor<2x3xf64>, %i: tensor<4xi64>, %u: tensor<2x4xf64>)"
            " -> tensor<2x3xf64> {\n"
            "  %r = tape.scatter add, %x, %i, %u axis = 1 : tensor<2x3xf64>, tensor<4xi64>, "
            "tensor<2x4xf64> -> tensor<2x3xf64>\n  func.return %r : tensor<2x3xf64>\n}\n")
    c = np.arange(6.0).reshape(2, 3)
    ct_x, ct_u = _vjp(text, [np.zeros((2, 3)), np.array([2, 3, -1, -4]), np.zeros((2, 4))],
                      c, (0, 2))
    assert_same_bits(ct_x, c)
    assert ct_u.tolist() == [[2.0, 0.0, 2.0, 0.0], [5.0, 0.0, 5.0, 0.0]]


def test_scatter_max_pullback_splits_ties_evenly():
    text = ("func.func @f(%x: tensor<3xf64>, %i: tensor<3xi32>, %u: tensor<3xf64>)"
            " -> tensor<3xf64> {\n"
            "  %r = tape.scatter max, %x, %i, %u axis = 0 : tensor<3xf64>, tensor<3xi32>, "
            "tensor<3xf64> -> tensor<3xf64>\n  func.return %r : tensor<3xf64>\n}\n")
    x, u = np.array([1.0, 5.0, 2.0]), np.array([1.0, 1.0, 3.0])
    ct_x, ct_u = _vjp(text, [x, np.array([0, 0, 1], np.int32), u], np.ones(3), (0, 2))
    assert ct_x.tolist() == [1 / 3, 1.0, 1.0]  # x[0] ties with both updates landing there
    assert ct_u.tolist() == [1 / 3, 1 / 3, 0.0]


def test_integer_data_has_no_gradient_but_its_program_differentiates():
    """A take of integers next to a float path: differentiate passes over it."""
    text = ("func.func @f(%x: tensor<3xf64>, %n: tensor<3xi32>, %i: tensor<2xi32>)"
            " -> tensor<f64> {\n"
            "  %t = tape.take %n, %i axis = 0 : tensor<3xi32>, tensor<2xi32> -> tensor<2xi32>\n"
            "  %c = tape.cast %t : tensor<2xi32> -> tensor<2xf64>\n"
            "  %s = tape.sum %c axes = [0] : tensor<2xf64> -> tensor<f64>\n"
            "  %y = tape.sum %x axes = [0] : tensor<3xf64> -> tensor<f64>\n"
            "  %z = tape.mul %s, %y : tensor<f64>\n"
            "  func.return %z : tensor<f64>\n}\n")
    (ct_x,) = _vjp(text, [np.ones(3), np.array([4, 5, 6], np.int32), np.array([0, -1], np.int32)],
                   np.array(1.0), (0,))
    assert ct_x.tolist() == [10.0, 10.0, 10.0]
