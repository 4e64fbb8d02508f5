"""layer_norm, softmax and their backward ops as one loop nest each: every row (all dims but
the last, in parallel) folded in a few passes over its elements, which stay in L1 between
them. Each step is the one the ops written out would take, rounded to the element type
(interpreters/tape/normalization.py); the sums accumulate in f64, as LANES partials
(reductions.py), so they may differ from numpy's pairwise sums in the last bits, as a sum
op's do; a softmax's exp is the elementwise ops' (transcendentals.py, or libm's)."""

from __future__ import annotations

import math
from collections.abc import Callable

from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import f64
from xdsl.ir import Attribute, SSAValue

from tapeml.dialects import tape
from tapeml.transforms.loops.emitter import Emitter, shape_of
from tapeml.transforms.loops.reductions import LANES, pairwise
from tapeml.transforms.loops.registry import Context, lowering
from tapeml.transforms.transcendentals import Math

Term = Callable[[Emitter, SSAValue], SSAValue]
"""A row's element j (an index) of what is summed, in the element type."""


def _sums(e: Emitter, terms: list[Term], n: int, t: Attribute) -> list[SSAValue]:
    """Each term's sum over the row, accumulated in f64 (LANES partials side by side, combined
    by halves, then the last n % LANES one after another), rounded to `t`."""
    def wide(e: Emitter, term: Term, j: SSAValue) -> SSAValue:
        value = term(e, j)
        return e.insert(arith.ExtFOp(value, f64)) if t != f64 else value

    zero = e.scalar(0.0, f64)
    whole, rest = divmod(n, LANES) if n >= 2 * LANES else (0, n)
    totals = [zero] * len(terms)
    if whole:
        def lanes(e: Emitter, ivs: list[SSAValue], accs: list[SSAValue]) -> list[SSAValue]:
            first = e.muli(ivs[0], e.index(LANES))
            return [e.insert(arith.AddfOp(accs[k * LANES + v], wide(
                e, term, first if v == 0 else e.addi(first, e.index(v)))))
                for k, term in enumerate(terms) for v in range(LANES)]

        partial = e.reduce_all([whole], [zero] * (len(terms) * LANES), lanes)
        totals = [pairwise(e, arith.AddfOp, partial[k * LANES:(k + 1) * LANES])
                  for k in range(len(terms))]
    if rest:
        def tail(e: Emitter, ivs: list[SSAValue], accs: list[SSAValue]) -> list[SSAValue]:
            j = e.addi(ivs[0], e.index(whole * LANES))
            return [e.insert(arith.AddfOp(acc, wide(e, term, j)))
                    for acc, term in zip(accs, terms, strict=True)]

        totals = e.reduce_all([rest], totals, tail)
    return [e.insert(arith.TruncFOp(total, t)) if t != f64 else total for total in totals]


def _means(e: Emitter, terms: list[Term], n: int, t: Attribute) -> list[SSAValue]:
    """Each term's mean over the row: its sum (`_sums`) / n, in `t`."""
    count = e.scalar(float(n), t)
    return [e.insert(arith.DivfOp(total, count)) for total in _sums(e, terms, n, t)]


@lowering(tape.LayerNormOp, tape.LayerNormBackwardOp)
def lower_layer_norm(e: Emitter, op: tape.LayerNormOp | tape.LayerNormBackwardOp,
                     ins: list[SSAValue], out: SSAValue, cx: Context) -> None:
    """Per row: its mean, then (x - mean)'s mean square, r = 1 / sqrt(var + eps); then y =
    (x - mean) * r stored, or (the backward) the means of g and g * y in one pass and
    r * ((g - mean(g)) - y * mean(g y)) stored."""
    shape = shape_of(op.input)
    n = shape[-1]
    t = op.result.type.get_element_type()
    backward = isinstance(op, tape.LayerNormBackwardOp)

    def row(e: Emitter, ivs: list[SSAValue]) -> None:
        base = e.muli(ivs[0], e.index(n))

        def x(e: Emitter, j: SSAValue) -> SSAValue:
            return e.load(ins[0], e.addi(base, j))

        (mean,) = _means(e, [x], n, t)

        def centered(e: Emitter, j: SSAValue) -> SSAValue:
            return e.insert(arith.SubfOp(x(e, j), mean))

        def square(e: Emitter, j: SSAValue) -> SSAValue:
            c = centered(e, j)
            return e.insert(arith.MulfOp(c, c))

        (var,) = _means(e, [square], n, t)
        root = e.insert(xmath.SqrtOp(e.insert(arith.AddfOp(var, e.scalar(op.params["eps"], t)))))
        r = e.insert(arith.DivfOp(e.scalar(1.0, t), root))

        def y(e: Emitter, j: SSAValue) -> SSAValue:
            return e.insert(arith.MulfOp(centered(e, j), r))

        if not backward:
            e.loops([n], lambda e, j: e.store(y(e, j[0]), out, e.addi(base, j[0])))
            return

        def g(e: Emitter, j: SSAValue) -> SSAValue:
            return e.load(ins[1], e.addi(base, j))

        mean_g, mean_gy = _means(e, [g, lambda e, j: e.insert(arith.MulfOp(g(e, j), y(e, j)))],
                                 n, t)

        def dx(e: Emitter, j: SSAValue) -> SSAValue:
            h = e.insert(arith.SubfOp(e.insert(arith.SubfOp(g(e, j), mean_g)),
                                      e.insert(arith.MulfOp(y(e, j), mean_gy))))
            return e.insert(arith.MulfOp(r, h))

        e.loops([n], lambda e, j: e.store(dx(e, j[0]), out, e.addi(base, j[0])))

    e.loops([math.prod(shape[:-1])], row, parallel=True)


