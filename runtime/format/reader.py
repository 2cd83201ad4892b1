"""A bounds-checked, schema-driven FlatBuffers decoder into the mirror types of program.py.

Every offset is checked before use, every vector length is checked against the bytes that
remain, and the total number of decoded elements is capped by a budget proportional to the
buffer size, so a malformed or hostile buffer raises `InvalidProgram` instead of an
IndexError, a hang or an unbounded allocation.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from etbuild.errors import InvalidProgram
from etbuild.runtime.format.fbs import SCALAR_FORMATS, SCALAR_SIZES, Schema, load_schema
from etbuild.runtime.format.program import TABLE_TYPES

# One field as the reader uses it: (name, kind, type name, is a vector, vtable slot, default).
FieldSpec = tuple[str, str, str, bool, int, Any]


@dataclass(frozen=True)
class Layout:
    """What decoding needs of a schema: each table's fields, each union's members, the root table.

    aliases: the table of each aliased union member; types: the mirror class of each table
    and aliased member (default: the program types of etbuild.runtime.format.program).
    A trimmed runtime's layout holds only the tables and fields it reads (see etbuild.select).
    """

    tables: Mapping[str, Sequence[FieldSpec]]
    unions: Mapping[str, Sequence[str]]
    root: str
    aliases: Mapping[str, str] = field(default_factory=dict)
    types: Mapping[str, type] = field(default_factory=lambda: TABLE_TYPES)


def layout(schema: Schema, types: Mapping[str, type] | None = None) -> Layout:
    """The layout of a parsed schema, decoding into `types` (default: the program mirror types)."""
    tables = {
        name: tuple((f.name, f.type.kind, f.type.name, f.type.vector, f.slot, f.default) for f in fields)
        for name, fields in schema.tables.items()
    }
    return Layout(tables, schema.unions, schema.root_type, schema.aliases, TABLE_TYPES if types is None else types)

_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")


def schema_layout(file_name: str, types: Mapping[str, type]) -> Layout:
    """The layout of another schema of `etbuild.schema` (`xnnpack.fbs`, for a backend's blobs),
    decoding into `types`. A trimmed runtime replaces this function: it holds the layouts of
    the schemas its backends read as literals, and ships no `.fbs` file."""
    from etbuild.schema import SCHEMA_DIR

    return layout(load_schema(SCHEMA_DIR / file_name), types)


class FlatBufferReader:
    """Decodes tables of one schema from one buffer (bytes, mmap or memoryview)."""

    def __init__(self, buf: Any, schema: Layout) -> None:
        self.buf = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
        self.size = len(self.buf)
        self.tables, self.unions, self.aliases, self.types = schema.tables, schema.unions, schema.aliases, schema.types
        self.budget = 64 + 4 * self.size  # elements we are willing to decode

    def _check(self, pos: int, nbytes: int, what: str) -> None:
        if pos < 0 or nbytes < 0 or pos + nbytes > self.size:
            raise InvalidProgram(
                f"{what}: bytes {pos}..{pos + nbytes} lie outside the {self.size}-byte program"
            )

    def _spend(self, count: int, what: str) -> None:
        self.budget -= count
        if self.budget < 0:
            raise InvalidProgram(f"{what}: the program refers to more data than its size allows")

    def u32(self, pos: int, what: str) -> int:
        self._check(pos, 4, what)
        return _U32.unpack_from(self.buf, pos)[0]

    def deref(self, pos: int, what: str) -> int:
        """Follow the uoffset stored at pos."""
        return pos + self.u32(pos, what)

    def root(self, table: str) -> Any:
        """Decode the root table (offset at byte 0)."""
        return self.table(self.deref(0, "root offset"), table)

    def table(self, pos: int, name: str, member: str = "") -> Any:
        """Decode the table `name` that starts at pos (as the mirror type of union member `member`, if given)."""
        self._spend(1, name)
        self._check(pos, 4, f"{name} table")
        vtable = pos - _I32.unpack_from(self.buf, pos)[0]
        self._check(vtable, 4, f"{name} vtable")
        vt_size, tbl_size = _U16.unpack_from(self.buf, vtable)[0], _U16.unpack_from(self.buf, vtable + 2)[0]
        if vt_size < 4 or vt_size % 2:
            raise InvalidProgram(f"{name} vtable: size {vt_size} is not a valid vtable size")
        self._check(vtable, vt_size, f"{name} vtable")
        self._check(pos, tbl_size, f"{name} table")
        slots = (vt_size - 4) // 2
        values = {}
        for fld in self.tables[name]:
            values[fld[0]] = self._field(pos, vtable, slots, tbl_size, fld, name)
        return self.types[member or name](**values)

    def _slot_pos(self, pos: int, vtable: int, slots: int, tbl_size: int, slot: int) -> int:
        if slot >= slots:
            return 0
        off = _U16.unpack_from(self.buf, vtable + 4 + 2 * slot)[0]
        if off and off >= tbl_size:
            raise InvalidProgram(f"field slot {slot} at offset {off} lies outside its table")
        return pos + off if off else 0

    def _field(self, pos: int, vtable: int, slots: int, tbl_size: int, fld: FieldSpec, table: str) -> Any:
        name, kind, type_name, vector, slot, default = fld
        where = f"{table}.{name}"
        if kind == "union":
            type_pos = self._slot_pos(pos, vtable, slots, tbl_size, slot - 1)
            val_pos = self._slot_pos(pos, vtable, slots, tbl_size, slot)
            code = self.scalar(type_pos, "ubyte", where) if type_pos else 0
            if code == 0 or not val_pos:
                return None
            members = self.unions[type_name]
            if code > len(members):
                raise InvalidProgram(f"{where}: union type {code} is not one of {len(members)} members")
            member = members[code - 1]
            table = self.aliases.get(member, member)
            if table not in self.tables:  # a trimmed runtime reads only the members it handles
                raise InvalidProgram(
                    f"{where}: {member} needs a runtime feature this trimmed runtime lacks "
                    "(etbuild select builds the runtime a program needs)"
                )
            return self.table(self.deref(val_pos, where), table, member)
        fpos = self._slot_pos(pos, vtable, slots, tbl_size, slot)
        if not fpos:
            return _absent(kind, type_name, vector, default)
        if kind in ("scalar", "enum") and not vector:
            return self.scalar(fpos, type_name, where)
        target = self.deref(fpos, where)
        if vector:
            return self.vector(target, kind, type_name, where)
        if kind == "string":
            return self.string(target, where)
        return self.table(target, type_name)

    def scalar(self, pos: int, scalar: str, where: str) -> Any:
        self._check(pos, SCALAR_SIZES[scalar], where)
        return struct.unpack_from("<" + SCALAR_FORMATS[scalar], self.buf, pos)[0]

    def string(self, pos: int, where: str) -> str:
        n = self.u32(pos, where)
        self._check(pos + 4, n, where)
        self._spend(n // 16, where)
        try:
            return bytes(self.buf[pos + 4 : pos + 4 + n]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidProgram(f"{where}: string is not valid UTF-8 ({exc.reason})") from None

    def vector(self, pos: int, kind: str, name: str, where: str) -> Any:
        n = self.u32(pos, where)
        elem = SCALAR_SIZES[name] if kind in ("scalar", "enum") else 4
        self._check(pos + 4, n * elem, f"{where} ({n} elements)")
        start = pos + 4
        if kind in ("scalar", "enum"):
            if name in ("ubyte", "byte") and kind == "scalar":
                return self.buf[start : start + n]
            self._spend(n // 4, where)
            return list(struct.unpack_from(f"<{n}{SCALAR_FORMATS[name]}", self.buf, start))
        self._spend(n, where)
        if kind == "string":
            return [self.string(self.deref(start + 4 * i, where), where) for i in range(n)]
        if kind == "table":
            return [self.table(self.deref(start + 4 * i, where), name) for i in range(n)]
        raise InvalidProgram(f"{where}: vectors of {kind} are not supported")


def _absent(kind: str, type_name: str, vector: bool, default: Any) -> Any:
    if vector:
        return [] if type_name not in ("ubyte", "byte") else b""
    if kind in ("scalar", "enum"):
        return default
    return None


def decode(buf: Any, schema: Layout) -> Any:
    """Decode the root table of a flatbuffer; raises InvalidProgram when it is malformed."""
    return FlatBufferReader(buf, schema).root(schema.root)
