"""The trimmed runtime's schema: program.fbs cut to the tables and fields its code reads.

The runtime decodes a program through a layout of the schema (etbuild.runtime.format.reader);
a trimmed runtime ships that layout pre-parsed, with only what its shipped code names, and the
mirror types of format/program.py cut to the same tables and fields (`cut_mirror`; the types are
not reads: they declare every field). A table the code never names is not decoded at all: a union
member it does not name is rejected by the reader.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence

import jinja2

from etbuild.runtime.format.fbs import Field, Schema, load_schema
from etbuild.runtime.format.reader import Layout


def schema_module(env: jinja2.Environment, names: set[str] | None, layouts: Mapping[str, Layout] | None = None) -> str:
    """program.fbs, parsed here by the runtime's own parser, as compact Python literals.

    names: the identifiers the runtime's code reads; only the tables and fields among them
    (and those the root needs to reach them) are kept. None keeps everything.
    layouts: other schemas (a backend's, by file name) shipped whole as `LAYOUTS`, which the
    trimmed runtime's `reader.schema_layout` reads.
    """
    schema: Schema = load_schema()
    kept = kept_tables(schema, names) if names is not None else schema.tables
    tables = [
        (table, " ".join(f"{f.name}:{f.type.kind}:{f.type.name}:{int(f.type.vector)}:{f.slot}" for f in fields))
        for table, fields in kept.items()
    ]
    defaults = {
        f"{table}.{f.name}": f.default
        for table, fields in kept.items()
        for f in fields
        if (type(f.default), f.default) != (int, 0)  # keep False and 0.0 as they are
    }
    unions = {f.type.name for fields in kept.values() for f in fields if f.type.kind == "union"}
    return env.get_template("schema.py.j2").render(
        origin="schema/program.fbs", root_type=schema.root_type,
        enums=repr({n: e for n, e in schema.enums.items() if names is None or n in names}),
        unions=repr({n: m for n, m in schema.unions.items() if n in unions}), defaults=repr(defaults), tables=tables,
        layouts=repr({name: (dict(lay.tables), dict(lay.unions), lay.root, dict(lay.aliases))
                      for name, lay in (layouts or {}).items()}),
    )


def kept_tables(schema: Schema, names: set[str]) -> dict[str, list[Field]]:
    """The tables reachable from the root through fields named in `names`, with only those fields.

    A union member is kept when the runtime names its type (it must, to handle it); the
    reader rejects the others as unsupported.
    """
    kept: dict[str, list[Field]] = {}
    todo = [schema.root_type, *(t for t in schema.tables if t in names)]
    while todo:
        table = todo.pop()
        if table in kept:
            continue
        kept[table] = [f for f in schema.tables[table] if f.name in names]
        for f in kept[table]:
            if f.type.kind == "table":
                todo.append(f.type.name)
            elif f.type.kind == "union":
                todo.extend(m for m in schema.unions[f.type.name] if m in names)
    return {t: kept[t] for t in schema.tables if t in kept}


def cut_mirror(statements: list[ast.stmt], kept: Mapping[str, Sequence[Field]]) -> list[ast.stmt]:
    """The mirror types' statements (format/program.py, shaken) cut to the tables and fields the trimmed
    schema keeps: a table's class goes with its table, a field with its field, the union aliases go (the
    annotations that name them are strings) and `TABLE_TYPES` lists the classes left."""
    schema = load_schema()
    gone = set(schema.tables) - set(kept)
    out: list[ast.stmt] = []
    for st in statements:
        if isinstance(st, ast.ClassDef) and st.name in schema.tables:
            if st.name in kept:
                names = {f.name for f in kept[st.name]}
                st.body = [s for s in st.body if not _declares_other(s, names)] or [ast.Pass()]
                out.append(st)
            continue
        if isinstance(st, ast.Assign | ast.AnnAssign):
            targets = {t.id for t in (st.targets if isinstance(st, ast.Assign) else [st.target])
                       if isinstance(t, ast.Name)}
            if targets & set(schema.unions):
                continue
            if "TABLE_TYPES" in targets and isinstance(st.value, ast.Call):
                st.value.args = [a for a in st.value.args if not (isinstance(a, ast.Name) and a.id in gone)]
        out.append(st)
    return out


def _declares_other(st: ast.stmt, names: set[str]) -> bool:
    return isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id not in names


def identifiers(trees: Iterable[ast.AST]) -> set[str]:
    """Every name, attribute and imported name the given module trees mention."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name)
    return names
