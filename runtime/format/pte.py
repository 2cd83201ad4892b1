"""The `.pte` file container: flatbuffer + optional extended header + data segments.

Layout (see docs/pte-format.md): bytes 0-3 root offset, 4-7 identifier `ET12`; when any
segment holds data a 32-byte extended header (`eh00`, length, program_size,
segment_base_offset, segment_data_size) is inserted at byte 8 and the segments follow the
flatbuffer at `segment_base_offset`, each aligned to the segment alignment.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache
from typing import Any

from etbuild.errors import InvalidProgram
from etbuild.runtime.format.fbs import load_schema
from etbuild.runtime.format.program import DataSegment, Program
from etbuild.runtime.format.reader import Layout, decode, layout
from etbuild.runtime.format.writer import encode

IDENTIFIER = b"ET12"
HEADER_MAGIC = b"eh00"
HEADER_LENGTH = 32
_HEADER = struct.Struct("<4sIQQQ")
SEGMENT_ALIGNMENT = 128
CONSTANT_ALIGNMENT = 16


@dataclass(frozen=True)
class ExtendedHeader:
    """Where the flatbuffer ends and the segments begin."""

    program_size: int
    segment_base_offset: int
    segment_data_size: int


def round_up(value: int, alignment: int) -> int:
    """The smallest multiple of alignment that is >= value."""
    return (value + alignment - 1) // alignment * alignment


def read_header(buf: Any) -> ExtendedHeader | None:
    """Parse and check the extended header; None when the file has none."""
    size = len(buf)
    if size < 8:
        raise InvalidProgram(f"file is {size} bytes: too short to be a program")
    if bytes(buf[4:8]) != IDENTIFIER:
        raise InvalidProgram(f"identifier is {bytes(buf[4:8])!r}, expected {IDENTIFIER!r}")
    if size < 8 + HEADER_LENGTH or bytes(buf[8:12]) != HEADER_MAGIC:
        return None
    _, length, program_size, base, data_size = _HEADER.unpack_from(buf, 8)
    if length < HEADER_LENGTH:
        raise InvalidProgram(f"extended header length {length} is below {HEADER_LENGTH}")
    if not (8 + length <= program_size <= size) or base < program_size:
        raise InvalidProgram(
            f"extended header: program_size {program_size}, segment_base_offset {base} "
            f"do not fit a {size}-byte file"
        )
    if base + data_size > size:
        raise InvalidProgram(
            f"file is {size} bytes but its header says segments end at byte {base + data_size}"
        )
    return ExtendedHeader(program_size, base, data_size)


@cache
def program_layout() -> Layout:
    """The reader's layout of program.fbs, parsed once."""
    return layout(load_schema())


def read_program(buf: Any) -> tuple[Program, ExtendedHeader | None]:
    """Decode a whole `.pte` buffer into a Program and its extended header."""
    header = read_header(buf)
    view = memoryview(buf)
    flat = view[: header.program_size] if header else view
    return decode(flat, program_layout()), header


def segment_bytes(buf: Any, program: Program, header: ExtendedHeader | None, index: int) -> memoryview:
    """A zero-copy view of segment `index`, checked against the file."""
    if not 0 <= index < len(program.segments):
        raise InvalidProgram(f"segment {index} does not exist ({len(program.segments)} segments)")
    seg = program.segments[index]
    if seg.size == 0:
        return memoryview(b"")
    if header is None:
        raise InvalidProgram(f"segment {index} holds {seg.size} bytes but the file has no extended header")
    start = header.segment_base_offset + seg.offset
    if seg.offset + seg.size > header.segment_data_size or start + seg.size > len(buf):
        raise InvalidProgram(
            f"segment {index} (offset {seg.offset}, {seg.size} bytes) runs past the segment data"
        )
    return memoryview(buf)[start : start + seg.size]


def write_program(program: Program, segments: list[bytes]) -> bytes:
    """Serialize a Program and its segment payloads into `.pte` bytes.

    `program.segments` is filled in here from `segments`. With no segment data the file has
    no extended header and a single empty segment, as ExecuTorch writes it.
    """
    offsets, data = _layout_segments(segments)
    program.segments = [DataSegment(offset=o, size=len(s)) for o, s in zip(offsets, segments)]
    if not data:
        program.segments = program.segments or [DataSegment(0, 0)]
    return assemble(program, data)


def assemble(program: Program, data: bytes) -> bytes:
    """`.pte` bytes of a Program whose `segments` already describe `data`, the segment bytes
    (no extended header when there are none)."""
    if not data:
        return encode(program, load_schema())
    flat = encode(program, load_schema())
    program_size = len(flat) + HEADER_LENGTH
    base = round_up(program_size, SEGMENT_ALIGNMENT)
    root = struct.unpack_from("<I", flat, 0)[0] + HEADER_LENGTH
    header = _HEADER.pack(HEADER_MAGIC, HEADER_LENGTH, program_size, base, len(data))
    head = struct.pack("<I", root) + flat[4:8] + header
    return head + flat[8:] + bytes(base - program_size) + data


def _layout_segments(segments: list[bytes]) -> tuple[list[int], bytes]:
    offsets, chunks, pos = [], [], 0
    for i, seg in enumerate(segments):
        offsets.append(pos)
        chunks.append(seg)
        pos += len(seg)
        if i + 1 < len(segments) and seg:
            pad = round_up(pos, SEGMENT_ALIGNMENT) - pos
            chunks.append(bytes(pad))
            pos += pad
    return offsets, b"".join(chunks)
