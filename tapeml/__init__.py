"""tapeml: an MLIR-style ML compiler on xDSL. Trace a Python function into the `tape` dialect,
then run, differentiate, fuse and compile that one program."""

from tapeml.errors import InterpretError, ShapeError
from tapeml.interpreters import interpret

__all__ = ["InterpretError", "ShapeError", "interpret"]
