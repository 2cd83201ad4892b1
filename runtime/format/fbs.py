"""A parser for the subset of the FlatBuffers schema language that etbuild's schemas use.

Supports `namespace`, `attribute`, `enum`, `union` (with aliased members, `Name: Table`),
`table` (with defaults, enum defaults by name, and the `force_align` and `deprecated` field
attributes), `root_type`, `file_identifier` and `file_extension`. Structs are not supported:
neither `program.fbs` nor `xnnpack.fbs` has one. A deprecated field keeps its vtable slot
but is left out of the table's fields, so it is neither read nor written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

SCALAR_SIZES = {
    "bool": 1, "byte": 1, "ubyte": 1, "short": 2, "ushort": 2, "int": 4, "uint": 4,
    "long": 8, "ulong": 8, "float": 4, "double": 8,
}
SCALAR_FORMATS = {
    "bool": "?", "byte": "b", "ubyte": "B", "short": "h", "ushort": "H", "int": "i",
    "uint": "I", "long": "q", "ulong": "Q", "float": "f", "double": "d",
}
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_TOKEN = re.compile(r'\s*(?:(//[^\n]*)|("[^"]*")|([A-Za-z_][\w.]*)|(-?\d+(?:\.\d+)?)|(\S))')


class SchemaSyntaxError(ValueError):
    """The .fbs text does not parse."""


@dataclass(frozen=True)
class FieldType:
    """A field's type: kind is scalar, string, enum, table or union; vector for `[T]`."""

    kind: str
    name: str
    vector: bool = False



@dataclass(frozen=True)
class Field:
    """One table field; `slot` is its vtable index (a union takes two: type, then value)."""

    name: str
    type: FieldType
    slot: int
    default: float | int | bool = 0
    force_align: int = 0


@dataclass
class Schema:
    """A parsed schema: tables by name, enums (with underlying type), unions (member names).

    aliases: the table of each aliased union member (`Add: BinaryNode`); a member that is
    not aliased is its own table.
    """

    tables: dict[str, list[Field]] = field(default_factory=dict)
    enums: dict[str, tuple[str, dict[str, int]]] = field(default_factory=dict)
    unions: dict[str, list[str]] = field(default_factory=dict)
    root_type: str = ""
    file_identifier: str = ""
    aliases: dict[str, str] = field(default_factory=dict)


