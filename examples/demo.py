"""`make demo`: a two-layer MLP written in the tape dialect, verified, printed, run on xDSL's
interpreter and checked against plain numpy; then a mistake, caught by the verifier.

(The traced, differentiated, compiled demo replaces this once those stages exist.)
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import numpy as np
from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

import tapeml
from tapeml.dialects.tape import Tape
from tapeml.tools.diagnostics import LocatingParser, verify_located

HERE = Path(__file__).parent


def context() -> Context:
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, Tape):
        ctx.load_dialect(dialect)
    return ctx


def main() -> None:
    source = (HERE / "mlp.mlir").read_text()
    start = time.perf_counter()
    module = Parser(context(), source, "mlp.mlir").parse_module()
    module.verify()
    parsed = time.perf_counter() - start
    counts = Counter(op.name for op in module.walk() if op.name.startswith("tape."))
    print(f"== parsed and verified examples/mlp.mlir in {parsed * 1e3:.1f} ms: "
          + ", ".join(f"{n} {name}" for name, n in sorted(counts.items())))
    print(module)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3), np.float32)
    w1, b1 = rng.standard_normal((3, 8), np.float32), rng.standard_normal(8, np.float32)
    w2, b2 = rng.standard_normal((8, 2), np.float32), rng.standard_normal(2, np.float32)
    start = time.perf_counter()
    (out,) = tapeml.interpret(module, "mlp", x, w1, b1, w2, b2)
    ran = time.perf_counter() - start
    expected = np.tanh(x @ w1 + b1) @ w2 + b2
    print(f"\n== interpreted @mlp in {ran * 1e3:.1f} ms -> {out.dtype} {out.shape}")
    print(out)
    print(f"max |interpreter - numpy| = {np.abs(out - expected).max():.2e}")

    print("\n== the same ops in generic form (what `tapeml-opt --print-op-generic` prints):")
    printer = Printer(print_generic_format=True)
    first_matmul = next(op for op in module.walk() if op.name == "tape.matmul")
    printer.print_op(first_matmul)
    print()

    bad = source.replace("%b1: tensor<8xf32>", "%b1: tensor<7xf32>").replace(
        "%b1 : tensor<8xf32>", "%b1 : tensor<7xf32>")
    print("\n== a bias of the wrong size, as `tapeml-opt` reports it:")
    parser = LocatingParser(context(), bad, "mlp.mlir")
    try:
        verify_located(parser.parse_module(), parser.spans, "mlp.mlir")
    except VerifyException as error:
        print(error)

if __name__ == "__main__":
    main()