@lowering(tape.SoftmaxOp, tape.SoftmaxBackwardOp)
def lower_softmax(e: Emitter, op: tape.SoftmaxOp | tape.SoftmaxBackwardOp,
                  ins: list[SSAValue], out: SSAValue, cx: Context) -> None:
    """Per row: its max (`larger`, in LANES chains), e = exp(x - max) stored, their sum,
    then each e / sum; or (the backward) sum(g * p) and p * (g - that) stored."""
    shape = shape_of(op.results[0])
    n = shape[-1]
    t = op.results[0].type.get_element_type()

    def row(e: Emitter, ivs: list[SSAValue]) -> None:
        base = e.muli(ivs[0], e.index(n))

        def load(buffer: SSAValue) -> Term:
            return lambda e, j: e.load(buffer, e.addi(base, j))

        if isinstance(op, tape.SoftmaxBackwardOp):
            p, g = load(ins[0]), load(ins[1])
            (total,) = _sums(e, [lambda e, j: e.insert(arith.MulfOp(g(e, j), p(e, j)))], n, t)
            e.loops([n], lambda e, j: e.store(e.insert(arith.MulfOp(p(e, j[0]), e.insert(
                arith.SubfOp(g(e, j[0]), total)))), out, e.addi(base, j[0])))
            return
        x = load(ins[0])
        def larger(e: Emitter, acc: SSAValue, value: SSAValue) -> SSAValue:
            # value > acc ? value : acc, not IEEE's maximum: the softmax is the same bits.
            # A NaN it skips makes its own exp NaN, and so the sum and every p, as a NaN max
            # would; of two zeros it may keep -0, and x - (+-0) is x but for x = +-0, whose
            # exp is 1 either way. In LANES chains, vector compares and blends: 0.27 ms per
            # GPT softmax, where the maximum's chain (NaN and signed-zero fixups) took 0.34
            return e.insert(arith.SelectOp(e.insert(arith.CmpfOp(value, acc, "ogt")), value,
                                           acc))

        lowest = e.scalar(-math.inf, t)
        whole, rest = divmod(n, LANES) if n >= 2 * LANES else (0, n)
        top = lowest
        if whole:
            def lanes(e: Emitter, ivs: list[SSAValue], accs: list[SSAValue]) -> list[SSAValue]:
                first = e.muli(ivs[0], e.index(LANES))
                return [larger(e, acc, x(e, first if v == 0 else e.addi(first, e.index(v))))
                        for v, acc in enumerate(accs)]

            tops = e.reduce_all([whole], [lowest] * LANES, lanes)
            while len(tops) > 1:
                half = len(tops) // 2
                tops = [larger(e, tops[i], tops[i + half]) for i in range(half)]
            top = tops[0]
        if rest:
            top = e.reduce([rest], top, lambda e, j, acc: larger(
                e, acc, x(e, e.addi(j[0], e.index(whole * LANES)))))

        def exp(e: Emitter, j: SSAValue) -> None:  # a loop of its own, vectorized (inside the
            # sum's lanes each exp was scalar: the GPT step's softmax 1.07 ms, now 0.34)
            shifted = e.insert(arith.SubfOp(x(e, j), top))
            value = e.insert(xmath.ExpOp(shifted)) if e.libm else Math(e, t).exp(shifted)
            e.store(value, out, e.addi(base, j))

        e.loops([n], lambda e, j: exp(e, j[0]))
        (total,) = _sums(e, [load(out)], n, t)

        def divided(e: Emitter, j: SSAValue) -> None:
            at = e.addi(base, j)
            e.store(e.insert(arith.DivfOp(e.load(out, at), total)), out, at)

        e.loops([n], lambda e, j: divided(e, j[0]))

    e.loops([math.prod(shape[:-1])], row, parallel=True)
