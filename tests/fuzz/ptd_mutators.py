"""Mutators for `.ptd` files: bytes of the header and the table, header fields, and the table's structure."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

from etbuild.runtime.format import flat_tensor as ft
from etbuild.runtime.format.fbs import load_schema
from etbuild.runtime.format.ptd import INSERTED_LENGTH, read_ptd, round_up
from etbuild.runtime.format.writer import encode
from etbuild.schema import SCHEMA_DIR
from tests.fuzz.mutators import BYTE_VALUES, INTS

HEADER_FIELDS = {12: "<I", 16: "<Q", 24: "<Q", 32: "<Q", 40: "<Q"}  # offset in the file -> format


def byte_mutant(data: bytes, rng: random.Random) -> bytes:
    """1-6 bytes overwritten in the header and flatbuffer, or the file cut or grown."""
    _, header = read_ptd(data)
    end = header.flatbuffer_offset + header.flatbuffer_size
    out = bytearray(data)
    kind = rng.random()
    if kind < 0.1:
        return bytes(out[: rng.randrange(len(out))])
    if kind < 0.15:
        return bytes(out) + bytes(rng.randrange(1, 300))
    for _ in range(rng.randint(1, 6)):
        out[rng.randrange(end)] = rng.choice(BYTE_VALUES) if rng.random() < 0.5 else rng.randrange(256)
    return bytes(out)


def header_mutant(data: bytes, rng: random.Random) -> bytes:
    """One header field set to an interesting value (a boundary, a power of two, near its own)."""
    offset = rng.choice(sorted(HEADER_FIELDS))
    fmt = HEADER_FIELDS[offset]
    limit = (1 << (8 * struct.calcsize(fmt))) - 1
    own = struct.unpack_from(fmt, data, offset)[0]
    choices = [v for v in (*INTS, own - 1, own + 1, own * 2, len(data), len(data) + 1) if 0 <= v <= limit]
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, rng.choice(choices))
    return bytes(out)


def _rewritten(data: bytes, edit: Callable[[ft.FlatTensor], None]) -> bytes:
    """The file with its table edited and written again in front of the same segment data."""
    table, header = read_ptd(data)
    edit(table)
    flat = encode(table, load_schema(SCHEMA_DIR / "flat_tensor.fbs"))
    payload = data[header.segment_base_offset:]
    base = round_up(INSERTED_LENGTH + len(flat), 128)
    head = struct.pack("<4sIQQQQ", b"FH01", 40, INSERTED_LENGTH, len(flat), base, len(payload))
    root = struct.unpack_from("<I", flat, 0)[0] + INSERTED_LENGTH
    body = struct.pack("<I", root) + flat[4:8] + head + bytes(INSERTED_LENGTH - len(head)) + flat[8:]
    return body + bytes(base - len(body)) + payload


def _big(rng: random.Random, near: int) -> int:
    return rng.choice([v for v in (*INTS, near + 1, near * 2, 1 << 40, (1 << 64) - 1) if 0 <= v < 1 << 64])


def structure_mutant(data: bytes, rng: random.Random) -> bytes:
    """One field of the table changed: a segment's offset or size, an entry's segment, key or layout, the version."""

    def edit(table: ft.FlatTensor) -> None:
        choice = rng.randrange(7)
        if choice == 0 and table.segments:
            seg = rng.choice(table.segments)
            seg.offset = _big(rng, seg.offset)
        elif choice == 1 and table.segments:
            seg = rng.choice(table.segments)
            seg.size = _big(rng, seg.size)
        elif choice == 2 and table.named_data:
            item = rng.choice(table.named_data)
            item.segment_index = rng.choice([v for v in (*INTS, len(table.segments)) if 0 <= v < 1 << 32])
        elif choice == 3 and table.named_data:
            rng.choice(table.named_data).key = rng.choice(["", table.named_data[0].key, "\u00e9" * 3, "x" * 300])
        elif choice == 4 and table.named_data and table.named_data[0].tensor_layout is not None:
            layout = rng.choice([n.tensor_layout for n in table.named_data if n.tensor_layout is not None])
            layout.scalar_type = rng.choice([0, 3, 5, 6, 11, 15, 99, 255 - 128])
        elif choice == 5 and table.named_data:
            layout = rng.choice(table.named_data).tensor_layout
            if layout is not None:
                layout.sizes = [rng.choice([-1, 0, 1, 3, 1 << 30]) for _ in range(rng.randint(0, 20))]
                layout.dim_order = bytes(rng.randrange(256) for _ in range(rng.randint(0, 4)))
        else:
            table.version = rng.choice([1, 2, 1 << 31])

    return _rewritten(data, edit)


MUTATORS = {"bytes": byte_mutant, "header": header_mutant, "structure": structure_mutant}
