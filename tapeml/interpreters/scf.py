"""`scf.parallel` and `scf.reduce` for xDSL's interpreter (xDSL 0.75 has neither)."""

from __future__ import annotations

import itertools

from xdsl.dialects import scf
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    PythonValues,
    ReturnedValues,
    TerminatorValue,
    impl,
    impl_terminator,
    register_impls,
)
from xdsl.interpreters.builtin import scalar_attr


@register_impls
class ParallelFunctions(InterpreterFunctions):
    @impl(scf.ParallelOp)
    def run_parallel(
        self, interpreter: Interpreter, op: scf.ParallelOp, args: PythonValues
    ) -> PythonValues:
        """Runs the iterations in row-major order; each `scf.reduce` operand is combined into
        its accumulator (starting from the init value) by the matching reduction region."""
        n = len(op.lowerBound)
        bounds = [(a.value.data, b.value.data, s.value.data)
                  for a, b, s in zip(args[:n], args[n:2 * n], args[2 * n:3 * n], strict=True)]
        accumulators = list(args[3 * n:])
        reduce_op = op.body.block.last_op
        assert isinstance(reduce_op, scf.ReduceOp)
        index_type = op.lowerBound[0].type if n else None
        for ivs in itertools.product(*(range(*b) for b in bounds)):
            iv_values = tuple(scalar_attr(i, index_type, interpreter.index_bitwidth) for i in ivs)
            values = interpreter.run_ssacfg_region(op.body, iv_values, "scf.parallel")
            for k, region in enumerate(reduce_op.reductions):
                (accumulators[k],) = interpreter.run_ssacfg_region(
                    region, (accumulators[k], values[k]), "scf.reduce"
                )
        return tuple(accumulators)

    @impl_terminator(scf.ReduceOp)
    def run_reduce(
        self, interpreter: Interpreter, op: scf.ReduceOp, args: PythonValues
    ) -> tuple[TerminatorValue, PythonValues]:
        return ReturnedValues(args), ()

    @impl_terminator(scf.ReduceReturnOp)
    def run_reduce_return(
        self, interpreter: Interpreter, op: scf.ReduceReturnOp, args: PythonValues
    ) -> tuple[TerminatorValue, PythonValues]:
        return ReturnedValues(args), ()
