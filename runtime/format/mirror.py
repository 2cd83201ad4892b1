"""The one way etbuild mirrors a FlatBuffers schema in Python: typed slots dataclasses, checked against it.

Every format read or written here declares one dataclass per table, its fields in the schema's order, typed,
with the schema's defaults: `program.py` (program.fbs), `flat_tensor.py` (flat_tensor.fbs),
`backends/xnnpack/format/graph.py` (xnnpack.fbs), `etbuild/devtools/etdump_format.py` (etdump.fbs) and
`bundle_format.py` (bundled_program.fbs). `mirror` collects a module's classes by table name: what the
bounds-checked reader (`reader.layout(schema, types)`) builds and the writer reads. `mismatches` is the one
check that a schema and its declarations agree; a trimmed runtime ships the same classes, cut to those it names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from etbuild.runtime.format.fbs import Field, Schema

_PYTHON = {"bool": "bool", "float": "float", "double": "float"}  # every other scalar is an int


def mirror(*classes: type) -> dict[str, type]:
    """The mirror types of a schema, by table (or aliased union member) name."""
    return {cls.__name__: cls for cls in classes}


def mismatches(schema: Schema, types: Mapping[str, type]) -> list[str]:
    """What keeps `types` from mirroring `schema` field for field: a table without a dataclass, or with other
    fields, another order, another default or an annotation its field's kind does not take. Empty when they agree."""
    found = [f"{name}: a type of no table" for name in sorted(set(types) - set(schema.tables) - set(schema.aliases))]
    for table, fields in schema.tables.items():
        cls = types.get(table)
        if cls is None or not dataclasses.is_dataclass(cls):
            found.append(f"{table}: no dataclass mirrors it")
            continue
        declared = dataclasses.fields(cls)
        if [d.name for d in declared] != [f.name for f in fields]:
            found.append(f"{table}: fields {[d.name for d in declared]}, schema {[f.name for f in fields]}")
            continue
        found += [f"{table}.{f.name}: {why}" for f, d in zip(fields, declared) if (why := _disagrees(f, d))]
    return found


def _disagrees(f: Field, declared: dataclasses.Field[Any]) -> str | None:
    """Why one declared field does not mirror its schema field, or None."""
    annotation = str(declared.type).replace("'", "")
    default = declared.default_factory() if declared.default_factory is not dataclasses.MISSING else declared.default
    wanted = _annotation(f)
    if f.type.kind == "union":
        ok = annotation.endswith("| None") and default is None
    elif f.type.vector:
        ok = (annotation, default) in ((wanted, b"" if wanted == "bytes" else []), (f"{wanted} | None", None))
    else:
        ok = annotation == wanted and default == (f.default if f.type.kind in ("scalar", "enum") else None)
    return None if ok else f"declared {annotation} = {default!r}; the schema's {_described(f)} takes {wanted}"


def _annotation(f: Field) -> str:
    """The annotation a field of this kind takes (a union's: any member type or None)."""
    kind, name = f.type.kind, f.type.name
    element = {"scalar": _PYTHON.get(name, "int"), "enum": "int", "string": "str", "table": name}.get(kind, name)
    if f.type.vector:
        return "bytes" if kind == "scalar" and name in ("ubyte", "byte") else f"list[{element}]"
    return element if kind in ("scalar", "enum") else f"{element} | None"


def _described(f: Field) -> str:
    return f"{'[' if f.type.vector else ''}{f.type.kind} {f.type.name}{']' if f.type.vector else ''} = {f.default}"
