"""tapeml: an MLIR-style ML compiler on xDSL. Trace a Python function into the `tape` dialect,
then run, differentiate, fuse and compile that one program.

The public names load on first use (PEP 562), so a tool under the package — `tapeml-opt`, which
lit starts once per RUN line — pays only for what it runs, not for the tracer and every op.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from typing import Any

# light, and loaded at once: `profile` must be the function, not the submodule of its name
from tapeml.errors import InterpretError as InterpretError
from tapeml.errors import OnnxError as OnnxError
from tapeml.errors import ShapeError as ShapeError
from tapeml.errors import TracingError as TracingError
from tapeml.profile import profile as profile

_EAGER = ["InterpretError", "OnnxError", "ShapeError", "TracingError", "profile"]

# name -> the module that defines it (or is it: _MODULES)
_HOMES = {
    "nn": "tapeml.frontend.nn", "optim": "tapeml.frontend.optim", "ops": "tapeml.tracing.ops",
    "grad": "tapeml.frontend.autodiff", "triangle_gradients": "tapeml.frontend.autodiff",
    "value_and_grad": "tapeml.frontend.autodiff", "vjp": "tapeml.frontend.autodiff",
    "jit": "tapeml.frontend.jit",
    "Program": "tapeml.frontend.program", "Spec": "tapeml.frontend.program",
    "eval_shape": "tapeml.frontend.program", "trace": "tapeml.frontend.program",
    "interpret": "tapeml.interpreters",
    "tree_map": "tapeml.tracing.pytree",
}
_MODULES = ("nn", "ops", "optim")  # the names that are modules
# `import tapeml.nn` (and ops, optim) works as the README spells them
_ALIASES = {f"tapeml.{name}": _HOMES[name] for name in _MODULES}


def __getattr__(name: str) -> Any:
    if name == "__all__":
        ops = importlib.import_module("tapeml.tracing.ops")
        return sorted([*_EAGER, *_HOMES]) + list(ops.__all__)
    home = _HOMES.get(name)
    if home is None:
        if name.startswith("__") or importlib.util.find_spec(f"tapeml.{name}") is not None:
            # a dunder, or a submodule not imported yet (`from tapeml import universe`): the
            # import system loads it; the ops stay unloaded
            raise AttributeError(f"module 'tapeml' has no attribute {name!r}")
        ops = importlib.import_module("tapeml.tracing.ops")
        if name not in ops.__all__:
            raise AttributeError(f"module 'tapeml' has no attribute {name!r}")
        value = getattr(ops, name)
    elif name in _MODULES:
        value = importlib.import_module(home)
    else:
        value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    """The public names, the dunders and the submodules loaded (not this file's own imports:
    annotations, importlib, sys, Any)."""
    shown = {name for name, value in globals().items()
             if name.startswith("__") or getattr(value, "__name__", "").startswith("tapeml.")}
    return sorted(shown | set(__getattr__("__all__")))


class _AliasLoader(importlib.abc.Loader):
    """Loads `tapeml.nn` as the very module `tapeml.frontend.nn` (no second copy)."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return importlib.import_module(_ALIASES[spec.name])

    def exec_module(self, module: Any) -> None:
        pass


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in _ALIASES:
            return None
        return importlib.machinery.ModuleSpec(name, _AliasLoader())


if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())
