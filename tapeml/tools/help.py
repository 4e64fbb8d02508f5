"""`tapeml-opt --help`'s first section: tapeml's own passes, with their options, and its targets,
each with the first line of its doc (xDSL's follow, as xdsl-opt lists them)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from collections.abc import Callable

from xdsl.passes import ModulePass
from xdsl.utils.hints import type_repr
from xdsl.utils.target import Target


def _first_line(doc: str | None) -> str:
    """A doc's first paragraph on one line, less its pointer to the module doc."""
    text = " ".join((doc or "").strip().split("\n\n")[0].split())
    return text.replace(" (see the module doc)", "")


def _field_docs(cls: type) -> dict[str, str]:
    """The string literal after each field of a dataclass (its attribute docstring)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for field, doc in zip(body, body[1:], strict=False):
            if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
                    and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
                    and isinstance(doc.value.value, str)):
                docs[field.target.id] = _first_line(doc.value.value)
    return docs


def _wrapped(head: str, text: str, indent: int) -> list[str]:
    """`head` then `text` from column 30, wrapped there."""
    first = f"{' ' * indent}{head:<{28 - indent}}  "
    if len(first) > 30:
        return [first.rstrip(), *textwrap.wrap(text, 96, initial_indent=" " * 30,
                                               subsequent_indent=" " * 30)]
    return textwrap.wrap(text, 96, initial_indent=first, subsequent_indent=" " * 30) or [first]


def tapeml_help(passes: dict[str, Callable[[], type[ModulePass]]],
                targets: dict[str, Callable[[], type[Target]]]) -> str:
    lines = ["tapeml's modular optimizer driver: xdsl-opt with the tape and kernel dialects.", "",
             "tapeml passes (-p NAME or -p 'NAME{option=value ...}'):"]
    for name, factory in passes.items():
        cls = factory()
        lines += _wrapped(name, _first_line(cls.__doc__), 2)
        docs = _field_docs(cls)
        for field in dataclasses.fields(cls):
            kind = field.type if isinstance(field.type, str) else type_repr(field.type)
            default = getattr(cls, field.name, None)
            shown = "" if default is None else str(default).lower()
            lines += _wrapped(f"{field.name}={shown}", f"({kind}) {docs.get(field.name, '')}", 4)
    lines += ["", "tapeml targets (-t NAME):"]
    for name, factory in targets.items():
        lines += _wrapped(name, _first_line(factory().__doc__), 2)
    lines += ["", "xDSL's passes and targets are listed under -p and -t below."]
    return "\n".join(lines)
