"""tapeml: an MLIR-style ML compiler on xDSL. Trace a Python function into the `tape` dialect,
then run, differentiate, fuse and compile that one program."""

import sys

from tapeml.errors import InterpretError, ShapeError, TracingError
from tapeml.frontend import nn, optim
from tapeml.frontend.autodiff import grad, triangle_gradients, value_and_grad, vjp
from tapeml.frontend.jit import jit
from tapeml.frontend.program import Program, Spec, eval_shape, trace
from tapeml.interpreters import interpret
from tapeml.profile import profile
from tapeml.tracing import ops
from tapeml.tracing.ops import *  # noqa: F403 (every op of tapeml.ops, by its __all__)
from tapeml.tracing.pytree import tree_map

# `import tapeml.nn` (and ops, optim) works as the README spells them
sys.modules.update({"tapeml.nn": nn, "tapeml.ops": ops, "tapeml.optim": optim})

__all__ = [
    "InterpretError", "Program", "ShapeError", "Spec", "TracingError", "eval_shape", "grad",
    "interpret", "jit", "nn", "ops", "optim", "profile", "trace", "tree_map",
    "triangle_gradients", "value_and_grad", "vjp", *ops.__all__,
]
