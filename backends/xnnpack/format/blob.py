"""An `XnnpackBackend` delegate blob, both ways: header + FlatBuffer graph + constant region.

Layout (little-endian; docs/xnnpack-format.md):

    bytes 0-3    zero                    (bytes 4-7 then sit where a FlatBuffer's identifier would)
    bytes 4-7    magic "XH00"
    bytes 8-9    u16 header length (30), then zero padding to 32
    bytes 10-13  u32 FlatBuffer offset   bytes 14-17  u32 FlatBuffer size (unpadded)
    bytes 18-21  u32 constant offset     bytes 22-29  u64 constant size
    FlatBuffer (root XNNGraph, identifier XN01 or XN00), padded to 16; then the constant region.

A blob without "XH00" is a bare FlatBuffer (legacy): no constant region. Reading checks what
ExecuTorch's runtime checks (sizes in bounds, FlatBuffer before constants, identifier) and
decodes with the bounds-checked reader, so a malformed blob raises InvalidProgram.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from etbuild.backends.xnnpack.format.graph import MIRROR_TYPES, XNNGraph
from etbuild.errors import InvalidProgram
from etbuild.runtime.format.fbs import Schema, load_schema
from etbuild.runtime.format.reader import Layout, decode, schema_layout
from etbuild.runtime.format.writer import encode

SCHEMA_FILE = "xnnpack.fbs"  # in etbuild.schema
MAGIC = b"XH00"
HEADER_LENGTH = 30
HEADER_PADDED = 32
IDENTIFIERS = (b"XN01", b"XN00")
_HEADER = struct.Struct("<4s4sHIIIQ")  # zero, magic, length, fb offset, fb size, constant offset, constant size
_ALIGN = 16


@dataclass(frozen=True)
class Header:
    """Where the FlatBuffer and the constant region lie in a blob."""

    flatbuffer_offset: int
    flatbuffer_size: int
    constant_offset: int
    constant_size: int


@dataclass(frozen=True)
class Blob:
    """A decoded blob: its graph and a zero-copy view of its constant region (empty when absent)."""

    graph: XNNGraph
    constants: memoryview


@cache
def xnnpack_schema() -> Schema:
    """`schema/xnnpack.fbs`, parsed once."""
    from etbuild.schema import SCHEMA_DIR

    return load_schema(SCHEMA_DIR / SCHEMA_FILE)


@cache
def graph_layout() -> Layout:
    """The reader's layout of the XNNPACK graph, decoding into the mirror types of graph.py."""
    return schema_layout(SCHEMA_FILE, MIRROR_TYPES)


def read_header(blob: Any) -> Header | None:
    """The checked header of a blob; None for a legacy blob without one."""
    size = len(blob)
    if size < HEADER_LENGTH:
        raise InvalidProgram(f"XNNPACK blob is {size} bytes: shorter than its {HEADER_LENGTH}-byte header")
    _, magic, _, fb_off, fb_size, c_off, c_size = _HEADER.unpack_from(blob, 0)
    if magic != MAGIC:
        return None
    if fb_size < 8 or fb_off > size or fb_size > size - fb_off:
        raise InvalidProgram(f"XNNPACK header: FlatBuffer ({fb_size} bytes at {fb_off}) does not fit {size} bytes")
    if c_off > size or c_size > size - c_off:
        raise InvalidProgram(f"XNNPACK header: constants ({c_size} bytes at {c_off}) do not fit {size} bytes")
    if c_off < fb_off or c_off - fb_off < fb_size:
        raise InvalidProgram(f"XNNPACK header: constants at {c_off} overlap the FlatBuffer ({fb_size} B at {fb_off})")
    return Header(fb_off, fb_size, c_off, c_size)


def read_blob(blob: Any) -> Blob:
    """Decode a blob (bytes, mmap or memoryview); InvalidProgram when it is malformed."""
    view = memoryview(blob).cast("B")
    header = read_header(view)
    if header is None:
        flat, constants = view, view[:0]
    else:
        flat = view[header.flatbuffer_offset : header.flatbuffer_offset + header.flatbuffer_size]
        constants = view[header.constant_offset : header.constant_offset + header.constant_size]
    if len(flat) < 8 or bytes(flat[4:8]) not in IDENTIFIERS:
        found = bytes(flat[4:8]) if len(flat) >= 8 else b""
        raise InvalidProgram(f"XNNPACK graph identifier is {found!r}, expected one of {IDENTIFIERS}")
    return Blob(decode(flat, graph_layout()), constants)


def write_blob(graph: XNNGraph, constants: bytes = b"") -> bytes:
    """The blob bytes of a graph and its constant region (identifier XN01, header XH00)."""
    flat = encode(graph, xnnpack_schema())
    constant_offset = HEADER_PADDED + _round_up(len(flat))
    header = _HEADER.pack(bytes(4), MAGIC, HEADER_LENGTH, HEADER_PADDED, len(flat), constant_offset, len(constants))
    padding = bytes(constant_offset - HEADER_PADDED - len(flat))
    return header + bytes(HEADER_PADDED - HEADER_LENGTH) + flat + padding + constants


def _round_up(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN
