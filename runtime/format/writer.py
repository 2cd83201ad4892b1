"""A schema-driven FlatBuffers encoder for the mirror types of program.py.

The output is deterministic: the same object always gives the same bytes.
"""

from __future__ import annotations

import math
from typing import Any

import flatbuffers

from etbuild.errors import InternalError
from etbuild.runtime.format.fbs import SCALAR_SIZES, Field, Schema

_SLOT_WRITERS = {
    "bool": "PrependBoolSlot", "byte": "PrependInt8Slot", "ubyte": "PrependUint8Slot",
    "short": "PrependInt16Slot", "ushort": "PrependUint16Slot", "int": "PrependInt32Slot",
    "uint": "PrependUint32Slot", "long": "PrependInt64Slot", "ulong": "PrependUint64Slot",
    "float": "PrependFloat32Slot", "double": "PrependFloat64Slot",
}
_ELEM_WRITERS = {
    "bool": "PrependBool", "byte": "PrependInt8", "ubyte": "PrependUint8",
    "short": "PrependInt16", "ushort": "PrependUint16", "int": "PrependInt32",
    "uint": "PrependUint32", "long": "PrependInt64", "ulong": "PrependUint64",
    "float": "PrependFloat32", "double": "PrependFloat64",
}


class FlatBufferWriter:
    """Encodes one object tree with a flatbuffers.Builder."""

    def __init__(self, schema: Schema, initial_size: int = 1 << 16) -> None:
        self.schema = schema
        self.b = flatbuffers.Builder(initial_size)
        self._shared: dict[tuple[Any, ...], int] = {}

    def finish(self, obj: Any) -> bytes:
        root = self.table(obj, self.schema.root_type)
        ident = self.schema.file_identifier.encode() if self.schema.file_identifier else None
        self.b.Finish(root, file_identifier=ident)
        return bytes(self.b.Output())

    def table(self, obj: Any, name: str) -> int:
        """Write a table once per content: its children first, then the table, shared with an
        earlier table of the same type whose scalars and children's offsets are the same."""
        fields = self.schema.tables[name]
        offsets = {f.name: self._child(getattr(obj, f.name), f) for f in fields}
        key = (name, *(offsets[f.name] if offsets[f.name] is not None else _inline_key(getattr(obj, f.name))
                       for f in fields))
        if key not in self._shared:
            self._shared[key] = self._write_table(obj, fields, offsets)
        return self._shared[key]

    def _write_table(self, obj: Any, fields: list[Field], offsets: dict[str, int | None]) -> int:
        self.b.StartObject(max((f.slot for f in fields), default=-1) + 1)
        for fld in fields:
            self._add_field(obj, fld, offsets.get(fld.name))
        return self.b.EndObject()

    def _child(self, value: Any, fld: Field) -> int | None:
        """Write what a field points to (before the table starts); None for inline scalars."""
        if value is None:
            return None
        kind = fld.type.kind
        if fld.type.vector:
            return self.vector(value, fld)
        if kind == "string":
            return self._string(value)
        if kind == "table":
            return self.table(value, fld.type.name)
        if kind == "union":
            member = self._member(value, fld)
            return self.table(value, self.schema.aliases.get(member, member))
        return None

    def _add_field(self, obj: Any, fld: Field, offset: int | None) -> None:
        value = getattr(obj, fld.name)
        if fld.type.kind == "union":
            if value is None:
                return
            members = self.schema.unions[fld.type.name]
            self.b.PrependUint8Slot(fld.slot - 1, members.index(self._member(value, fld)) + 1, 0)
            self.b.PrependUOffsetTRelativeSlot(fld.slot, offset, 0)
        elif offset is not None:
            self.b.PrependUOffsetTRelativeSlot(fld.slot, offset, 0)
        elif fld.type.kind in ("scalar", "enum") and not fld.type.vector:
            signed_zero = isinstance(value, float) and value == 0 and math.copysign(1, value) < 0
            self.b.ForceDefaults(signed_zero)  # -0.0 == the default 0.0, but is another number
            getattr(self.b, _SLOT_WRITERS[fld.type.name])(fld.slot, value, fld.default)
            self.b.ForceDefaults(False)

    def _member(self, value: Any, fld: Field) -> str:
        """The union member a value's mirror type names."""
        member = type(value).__name__
        if member not in self.schema.unions[fld.type.name]:
            raise InternalError(f"{member} is not a member of union {fld.type.name}")
        return member

    def vector(self, items: Any, fld: Field) -> int:
        kind, name = fld.type.kind, fld.type.name
        if kind in ("scalar", "enum"):
            if name in ("ubyte", "byte") and kind == "scalar":
                return self._shared_bytes(bytes(items), fld.force_align)
            return self._scalar_vector(items, name, fld.force_align)
        offsets = [self._string(s) if kind == "string" else self.table(s, name) for s in items]
        self.b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            self.b.PrependUOffsetTRelative(off)
        return self.b.EndVector()

    def _string(self, text: str) -> int:
        """A string, written once however often it occurs (FlatBuffers readers follow offsets,
        so equal strings and scalar vectors may share their bytes)."""
        key = ("string", text)
        if key not in self._shared:
            self._shared[key] = self.b.CreateString(text)
        return self._shared[key]

    def _scalar_vector(self, items: Any, scalar: str, align: int) -> int:
        key = (scalar, align, tuple(items))
        if key not in self._shared:
            self._shared[key] = self._write_scalar_vector(items, scalar, align)
        return self._shared[key]

    def _write_scalar_vector(self, items: Any, scalar: str, align: int) -> int:
        size = SCALAR_SIZES[scalar]
        self.b.StartVector(size, len(items), max(size, align))
        prepend = getattr(self.b, _ELEM_WRITERS[scalar])
        for item in reversed(items):
            prepend(item)
        return self.b.EndVector()

    def _shared_bytes(self, data: bytes, align: int) -> int:
        key = ("bytes", align, data)
        if key not in self._shared:
            self._shared[key] = self.bytes_vector(data, align)
        return self._shared[key]

    def bytes_vector(self, data: bytes, align: int = 0) -> int:
        """A [ubyte] vector written in one copy, aligned to `align` when it is set."""
        b = self.b
        b.StartVector(1, len(data), max(1, align))
        b.head = b.head - len(data)
        b.Bytes[b.head : b.head + len(data)] = data
        return b.EndVector()


def _inline_key(value: Any) -> tuple[str, Any]:
    """A scalar field's value as a key that tells apart what Python's == does not (-0.0 and 0.0)."""
    return ("float", value.hex()) if isinstance(value, float) else ("inline", value)


def encode(obj: Any, schema: Schema) -> bytes:
    """Encode obj as the schema's root table, with the schema's file identifier."""
    return FlatBufferWriter(schema).finish(obj)
