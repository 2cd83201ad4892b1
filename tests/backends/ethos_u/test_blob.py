"""The `vela_bin_stream` blob: the layout ARM-ETHOSU.md §6 gives, packed and parsed (torch-free), and an
ExecuTorch-built blob parsed and packed back byte for byte."""

from __future__ import annotations

import struct

import pytest

from etbuild.backends.ethos_u.format.blob import IoTensor, VelaBin, blocks, pack, parse, tosa_key
from etbuild.errors import InvalidProgram

X1 = VelaBin(b"COP1" + bytes(1692), bytes(range(256)) * 2 + bytes(64), 1104,
             (IoTensor((1, 1, 1, 3, 8, 8), 1, 192, 1),), (IoTensor((1, 1, 1, 1, 1, 4), 1, 16, 1),))
"""The sizes of the fact sheet's X1 blob on ethos-u55-128 (cmd 1696 B, weights 576 B, scratch 1104 B)."""


def test_the_blocks_sit_where_executorch_reads_them() -> None:
    data = pack(X1)
    assert len(data) == 2608
    assert [(name, at) for name, at, _, _ in blocks(data)] == [
        ("vela_bin_stream", 0), ("cmd_data", 32), ("weight_data", 1760), ("scratch_size", 2368),
        ("inputs", 2416), ("outputs", 2496), ("vela_end_stream", 2576)]
    assert data[:32] == b"vela_bin_stream\0" + bytes(16)
    assert data[32:52] == b"cmd_data".ljust(16, b"\0") + bytes.fromhex("a0060000")
    assert struct.unpack_from("<10i", data, 2416 + 32) == (1, 1, 1, 1, 3, 8, 8, 1, 192, 1)
    assert parse(data) == X1


def test_io_shapes_are_left_padded_to_six_dims() -> None:
    blob = VelaBin(b"COP1", b"", 16, (IoTensor((1, 40, 101), 1, 0),), (IoTensor((1, 12), 1, 4048),))
    assert parse(pack(blob)).inputs == (IoTensor((1, 1, 1, 1, 40, 101), 1, 0, 1),)


@pytest.mark.parametrize(("damage", "message"), [
    (lambda b: b[:-32], "expected vela_bin_stream first and vela_end_stream last"),
    (lambda b: b[:32] + b"cmd_dato" + b[40:], "unknown block 'cmd_dato' at byte 32"),
    (lambda b: b[:64] + b"XXXX" + b[68:], "cmd_data does not start with COP1 or COP2"),
    (lambda b: b[:48] + struct.pack("<I", 99999) + b[52:], "runs past the end"),
    (lambda b: b + bytes(8), "not a multiple of 16"),
])
def test_a_damaged_blob_is_an_invalid_program(damage, message: str) -> None:
    with pytest.raises(InvalidProgram, match=message):
        parse(damage(pack(X1)))


def test_the_tosa_key_follows_the_blob() -> None:
    data = pack(X1)
    changed = data[:1800] + b"\xff" + data[1801:]
    assert tosa_key(data).startswith("ethos_u.tosa.") and tosa_key(data) != tosa_key(changed)
