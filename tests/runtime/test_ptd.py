"""The `.ptd` reader and writer (etbuild.runtime.format.ptd) and the data-file lookup (etbuild.runtime.data_files)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from etbuild.errors import InvalidData
from etbuild.runtime.data_files import DataFile, NamedData, data_file, load_data_file
from etbuild.runtime.format import flat_tensor as ft
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.fbs import load_schema
from etbuild.runtime.format.ptd import INSERTED_LENGTH, read_ptd, round_up, write_ptd
from etbuild.runtime.format.reader import layout
from etbuild.runtime.format.writer import encode
from etbuild.schema import SCHEMA_DIR

WEIGHT = np.arange(6, dtype=np.float32)
BIAS = np.array([10, 20, 30], dtype=np.float32)


def _e1() -> bytes:
    """PTD.md's E1 table: lin.weight 3x2 and lin.bias 3, float32."""
    return write_ptd({
        "lin.weight": (WEIGHT.tobytes(), ft.TensorLayout(fb.ScalarType.FLOAT, [3, 2], b"\x00\x01")),
        "lin.bias": (BIAS.tobytes(), ft.TensorLayout(fb.ScalarType.FLOAT, [3], b"\x00")),
    })


def test_the_layout_is_the_schemas():
    parsed = layout(load_schema(SCHEMA_DIR / "flat_tensor.fbs"), ft.TYPES)
    assert ft.flat_tensor_layout().tables == parsed.tables
    assert ft.flat_tensor_layout().root == "FlatTensor" and ft.flat_tensor_layout().types is ft.TYPES


def test_header_and_segments_as_executorch_lays_them_out():
    data = _e1()
    assert data[4:8] == b"FT01" and data[8:12] == b"FH01"
    length, fb_offset, fb_size, base, size = struct.unpack_from("<IQQQQ", data, 12)
    assert (length, fb_offset) == (40, 48)
    assert base % 128 == 0 and base >= fb_offset + fb_size and base + size == len(data)
    table, _ = read_ptd(data)
    assert [s.offset % 128 for s in table.segments] == [0, 0]
    assert [n.key for n in table.named_data] == ["lin.bias", "lin.weight"]


def test_entries_are_zero_copy_views_with_their_layouts():
    f = data_file(_e1())
    assert np.array_equal(np.frombuffer(f.entries["lin.weight"].data, np.float32), WEIGHT)
    assert list(f.entries["lin.weight"].layout.sizes) == [3, 2]
    assert f.entries["lin.weight"].data.obj is not None  # a view, not a copy


def test_same_entries_same_bytes_and_equal_blobs_stored_once():
    a = write_ptd({"a": (b"x" * 64, None), "b": (b"x" * 64, None)})
    b = write_ptd({"b": (b"x" * 64, None), "a": (b"x" * 64, None)})
    assert a == b
    table, _ = read_ptd(a)
    assert len(table.segments) == 1 and {n.segment_index for n in table.named_data} == {0}


def _patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d[:40], "too short"),
    (lambda d: d[:4] + b"FT02" + d[8:], "identifier is b'FT02'"),
    (lambda d: d[:8] + b"FH02" + d[12:], "header magic is b'FH02'"),
    (lambda d: _patched(d, 12, "<I", 32), "header length 32 is below 40"),
    (lambda d: _patched(d, 24, "<Q", 1 << 40), "flatbuffer_offset"),
    (lambda d: _patched(d, 40, "<Q", 1 << 40), "do not fit"),
    (lambda d: d[:-1], "do not fit"),
])
def test_malformed_headers_are_typed_errors(edit, message):
    with pytest.raises(InvalidData, match=message):
        data_file(edit(_e1()))


def _rewrite(table: ft.FlatTensor, payload: bytes) -> bytes:
    """A `.ptd` of `table` (edited at will) followed by `payload` as its segment data."""
    flat = encode(table, load_schema(SCHEMA_DIR / "flat_tensor.fbs"))
    base = round_up(INSERTED_LENGTH + len(flat), 128)
    header = struct.pack("<4sIQQQQ", b"FH01", 40, INSERTED_LENGTH, len(flat), base, len(payload))
    root = struct.unpack_from("<I", flat, 0)[0] + INSERTED_LENGTH
    body = struct.pack("<I", root) + flat[4:8] + header + bytes(INSERTED_LENGTH - len(header)) + flat[8:]
    return body + bytes(base - len(body)) + payload


