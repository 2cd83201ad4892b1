"""Atomic writes: the umask applies, temporary names are recognisable, nothing half-written stays."""

from __future__ import annotations

import os
import stat

import pytest

from etbuild.fsutil import atomic_dir, atomic_path, leftover_temporaries, sha256_file, temp_name, write_bytes


@pytest.fixture
def umask():
    def set_umask(mask: int) -> None:
        os.umask(mask)

    old = os.umask(0o022)
    yield set_umask
    os.umask(old)


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_and_dirs_honour_the_umask(tmp_path, umask, mask, mode):
    umask(mask)
    write_bytes(tmp_path / "a" / "x.bin", b"x")
    assert stat.S_IMODE((tmp_path / "a" / "x.bin").stat().st_mode) == mode
    with atomic_dir(tmp_path / "tree") as tmp:
        (tmp / "f").write_text("f")
    assert stat.S_IMODE((tmp_path / "tree").stat().st_mode) == mode | ((mode & 0o444) >> 2)  # r -> x for dirs


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "x.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert target.read_text() == "old" and leftover_temporaries(tmp_path) == []


def test_atomic_dir_replaces_a_tree_whole(tmp_path):
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "stale").write_text("s")
    with atomic_dir(tmp_path / "tree") as tmp:
        (tmp / "new").write_text("n")
    assert [p.name for p in (tmp_path / "tree").iterdir()] == ["new"]
    assert leftover_temporaries(tmp_path) == []


def test_leftover_temporaries_are_the_marked_names_only(tmp_path):
    file, folder = temp_name(tmp_path / "a.pte"), temp_name(tmp_path / "sub" / "etbuild")
    file.write_bytes(b"")
    folder.mkdir(parents=True)
    (folder / "inner.py").write_text("")
    (tmp_path / ".hidden").write_text("")
    assert leftover_temporaries(tmp_path) == sorted([file, folder])


def test_sha256_file(tmp_path):
    path = tmp_path / "x"
    path.write_bytes(b"abc")
    assert sha256_file(path) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
