"""layer_norm and layer_norm_backward as one loop nest each: every row (all dims but the last,
in parallel) folded in a few passes over its elements, which stay in L1 between them. Each
step is the one the ops written out would take, rounded to the element type (interpreters/
tape/normalization.py); the sums accumulate in f64, as LANES partials (reductions.py), so they
may differ from numpy's pairwise sums in the last bits, as a sum op's do."""

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

Term = Callable[[Emitter, SSAValue], SSAValue]
"""A row's element j (an index) of what is summed, in the element type."""


def _means(e: Emitter, terms: list[Term], n: int, t: Attribute) -> list[SSAValue]:
    """Each term's mean over the row: its sum accumulated in f64 (LANES partials side by side,
    combined by halves, then the last n % LANES one after another), rounded to `t`, / n."""
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
    count = e.scalar(float(n), t)
    return [e.insert(arith.DivfOp(e.insert(arith.TruncFOp(total, t)) if t != f64 else total,
                                  count)) for total in totals]


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
