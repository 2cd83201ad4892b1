"""etbuild.release.wheel: a runtime's files as a reproducible wheel."""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile

from etbuild.release.wheel import REQUIRES, installed_bytes, normalized, runtime_wheel, wheel_filename

FILES = {"etbuild/__init__.py": b"", "etbuild/runtime/x.py": b"X = 1\n"}


def test_names_are_normalized_as_wheel_files_spell_them() -> None:
    assert normalized("Example.Runtime--all") == "example_runtime_all"
    assert wheel_filename("example-all", "0.1.0") == "example_all-0.1.0-py3-none-any.whl"


def test_a_wheel_holds_the_files_metadata_and_a_record_of_their_hashes() -> None:
    data = runtime_wheel(FILES, "example-all", "0.1.0", "a runtime", epoch=1_700_000_000)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = zf.namelist()
        info = "example_all-0.1.0.dist-info"
        assert names == [*FILES, f"{info}/METADATA", f"{info}/WHEEL", f"{info}/RECORD"]
        metadata = zf.read(f"{info}/METADATA").decode()
        record = zf.read(f"{info}/RECORD").decode().splitlines()
        assert zf.getinfo("etbuild/runtime/x.py").date_time == (2023, 11, 14, 22, 13, 20)
    assert "Name: example-all\nVersion: 0.1.0\nSummary: a runtime\n" in metadata
    assert all(f"Requires-Dist: {r}\n" in metadata for r in REQUIRES)
    digest = base64.urlsafe_b64encode(hashlib.sha256(b"X = 1\n").digest()).rstrip(b"=").decode()
    assert f"etbuild/runtime/x.py,sha256={digest},6" in record
    assert record[-1] == f"{info}/RECORD,,"


def test_a_wheel_is_the_same_bytes_every_time_and_dates_start_in_1980() -> None:
    first = runtime_wheel(dict(reversed(FILES.items())), "r", "1", "s", epoch=0)
    assert first == runtime_wheel(FILES, "r", "1", "s", epoch=0)  # order of the mapping does not matter
    with zipfile.ZipFile(io.BytesIO(first)) as zf:
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}


def test_installed_bytes_count_the_files_only() -> None:
    assert installed_bytes(FILES) == 6
