"""Layers point one way: a module imports only from its own layer and those below it (at module
level or inside a function alike). The order, lowest first:

    errors, checks,   what every layer may use
    profile
    dialects          the IR: ops, types, verifiers, printing and parsing
    interpreters      the semantics (xDSL's interpreter)
    tracing           tracers, the ops API, pytrees (eager ops run on the interpreter)
    transforms        passes and pipelines (tape-differentiate writes backward ops by tracing)
    stablehlo         tape programs written as StableHLO text (IREE's input, XLA's)
    codegen           backends: they run the pipelines, then LLVM, PTX, the thread pool
    frontend          Program, grad, jit, nn, optim
    onnx              ONNX models in (a program traced from the graph)
    distributed       data-parallel training on MPI ranks (wraps a compiled step)
    universe, tools   what xDSL's tools and tapeml-opt / tapeml-run see
    tapeml            the package's own API
"""

from __future__ import annotations

import ast
from pathlib import Path

import tapeml

LAYERS = ["errors", "checks", "profile", "dialects", "interpreters", "tracing", "transforms",
          "stablehlo", "codegen", "frontend", "onnx", "distributed", "universe", "tools", ""]
PACKAGE = Path(tapeml.__file__).parent


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.index(parts[1] if len(parts) > 1 else "")


def _imports(path: Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "tapeml":  # `from tapeml import universe`: the names are modules
                found += [(f"tapeml.{a.name}", node.lineno) for a in node.names]
            else:
                found.append((node.module, node.lineno))
    return [(name, line) for name, line in found if name.split(".")[0] == "tapeml"]


def test_every_import_points_down():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for name, line in _imports(path):
            if _layer(name) > _layer(module):
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}")
    assert not wrong, "imports that point up a layer:\n" + "\n".join(wrong)


def test_every_top_level_module_has_a_layer():
    names = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert names == set(LAYERS) - {""}
