"""Atomic file output: write to a temporary name beside the target, then rename.

Temporary names carry `TEMP_MARK` (`.mlp.etbuild-tmp-1a2b3c4d.pte`, and directories the same
way), so a build killed mid-write leaves only names that `leftover_temporaries` recognises and
the next build removes. Files are created with mode 0666 and directories 0777 less the umask,
as `open` and `mkdir` create them.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TEMP_MARK = ".etbuild-tmp-"
CHUNK = 1 << 20


def temp_name(path: Path) -> Path:
    """A fresh temporary name beside `path`: hidden, marked with TEMP_MARK, same suffix (tools check it)."""
    return path.parent / f".{path.stem}{TEMP_MARK}{secrets.token_hex(4)}{path.suffix}"


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write; it replaces `path` only if the block finishes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))  # the umask applies
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """A temporary directory to fill; it replaces the directory `path` only if the block finishes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    tmp.mkdir()
    try:
        yield tmp
        old = temp_name(path)
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write bytes atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_json(path: str | Path, obj: Any) -> None:
    """Write indented, key-sorted JSON atomically (deterministic bytes)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def leftover_temporaries(root: str | Path) -> list[Path]:
    """Temporary files and directories under `root` that an interrupted write left, sorted."""
    found: list[Path] = []
    for top, dirs, files in os.walk(root):
        for name in [*files, *dirs]:
            if TEMP_MARK in name:
                found.append(Path(top) / name)
        dirs[:] = [d for d in dirs if TEMP_MARK not in d]
    return sorted(found)


def remove(path: Path) -> None:
    """Remove a file or a directory tree."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
