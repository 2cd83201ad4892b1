"""Atomic file output: write to a temporary name beside the target, then rename."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write; it replaces `path` only if the block finishes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write bytes atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_json(path: str | Path, obj: Any) -> None:
    """Write indented, key-sorted JSON atomically (deterministic bytes)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
