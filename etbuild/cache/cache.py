"""A content-addressed cache of stage outputs over a Store.

Two kinds of names: `cas/<d[:2]>/<d>` holds bytes whose sha256 is `d`; `ac/<key>.json` holds
an action entry, the outputs of the stage run with that key (relative path -> sha256, plus the
directories restored whole). Both are written once, after the stage's own checks passed and
every output it declares exists. Every blob is checked against its digest on read: a missing
or altered blob, or an entry that does not parse, is a `CorruptEntry`; the caller discards it
(`discard` deletes the entry and the bad blob, so the rebuilt outputs can be written again)
and rebuilds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from etbuild.cache.keys import canonical, sha256
from etbuild.cache.store import Store
from etbuild.errors import InternalError
from etbuild.fsutil import atomic_dir, write_bytes

ENTRY_SCHEMA = 1


class CorruptEntry(Exception):
    """A cache entry or blob that fails its checks; `blob` names the bad blob, if one is."""

    def __init__(self, message: str, blob: str | None = None) -> None:
        super().__init__(message)
        self.blob = blob


@dataclass(frozen=True)
class Entry:
    """The outputs of one stage run: files (relative path -> sha256) and directories among them."""

    stage: str
    files: dict[str, str]
    dirs: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"schema": ENTRY_SCHEMA, "stage": self.stage, "files": self.files, "dirs": list(self.dirs)}


def blob_name(digest: str) -> str:
    return f"cas/{digest[:2]}/{digest}"


def entry_name(key: str) -> str:
    return f"ac/{key}.json"


class Cache:
    """Stage outputs by key, file bytes by digest."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @property
    def url(self) -> str:
        return self.store.url

    def put_blob(self, data: bytes) -> str:
        """Store bytes by their sha256 (once); the digest."""
        digest = sha256(data)
        self.store.put_once(blob_name(digest), data)
        return digest

    def get_blob(self, digest: str) -> bytes:
        """The bytes of `digest`, checked; CorruptEntry when missing or altered."""
        data = self.store.get(blob_name(digest))
        if data is None:
            raise CorruptEntry(f"blob {digest} is missing", blob_name(digest))
        if sha256(data) != digest:
            raise CorruptEntry(f"blob {digest} holds bytes with sha256 {sha256(data)}", blob_name(digest))
        return data

    def lookup(self, key: str) -> Entry | None:
        """The entry of `key`, or None; CorruptEntry when it does not parse."""
        raw = self.store.get(entry_name(key))
        if raw is None:
            return None
        try:
            doc = json.loads(raw)
            if doc.get("schema") != ENTRY_SCHEMA:
                raise ValueError(f"schema {doc.get('schema')!r}, expected {ENTRY_SCHEMA}")
            return Entry(str(doc["stage"]), {str(k): str(v) for k, v in doc["files"].items()}, tuple(doc["dirs"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptEntry(f"entry {key} does not parse: {exc}") from None

    def restore(self, key: str, root: Path) -> Entry | None:
        """Write the outputs of `key` under `root` (all blobs checked first); None on a miss."""
        entry = self.lookup(key)
        if entry is None:
            return None
        blobs = {rel: self.get_blob(digest) for rel, digest in entry.files.items()}
        for directory in entry.dirs:
            with atomic_dir(root / directory) as tmp:
                for rel, data in blobs.items():
                    if rel.startswith(directory + "/"):
                        target = tmp / rel[len(directory) + 1:]
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(data)
        for rel, data in blobs.items():
            if not any(rel.startswith(d + "/") for d in entry.dirs):
                write_bytes(root / rel, data)
        return entry

    def save(self, key: str, stage: str, root: Path, outputs: Iterable[Path]) -> Entry:
        """Store the outputs (files, or directories taken whole) under `key`; each must exist."""
        files: dict[str, str] = {}
        dirs = []
        for out in outputs:
            if out.is_dir():
                dirs.append(out.relative_to(root).as_posix())
                paths = sorted(p for p in out.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
            elif out.is_file():
                paths = [out]
            else:
                raise InternalError(f"{stage} finished without writing {out}; nothing was cached")
            for path in paths:
                files[path.relative_to(root).as_posix()] = self.put_blob(path.read_bytes())
        entry = Entry(stage, files, tuple(dirs))
        self.store.put_once(entry_name(key), canonical(entry.to_json()))
        return entry

    def discard(self, key: str, error: CorruptEntry) -> None:
        """Delete the entry of `key` and the blob the error names, so a rebuild can store them anew."""
        self.store.delete(entry_name(key))
        if error.blob:
            self.store.delete(error.blob)
