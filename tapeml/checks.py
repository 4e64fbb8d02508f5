"""`TAPEML_CHECKS=1`: verify every program as it is made, as JAX's `jax_enable_checks` does.

Off by default: a traced op is checked as it is built (its shape rule raises the user's error,
at the user's line, and infers its result type), so the whole-module verification that would
follow finds only a bug of tapeml's own, and it took a third of tracing a GPT step. With the
switch on (the test suite sets it), `trace` verifies the module it records, a backend's
pipeline verifies the module after every pass (mlir-opt's `-verify-each`), naming the pass that
left it invalid, and the CPU backend writes its LLVM IR both directly (codegen/llvm_text.py)
and through xDSL's convert_module, and compares them. A module that is parsed (`tapeml-opt`,
`Program.parse`) is always verified."""

from __future__ import annotations

import os


def enabled() -> bool:
    """Whether TAPEML_CHECKS asks for the checks (read on each call: a test may set it)."""
    return os.environ.get("TAPEML_CHECKS", "").strip().lower() not in ("", "0", "off", "false",
                                                                        "no")