def _tokens(text: str) -> list[str]:
    out = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            break
        pos = m.end()
        if m.group(1) is None and m.lastindex is not None:
            out.append(m.group(m.lastindex))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.schema = Schema()
        self._pending: dict[str, list[tuple[str, str, bool, str | None, int, bool]]] = {}

    def next(self) -> str:
        if self.i >= len(self.toks):
            raise SchemaSyntaxError("unexpected end of schema")
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def expect(self, want: str) -> None:
        got = self.next()
        if got != want:
            raise SchemaSyntaxError(f"expected {want!r}, got {got!r} (token {self.i})")

    def peek(self) -> str:
        return self.toks[self.i] if self.i < len(self.toks) else ""

    def parse(self) -> Schema:
        handlers = {
            "namespace": self._skip_statement, "attribute": self._skip_statement,
            "file_extension": self._skip_statement, "include": self._skip_statement,
            "enum": self._enum, "union": self._union, "table": self._table,
            "root_type": self._root_type, "file_identifier": self._identifier,
        }
        while self.i < len(self.toks):
            keyword = self.next()
            if keyword not in handlers:
                raise SchemaSyntaxError(f"unsupported declaration {keyword!r}")
            handlers[keyword]()
        self._resolve()
        return self.schema

    def _skip_statement(self) -> None:
        while self.next() != ";":
            pass

    def _root_type(self) -> None:
        self.schema.root_type = self.next()
        self.expect(";")

    def _identifier(self) -> None:
        self.schema.file_identifier = self.next().strip('"')
        self.expect(";")

    def _enum(self) -> None:
        name = self.next()
        self.expect(":")
        base = self.next()
        self.expect("{")
        values: dict[str, int] = {}
        value = 0
        while (tok := self.next()) != "}":
            if tok == ",":
                continue
            if self.peek() == "=":
                self.next()
                value = int(self.next())
            values[tok] = value
            value += 1
        self.schema.enums[name] = (base, values)

    def _union(self) -> None:
        name = self.next()
        self.expect("{")
        members = []
        while (tok := self.next()) != "}":
            if tok == ",":
                continue
            members.append(tok)
            if self.peek() == ":":
                self.next()
                self._alias(tok, self.next())
        self.schema.unions[name] = members

    def _alias(self, member: str, table: str) -> None:
        known = self.schema.aliases.get(member, table)
        if known != table:
            raise SchemaSyntaxError(f"union member {member!r} names both {known!r} and {table!r}")
        self.schema.aliases[member] = table

    def _table(self) -> None:
        name = self.next()
        self.expect("{")
        fields = []
        while (tok := self.next()) != "}":
            self.expect(":")
            vector = self.peek() == "["
            if vector:
                self.next()
            type_name = self.next()
            if vector:
                self.expect("]")
            default = None
            if self.peek() == "=":
                self.next()
                default = self.next()
            align, deprecated = self._field_attributes() if self.peek() == "(" else (0, False)
            self.expect(";")
            fields.append((tok, type_name, vector, default, align, deprecated))
        self._pending[name] = fields

    def _field_attributes(self) -> tuple[int, bool]:
        """`(force_align: N, deprecated)` → (N, True); other attributes are ignored."""
        self.expect("(")
        align, deprecated = 0, False
        while (tok := self.next()) != ")":
            if tok == "force_align":
                self.expect(":")
                align = int(self.next())
            deprecated = deprecated or tok == "deprecated"
        return align, deprecated

    def _resolve(self) -> None:
        for member, table in self.schema.aliases.items():
            if table not in self._pending or member in self._pending:
                raise SchemaSyntaxError(f"union member {member!r}: {table!r} must be a table and {member!r} not one")
        for table, raw_fields in self._pending.items():
            slot = 0
            fields = []
            for name, type_name, vector, default, align, deprecated in raw_fields:
                ftype = self._field_type(type_name, vector)
                if ftype.kind == "union":
                    slot += 1  # the hidden `<name>_type` ubyte field comes first
                if not deprecated:
                    fields.append(Field(name, ftype, slot, self._default(ftype, type_name, default), align))
                slot += 1
            self.schema.tables[table] = fields

    def _default(self, ftype: FieldType, type_name: str, raw: str | None) -> float | int | bool:
        """A field's default; an enum's may be given by member name."""
        if ftype.kind == "enum" and raw is not None and not _NUMBER.fullmatch(raw):
            members = self.schema.enums[type_name][1]
            if raw not in members:
                raise SchemaSyntaxError(f"default {raw!r} is not a member of enum {type_name}")
            return members[raw]
        return _default(ftype, raw)

    def _field_type(self, name: str, vector: bool) -> FieldType:
        if name in SCALAR_SIZES:
            return FieldType("scalar", name, vector)
        if name == "string":
            return FieldType("string", name, vector)
        if name in self.schema.enums:
            return FieldType("enum", self.schema.enums[name][0], vector)
        if name in self.schema.unions:
            return FieldType("union", name, vector)
        if name in self._pending:
            return FieldType("table", name, vector)
        raise SchemaSyntaxError(f"unknown type {name!r}")


def _default(ftype: FieldType, raw: str | None) -> float | int | bool:
    if ftype.kind not in ("scalar", "enum") or ftype.vector:
        return 0
    if ftype.name == "bool":
        return raw == "true"
    if ftype.name in ("float", "double"):
        return float(raw or 0)
    return int(raw or 0)


def parse_schema(text: str) -> Schema:
    """Parse .fbs text into a `Schema`."""
    return _Parser(text).parse()


@cache
def load_schema(path: str | Path | None = None) -> Schema:
    """Parse a schema file (parsed once per path); by default etbuild's own `schema/program.fbs`."""
    if path is None:
        from etbuild.schema import PROGRAM_FBS

        path = PROGRAM_FBS
    return parse_schema(Path(path).read_text())
