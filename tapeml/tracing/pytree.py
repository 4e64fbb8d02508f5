"""Pytrees: nested tuples, lists, dicts and None, with arrays (or anything else) at the leaves.

As in JAX, dict children are ordered by sorted key, None is an empty node (not a leaf), and a
`TreeDef` is hashable, comparable and printable as a Python literal (traced functions store it).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, eq=True)
class TreeDef:
    """The structure of a pytree: `kind` is "leaf", "none", "tuple", "list" or "dict"."""

    kind: str
    keys: tuple[Any, ...] = ()
    children: tuple[TreeDef, ...] = ()

    def __hash__(self) -> int:  # trees are keys of every cache lookup: hash them once
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.kind, self.keys, self.children))
            object.__setattr__(self, "_hash", cached)
        return cached

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def to_text(self) -> str:
        """A Python literal of the structure with `...` at the leaves:
        `(({'W': ..., 'b': ...},), {})`; `from_text` reads it back."""
        return str(self)

    @classmethod
    def from_text(cls, text: str) -> TreeDef:
        return flatten(ast.literal_eval(text))[1]

    def __str__(self) -> str:
        if self.kind == "leaf":
            return "..."
        if self.kind == "none":
            return "None"
        inner = [str(c) for c in self.children]
        if self.kind == "dict":  # numpy scalar keys print as the Python values they equal
            keys = [k.item() if hasattr(k, "item") else k for k in self.keys]
            return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(keys, inner, strict=True)) + "}"
        if self.kind == "tuple":
            return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
        return "[" + ", ".join(inner) + "]"


LEAF = TreeDef("leaf")


def _children(tree: Any) -> tuple[str, tuple[Any, ...], tuple[Any, ...]] | None:
    if tree is None:
        return "none", (), ()
    if isinstance(tree, tuple) and not hasattr(tree, "_fields"):
        return "tuple", tuple(range(len(tree))), tree
    if isinstance(tree, list):
        return "list", tuple(range(len(tree))), tuple(tree)
    if isinstance(tree, dict):
        try:
            keys = tuple(sorted(tree))
        except TypeError:
            raise TypeError(f"pytree dict keys must be sortable (all str or all int), got "
                            f"{sorted(type(k).__name__ for k in tree)}") from None
        return "dict", keys, tuple(tree[k] for k in keys)
    return None


def flatten(tree: Any) -> tuple[list[Any], TreeDef]:
    """The leaves of `tree` in order, and its structure."""
    leaves: list[Any] = []
    return leaves, _walk(tree, leaves)


def _walk(node: Any, leaves: list[Any]) -> TreeDef:
    # (a function of the module, not a closure: a closure that calls itself is a reference
    # cycle, and it kept `leaves`, every array of a program's results, alive until the cyclic
    # collector ran, so a compiled program's output blocks were never free to be recycled)
    parts = _children(node)
    if parts is None:
        leaves.append(node)
        return LEAF
    kind, keys, children = parts
    return TreeDef(kind, keys, tuple(_walk(c, leaves) for c in children))


def unflatten(treedef: TreeDef, leaves: list[Any] | tuple[Any, ...]) -> Any:
    """The pytree of structure `treedef` holding `leaves`, in order."""
    items = iter(leaves)
    tree = _build(treedef, items)
    if next(items, _END) is not _END:
        raise ValueError(f"too many leaves for the structure {treedef}")
    return tree


def _build(node: TreeDef, items: Iterator[Any]) -> Any:
    if node.kind == "leaf":
        return next(items)
    if node.kind == "none":
        return None
    children = [_build(c, items) for c in node.children]
    if node.kind == "dict":
        return dict(zip(node.keys, children, strict=True))
    return tuple(children) if node.kind == "tuple" else children


_END = object()


def leaf_paths(treedef: TreeDef, prefix: str = "") -> Iterator[str]:
    """A dotted path per leaf, in leaf order: `params.lin1.W`, `layers.0.b`."""
    if treedef.kind == "leaf":
        yield prefix
        return
    for key, child in zip(treedef.keys, treedef.children, strict=True):
        yield from leaf_paths(child, f"{prefix}.{key}" if prefix else str(key))


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """Apply `fn` leafwise to `tree` and the trees in `rest` (which share its structure)."""
    leaves, treedef = flatten(tree)
    others = []
    for other in rest:
        other_leaves, other_def = flatten(other)
        if other_def != treedef:
            raise ValueError(f"tree structures differ: {treedef} and {other_def}")
        others.append(other_leaves)
    return unflatten(treedef, [fn(*xs) for xs in zip(leaves, *others, strict=True)])
