"""A build tree's own state, safe under faults: doit's records, the tree lock, leftovers.

- `CommittedSqliteDB`: doit's sqlite3 backend, committing each task's record as soon as doit
  saves it (doit's own sqlite3 backend commits only when a run ends, so a killed build would
  forget every task it finished). A build killed at any moment resumes with what is left.
- `check_state`: a state file that is not a readable database (torn, or overwritten) is
  discarded before doit opens it, with a note saying so; every stage then re-checks its
  outputs (and re-runs, fetching from a shared cache when one is given).
- `tree_lock`: one build at a time per build tree. A second build waits (saying for whom),
  then finds the first one's records and reruns only what is out of date.
- `remove_leftovers`: temporary files of writes cut short by a kill, removed under the lock.
- `MD5Checker`: doit's file checker, hashing each unchanged file once per build process.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from doit import dependency
from doit.dependency import SqliteDB

from etbuild.fsutil import leftover_temporaries, remove

STATE_FILE = ".doit.sqlite3"
LOCK_FILE = ".lock"
BACKEND = "etbuild-sqlite3"
DOIT_PLUGINS = {"BACKEND": {BACKEND: "etbuild.build.state:CommittedSqliteDB"}}
Say = Callable[[str], None]


class CommittedSqliteDB(SqliteDB):
    """doit's sqlite3 backend, committing each task's record in one transaction when saved.

    doit's `Dependency.save_success` writes a task's record key by key and ends with `deps:`;
    that last write commits the task's row.
    """

    desc = "sqlite3, one transaction per finished task"

    def set(self, task_id: str, dependency: str, value: Any) -> None:
        super().set(task_id, dependency, value)
        if dependency == "deps:":
            self._commit()

    def remove(self, task_id: str) -> None:
        super().remove(task_id)
        self._conn.commit()

    def _commit(self) -> None:
        for task_id in sorted(self._dirty):
            row = (task_id, self.codec.encode(self._cache[task_id]))
            self._conn.execute("insert or replace into doit values (?,?)", row)
        self._conn.commit()
        self._dirty = set()


class MD5Checker(dependency.MD5Checker):
    """doit's MD5 checker, hashing each file once per process while it is unchanged.

    doit hashes a task's file dependencies when it records the task: a model's `.pt2`, lowered
    program and `.pte` (43 MB each for a ResNet-18) are dependencies of two or three stages each,
    so a build hashed each two or three times. A digest is reused while the file's path, size,
    modification time and inode are those it was computed for. The records are doit's own (same
    state, and the same class name, which doit records per task and compares on the next build).
    """

    def __init__(self) -> None:
        self._digests: dict[tuple[str, int, int, int], str] = {}

    def get_state(self, dep: str, current_state: Any) -> Any:
        st = os.stat(dep)
        if current_state and current_state[0] == st.st_mtime:
            return None  # doit's shortcut: recorded with this timestamp already
        key = (os.path.abspath(dep), st.st_size, st.st_mtime_ns, st.st_ino)
        if key not in self._digests:
            self._digests[key] = dependency.get_file_md5(dep)
        return st.st_mtime, st.st_size, self._digests[key]


def check_state(path: Path) -> str | None:
    """Discard a state file that is not a readable doit database; the note to print, or None."""
    if not path.exists():
        return None
    try:
        _read_all(path)
        return None
    except (sqlite3.DatabaseError, ValueError) as exc:
        reason = str(exc)
    for stale in (path, path.with_name(path.name + "-journal"), path.with_name(path.name + "-wal")):
        stale.unlink(missing_ok=True)
    return (f"the build state {path} was unreadable ({reason}): discarded; "
            "every stage checks its outputs again")


def _read_all(path: Path) -> None:
    """Open the database and decode every record (raises what a torn or foreign file raises)."""
    conn = sqlite3.connect(path)
    try:
        (check,) = conn.execute("pragma quick_check").fetchone()
        if check != "ok":
            raise sqlite3.DatabaseError(check)
        tables = {name for (name,) in conn.execute("select name from sqlite_master where type='table'")}
        if "doit" in tables:
            for (data,) in conn.execute("select task_data from doit"):
                json.loads(data)
    finally:
        conn.close()


@contextmanager
def tree_lock(root: Path, say: Say) -> Iterator[None]:
    """Hold the build tree's lock (waiting, and saying so, while another build holds it)."""
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            say(f"waiting for another build of {root} (pid {holder}) to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock; so does the process dying


def remove_leftovers(root: Path, say: Say) -> list[Path]:
    """Remove the temporary files an interrupted build left under `root` (hold the lock)."""
    found = leftover_temporaries(root)
    for path in found:
        remove(path)
    if found:
        shown = ", ".join(str(p.relative_to(root)) for p in found[:5]) + (" …" if len(found) > 5 else "")
        say(f"removed {len(found)} temporary file(s) an interrupted build left in {root}: {shown}")
    return found


@contextmanager
def prepared_tree(root: Path, say: Say) -> Iterator[Path]:
    """The build tree locked, cleaned of leftovers, with a readable state file path to give doit."""
    with tree_lock(root, say):
        remove_leftovers(root, say)
        note = check_state(root / STATE_FILE)
        if note:
            say(note)
        yield root / STATE_FILE
