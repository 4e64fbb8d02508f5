"""tapeml.dialects.dominance: an operand must be defined before its use, in an enclosing region,
in a block that dominates the use (xDSL 0.75 verifies none of this)."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdsl.context import Context
from xdsl.dialects import arith, builtin, cf, func
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

from tapeml.dialects.dominance import verify_dominance
from tapeml.dialects.tape import Tape

ROOT = Path(__file__).resolve().parent.parent


def _parse(text: str) -> builtin.ModuleOp:
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, cf.Cf, Tape):
        ctx.load_dialect(dialect)
    module = Parser(ctx, text).parse_module()
    module.verify()  # xDSL's verifier accepts every module below
    return module


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.mlir")), ids=str)
def test_valid_programs_pass(path):
    verify_dominance(_parse(path.read_text()))


def test_a_use_before_the_definition_is_refused():
    module = _parse("""
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = tape.add %a, %1 : tensor<2xf32>
  %1 = tape.neg %a : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}""")
    with pytest.raises(VerifyException, match=r"tape.add: operand #1 \(a result of tape.neg\) "
                                              "is used before it is defined"):
        verify_dominance(module)


def test_a_value_of_a_block_that_does_not_dominate_is_refused():
    module = _parse("""
func.func @f(%c: i1, %a: f32) -> f32 {
  cf.cond_br %c, ^bb1, ^bb2
^bb1:
  %n = arith.negf %a : f32
  cf.br ^bb2
^bb2:
  func.return %n : f32
}""")
    with pytest.raises(VerifyException, match=r"func.return: operand #0 \(%n\) is defined in a "
                                              "block that does not dominate this op"):
        verify_dominance(module)


def test_values_of_dominating_blocks_and_enclosing_regions_are_fine():
    verify_dominance(_parse("""
func.func @f(%c: i1, %a: tensor<2xf32>) -> tensor<2xf32> {
  %n = tape.neg %a : tensor<2xf32>
  cf.cond_br %c, ^bb1, ^bb2
^bb1:
  cf.br ^bb2
^bb2:
  %0 = tape.fused %n : tensor<2xf32> -> tensor<2xf32> {
  ^bb0(%x: tensor<f32>):
    %e = tape.exp %x : tensor<f32>
    tape.yield %e : tensor<f32>
  }
  func.return %0 : tensor<2xf32>
}"""))