def _payload(data: bytes) -> bytes:
    _, header = read_ptd(data)
    return data[header.segment_base_offset:]


def test_a_newer_version_is_refused():
    table, _ = read_ptd(_e1())
    table.version = 1
    with pytest.raises(InvalidData, match="version 1 is newer than this runtime reads"):
        data_file(_rewrite(table, _payload(_e1())))


def test_a_segment_past_the_data_and_a_key_without_segment_are_refused():
    table, _ = read_ptd(_e1())
    table.segments[1].size = 1 << 20
    with pytest.raises(InvalidData, match="runs past"):
        data_file(_rewrite(table, _payload(_e1())))
    table, _ = read_ptd(_e1())
    table.named_data[0].segment_index = 7
    with pytest.raises(InvalidData, match="segment 7 does not exist"):
        data_file(_rewrite(table, _payload(_e1())))


def test_files_are_mapped_and_checked(tmp_path):
    path = tmp_path / "w.ptd"
    path.write_bytes(_e1())
    assert set(load_data_file(path).entries) == {"lin.weight", "lin.bias"}
    with pytest.raises(InvalidData, match="cannot read"):
        load_data_file(tmp_path / "missing.ptd")
    (tmp_path / "empty.ptd").write_bytes(b"")
    with pytest.raises(InvalidData, match="empty"):
        load_data_file(tmp_path / "empty.ptd")


def _tensor(key: str, scalar_type: int, sizes: list[int]) -> fb.Tensor:
    info = fb.ExtraTensorInfo(fully_qualified_name=key, location=fb.TensorDataLocation.EXTERNAL)
    return fb.Tensor(scalar_type=scalar_type, sizes=sizes, dim_order=bytes(range(len(sizes))), extra_tensor_info=info)


def test_constants_are_checked_against_their_entry():
    lookup = NamedData({}, [data_file(_e1(), "w.ptd")])
    view = lookup.constant(_tensor("lin.weight", fb.ScalarType.FLOAT, [3, 2]), 24, "value 0")
    assert np.array_equal(np.frombuffer(view, np.float32), WEIGHT)
    with pytest.raises(InvalidData, match=r"key 'lin.weight' in w.ptd: sizes \[3, 2\], the program expects \[2, 3\]"):
        lookup.constant(_tensor("lin.weight", fb.ScalarType.FLOAT, [2, 3]), 24, "value 0")
    with pytest.raises(InvalidData, match="key 'lin.weight' in w.ptd: scalar type 6, the program expects 3"):
        lookup.constant(_tensor("lin.weight", fb.ScalarType.INT, [3, 2]), 24, "value 0")
    with pytest.raises(InvalidData, match="key 'lin.gone' is neither in the program nor in its data files"):
        lookup.constant(_tensor("lin.gone", fb.ScalarType.FLOAT, [3]), 12, "value 0")


def test_a_short_entry_is_refused_though_executorch_reads_past_it():
    short = write_ptd({"lin.weight": (WEIGHT.tobytes()[:8], ft.TensorLayout(fb.ScalarType.FLOAT, [3, 2], b"\x00\x01"))})
    lookup = NamedData({}, [data_file(short, "w.ptd")])
    with pytest.raises(InvalidData, match="holds 8 bytes, the tensor needs 24"):
        lookup.constant(_tensor("lin.weight", fb.ScalarType.FLOAT, [3, 2]), 24, "value 0")


def test_the_program_first_then_the_files_and_no_key_twice():
    base = DataFile("base.ptd", data_file(write_ptd({"a": (b"AAAA", None)})).entries)
    adapter = DataFile("adapter.ptd", data_file(write_ptd({"b": (b"BBBB", None)})).entries)
    lookup = NamedData({"c": memoryview(b"CCCC")}, [base, adapter])
    assert {k: bytes(lookup[k]) for k in lookup} == {"c": b"CCCC", "a": b"AAAA", "b": b"BBBB"}
    with pytest.raises(InvalidData, match="key 'a' is in two data files: base.ptd and again.ptd"):
        NamedData({}, [base, DataFile("again.ptd", base.entries)])
    with pytest.raises(InvalidData, match="key 'a' is in the program and in base.ptd with other bytes"):
        NamedData({"a": memoryview(b"ZZZZ")}, [base])
    assert bytes(NamedData({"a": memoryview(b"AAAA")}, [base])["a"]) == b"AAAA"
