"""The devtools schemas (`bundled_program.fbs`, `etdump.fbs` in etbuild.schema), parsed once, and
Python types made from them.

Each table becomes a slots dataclass named after it, with its fields in schema order and the
schema's defaults (a vector: empty, `[ubyte]`: b""; a table, union or string: None), so the
schema file is the one description of the format and the reader and writer use these types
as they use program.py's for `.pte` files.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

from etbuild.runtime.format.fbs import Field, Schema, load_schema
from etbuild.runtime.format.reader import Layout, layout


@cache
def devtools_schema(file_name: str) -> Schema:
    """A schema of etbuild.schema, parsed once."""
    from etbuild.schema import SCHEMA_DIR

    return load_schema(SCHEMA_DIR / file_name)


def _default(f: Field) -> Any:
    if f.type.vector:
        empty: Any = bytes if f.type.kind == "scalar" and f.type.name in ("ubyte", "byte") else list
        return dataclasses.field(default_factory=empty)
    if f.type.kind in ("scalar", "enum"):
        return dataclasses.field(default=f.default)
    return dataclasses.field(default=None)


@cache
def mirror_types(file_name: str) -> dict[str, type]:
    """A dataclass per table of the schema, by table name."""
    schema = devtools_schema(file_name)
    return {name: dataclasses.make_dataclass(name, [(f.name, Any, _default(f)) for f in fields], slots=True)
            for name, fields in schema.tables.items()}


@cache
def devtools_layout(file_name: str) -> Layout:
    """The reader's layout of the schema, decoding into its mirror types."""
    return layout(devtools_schema(file_name), mirror_types(file_name))
