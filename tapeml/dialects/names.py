"""The names tapeml keeps on a function: each argument's and result's path
(`tapeml.name = "params.lin1.W"`), the pytree structures of its arguments and results
(`tapeml.in_tree`, `tapeml.out_tree`), and the narrower integer type a Python int argument must
fit in (`tapeml.fits = "int32"`: it meets int32 arrays in the program, as an int32). Tracing
writes them; passes keep them true; backends read them. Here, so that none of those layers
imports another for them."""

from __future__ import annotations

import re

from xdsl.dialects.builtin import ArrayAttr, BytesAttr, StringAttr
from xdsl.ir import Attribute, SSAValue

NAME_ATTR = "tapeml.name"
IN_TREE_ATTR = "tapeml.in_tree"
OUT_TREE_ATTR = "tapeml.out_tree"
FITS_ATTR = "tapeml.fits"


def argument_fits(attrs: ArrayAttr | None, count: int) -> list[str | None]:
    """Each of `count` arguments' tapeml.fits (a numpy dtype's name), else None."""
    stored = [attr_text(d.data.get(FITS_ATTR)) for d in attrs.data] if attrs is not None else []
    return [stored[i] if i < len(stored) else None for i in range(count)]


def ssa_name(path: str) -> str | None:
    """`path` as an MLIR value name (ASCII), or None when it cannot be one."""
    name = re.sub(r"[^A-Za-z0-9_$.-]", "_", path)  # MLIR value names are ASCII
    return name if re.fullmatch(r"[A-Za-z_$.-][A-Za-z0-9_$.-]*", name) else None


def value_names(attrs: ArrayAttr | None, values: list[SSAValue], default: str) -> list[str]:
    """Each value's tapeml.name (from `attrs`), else its SSA name, else `default` + index."""
    stored = [attr_text(d.data.get(NAME_ATTR)) for d in attrs.data] if attrs is not None else []
    return [(stored[i] if i < len(stored) else None) or value.name_hint or f"{default}{i}"
            for i, value in enumerate(values)]


def attr_text(attr: Attribute | None) -> str | None:
    """A string attribute's text. xDSL parses a string with escapes (non-ASCII text) into a
    BytesAttr, so both are read."""
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, BytesAttr):
        return attr.data.decode("utf-8", errors="replace")
    return None
