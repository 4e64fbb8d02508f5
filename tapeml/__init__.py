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
from tapeml.tracing.ops import (
    abs,
    add,
    astype,
    broadcast_to,
    concatenate,
    cos,
    divide,
    dot,
    equal,
    exp,
    expand_dims,
    fold,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    log_softmax,
    logsumexp,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    multiply,
    negative,
    not_equal,
    pad,
    power,
    relu,
    reshape,
    sigmoid,
    sin,
    softmax,
    sqrt,
    square,
    stack,
    subtract,
    sum,
    tanh,
    transpose,
    unfold,
    where,
)
from tapeml.tracing.pytree import tree_map

# `import tapeml.nn` (and ops, optim) works as the README spells them
sys.modules.update({"tapeml.nn": nn, "tapeml.ops": ops, "tapeml.optim": optim})

__all__ = [
    "InterpretError", "Program", "ShapeError", "Spec", "TracingError", "abs", "add", "astype",
    "broadcast_to", "concatenate", "cos", "divide", "dot", "equal", "eval_shape", "exp",
    "expand_dims", "fold", "greater", "greater_equal", "interpret", "less", "less_equal",
    "log", "log_softmax", "logsumexp", "matmul", "max", "maximum", "mean", "min", "minimum",
    "multiply", "negative", "nn", "not_equal", "ops", "optim", "pad", "power", "relu",
    "reshape", "sigmoid", "softmax", "sin", "sqrt", "square", "stack", "subtract", "sum",
    "tanh", "trace", "transpose", "tree_map", "unfold", "where", "grad", "value_and_grad",
    "vjp", "triangle_gradients", "jit", "profile",
]
