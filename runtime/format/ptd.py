"""The `.ptd` file container (ExecuTorch's FlatTensor): flatbuffer, inserted header, segments.

Layout (`schema/flat_tensor.fbs`, ../shared/PTD.md §2), all little-endian: bytes 0-3 the root
offset, 4-7 the identifier `FT01`, then a header inserted into the flatbuffer at byte 8: `FH01`,
u32 header length (>= 40), u64 flatbuffer_offset (the inserted length), u64 flatbuffer_size (the
flatbuffer before insertion), u64 segment_base_offset, u64 segment_data_size. The flatbuffer is
bytes [0, flatbuffer_offset + flatbuffer_size), read from byte 0; segment i is bytes
[base + offset_i, base + offset_i + size_i). Every field is checked against the file's length
before use: a malformed file raises `InvalidData`, never an IndexError, a hang or a large
allocation.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from etbuild.errors import InvalidData, InvalidProgram
from etbuild.runtime.format import flat_tensor as ft
from etbuild.runtime.format.reader import decode

IDENTIFIER = b"FT01"
HEADER_MAGIC = b"FH01"
HEADER_LENGTH = 40
INSERTED_LENGTH = 48  # the header rounded up to 16, so the flatbuffer's 8-byte fields stay aligned
SEGMENT_ALIGNMENT = 128  # what ExecuTorch writes: zero-copy, 128-aligned tensors under a page-aligned mmap
VERSION = 0
_HEADER = struct.Struct("<4sIQQQQ")


@dataclass(frozen=True)
class PtdHeader:
    """Where the flatbuffer and the segments lie."""

    flatbuffer_offset: int
    flatbuffer_size: int
    segment_base_offset: int
    segment_data_size: int


@dataclass(frozen=True)
class Entry:
    """One key of a `.ptd`: its bytes (a zero-copy view) and its tensor layout (None for a delegate's blob)."""

    data: memoryview
    layout: ft.TensorLayout | None


def read_header(buf: Any) -> PtdHeader:
    """Parse and check the header against the file's length."""
    size = len(buf)
    if size < 8 + HEADER_LENGTH:
        raise InvalidData(f"file is {size} bytes: too short to be a .ptd (at least {8 + HEADER_LENGTH})")
    if bytes(buf[4:8]) != IDENTIFIER:
        raise InvalidData(f"identifier is {bytes(buf[4:8])!r}, expected {IDENTIFIER!r}")
    magic, length, fb_offset, fb_size, base, data_size = _HEADER.unpack_from(buf, 8)
    if magic != HEADER_MAGIC:
        raise InvalidData(f"header magic is {magic!r}, expected {HEADER_MAGIC!r}")
    if length < HEADER_LENGTH:
        raise InvalidData(f"header length {length} is below {HEADER_LENGTH}")
    fb_end = fb_offset + fb_size
    if length > fb_offset or fb_offset % 8 or fb_end > size or fb_size < 8:
        raise InvalidData(
            f"header: flatbuffer_offset {fb_offset} and flatbuffer_size {fb_size} do not fit a {size}-byte "
            f"file after a {length}-byte header (the offset must be a multiple of 8)"
        )
    if base < fb_end or base + data_size > size:
        raise InvalidData(
            f"header: segments at {base}..{base + data_size} do not fit a {size}-byte file whose flatbuffer "
            f"ends at {fb_end}"
        )
    return PtdHeader(fb_offset, fb_size, base, data_size)


def read_ptd(buf: Any) -> tuple[ft.FlatTensor, PtdHeader]:
    """Decode a whole `.ptd` buffer and check its table: version, segments inside the data, entries."""
    header = read_header(buf)
    view = memoryview(buf)
    try:
        table = decode(view[: header.flatbuffer_offset + header.flatbuffer_size], ft.flat_tensor_layout())
    except InvalidData:
        raise
    except InvalidProgram as exc:
        raise InvalidData(str(exc)) from None
    if table.version > VERSION:
        raise InvalidData(f"FlatTensor version {table.version} is newer than this runtime reads ({VERSION})")
    for i, seg in enumerate(table.segments):
        if seg.offset + seg.size > header.segment_data_size:
            raise InvalidData(
                f"segment {i} (offset {seg.offset}, {seg.size} bytes) runs past the "
                f"{header.segment_data_size}-byte segment data"
            )
    return table, header


def entries(buf: Any, table: ft.FlatTensor, header: PtdHeader) -> dict[str, Entry]:
    """Every key's entry, its bytes a zero-copy view of `buf`; a key with no segment, an empty key
    or one written twice is an error."""
    out: dict[str, Entry] = {}
    base, view = header.segment_base_offset, memoryview(buf)
    for k, item in enumerate(table.named_data):
        if not item.key:
            raise InvalidData(f"named_data[{k}] has no key")
        if item.key in out:
            raise InvalidData(f"named_data[{k}]: key {item.key!r} appears twice")
        if not 0 <= item.segment_index < len(table.segments):
            raise InvalidData(
                f"key {item.key!r}: segment {item.segment_index} does not exist ({len(table.segments)} segments)"
            )
        seg = table.segments[item.segment_index]
        out[item.key] = Entry(view[base + seg.offset : base + seg.offset + seg.size], item.tensor_layout)
    return out


def round_up(value: int, alignment: int) -> int:
    """The smallest multiple of alignment that is >= value."""
    return (value + alignment - 1) // alignment * alignment


def write_ptd(named: Mapping[str, tuple[bytes, ft.TensorLayout | None]], alignment: int = SEGMENT_ALIGNMENT) -> bytes:
    """`.ptd` bytes holding `named` (key -> bytes, layout): keys sorted, equal bytes stored once,
    each segment at a multiple of `alignment` from the file's start. A function of the entries
    only: the same keys, bytes and layouts always give the same file."""
    from etbuild.runtime.format.fbs import load_schema
    from etbuild.runtime.format.writer import encode
    from etbuild.schema import SCHEMA_DIR

    blobs: dict[bytes, int] = {}
    items = []
    for key in sorted(named):
        data, layout = named[key]
        index = blobs.setdefault(bytes(data), len(blobs))
        items.append(ft.NamedData(key, index, layout))
    offsets, pos = [], 0
    for blob in blobs:
        pos = round_up(pos, alignment)
        offsets.append(pos)
        pos += len(blob)
    segments = [ft.DataSegment(o, len(b)) for o, b in zip(offsets, blobs)]
    flat = encode(ft.FlatTensor(VERSION, segments, items), load_schema(SCHEMA_DIR / ft.SCHEMA_FILE))
    base = round_up(INSERTED_LENGTH + len(flat), alignment)
    header = _HEADER.pack(HEADER_MAGIC, HEADER_LENGTH, INSERTED_LENGTH, len(flat), base, pos)
    root = struct.unpack_from("<I", flat, 0)[0] + INSERTED_LENGTH
    head = struct.pack("<I", root) + flat[4:8] + header + bytes(INSERTED_LENGTH - len(header))
    out = bytearray(head + flat[8:])
    out += bytes(base - len(out))
    for blob, offset in zip(blobs, offsets):
        out += bytes(base + offset - len(out))
        out += blob
    return bytes(out)
