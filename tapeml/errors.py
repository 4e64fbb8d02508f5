"""The exceptions tapeml raises for mistakes that are the user's."""

from xdsl.utils.exceptions import VerifyException


class ShapeError(VerifyException, ValueError):
    """An op was given operands or parameters its shape rule rejects.

    The message names the op, the shapes involved and the rule that was broken. It is a
    `VerifyException` so that xDSL's verifier reports it like any other verification failure,
    and a `ValueError` so that Python callers can catch it as bad input.
    """


class InterpretError(ValueError):
    """`tapeml.interpret` was called with arguments that do not fit the function's signature."""


class TracingError(TypeError):
    """A traced function did something a trace cannot record: read a tracer's value
    (`bool(t)`, `float(t)`, `np.asarray(t)`, `if t > 0:`) or use a tracer outside its trace.
    A `TypeError`, as JAX's tracer errors are: a tracer was used as a value of another type."""


class PTXError(RuntimeError):
    """The kernels cannot be compiled to PTX (an unsupported call, no libdevice, ...). Here, not
    in tapeml/codegen/ptx.py, so tapeml-opt can catch it without loading the PTX target."""


class OnnxError(ValueError):
    """An ONNX model tapeml cannot import as it is: an op outside the supported set (named with
    its node and opset), an element type tape tensors do not hold, a shape that is not static
    at import, or attributes and inputs the op's rule rejects."""


class StableHLOError(ValueError):
    """A module holds an op tapeml cannot write as StableHLO (one outside the tape dialect:
    a lowered program), named with the op."""


class IREEError(RuntimeError):
    """IREE's compiler rejected the StableHLO tapeml wrote (a limit or a bug of IREE's: the
    StableHLO is checked against the interpreter elsewhere); its diagnostics follow."""


def a_or_an(word: str) -> str:
    """`word` with its indefinite article, for messages: "an ArrayImpl", "a str"."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"
