"""Weights apart from programs: `.ptd` data files, mapped read-only, and the one key lookup.

    program = Program.load("llm.pte", data=["llm-base.ptd"])

A program refers to its data by key only: a constant tensor whose `extra_tensor_info.location`
is EXTERNAL names its key in `fully_qualified_name`; a delegate asks for its named data by key.
Both go through one lookup, `NamedData`: the program's own named data first, then the data
files in the order given. A key in two data files is an error (the choice would be arbitrary),
and so is a key the program holds with other bytes than a data file (ExecuTorch's runtime
would take the file's). A constant's entry must carry a tensor layout equal to the program's
tensor (type, sizes, dim order) and exactly its bytes; ExecuTorch's runtime does not check
the bytes.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etbuild.errors import InvalidData
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.ptd import Entry, entries, read_ptd


@dataclass(frozen=True)
class DataFile:
    """One loaded `.ptd`: its source and its entries (views of the mapped file, zero copy)."""

    source: str
    entries: Mapping[str, Entry]


def load_data_file(path: str | Path) -> DataFile:
    """Memory-map (read-only) and check a `.ptd` file."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            if path.stat().st_size == 0:
                raise InvalidData(f"{path}: file is empty")
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise InvalidData(f"{path}: cannot read the data file ({exc.strerror})") from None
    return data_file(data, str(path))


def data_file(data: Any, source: str = "<bytes>") -> DataFile:
    """A `.ptd` already in memory (bytes or a mapping), checked."""
    try:
        table, header = read_ptd(data)
        return DataFile(source, entries(data, table, header))
    except InvalidData as exc:
        raise InvalidData(f"{source}: {exc}") from None


def merged(files: Sequence[DataFile]) -> dict[str, tuple[DataFile, Entry]]:
    """Every key of the files; a key in two files is an error naming both."""
    out: dict[str, tuple[DataFile, Entry]] = {}
    for f in files:
        for key, entry in f.entries.items():
            if key in out:
                raise InvalidData(f"key {key!r} is in two data files: {out[key][0].source} and {f.source}")
            out[key] = (f, entry)
    return out


class NamedData(Mapping[str, memoryview]):
    """The one key lookup: the program's named data first, then the data files' entries."""

    def __init__(self, program_named: Mapping[str, memoryview], files: Sequence[DataFile]) -> None:
        self.own = program_named
        self.files = merged(files)
        self.sources = [f.source for f in files]
        for key, data in self.own.items():
            if key in self.files and bytes(self.files[key][1].data) != bytes(data):
                raise InvalidData(
                    f"key {key!r} is in the program and in {self.files[key][0].source} with other bytes"
                )

    def __getitem__(self, key: str) -> memoryview:
        if key in self.own:
            return self.own[key]
        if key in self.files:
            return self.files[key][1].data
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        yield from self.own
        yield from (k for k in self.files if k not in self.own)

    def __len__(self) -> int:
        return len(self.own) + sum(1 for k in self.files if k not in self.own)

    def missing(self, key: str, where: str) -> InvalidData:
        """The error for a key found nowhere."""
        listed = ", ".join(self.sources) or "none were given"
        return InvalidData(f"{where}: key {key!r} is neither in the program nor in its data files ({listed})")

    def constant(self, t: fb.Tensor, nbytes: int, where: str) -> memoryview:
        """The bytes of an EXTERNAL constant tensor, checked against its entry's layout and size."""
        key = t.extra_tensor_info.fully_qualified_name if t.extra_tensor_info else None
        if not key:
            raise InvalidData(f"{where}: an external tensor without a key (fully_qualified_name)")
        if key not in self.files:
            raise self.missing(key, f"{where} (external constant)")
        source, entry = self.files[key][0].source, self.files[key][1]
        layout = entry.layout
        if layout is None:
            raise InvalidData(f"{where}: key {key!r} in {source} has no tensor layout; a constant needs one")
        want = (t.scalar_type, list(t.sizes), bytes(t.dim_order))
        got = (layout.scalar_type, list(layout.sizes), bytes(layout.dim_order))
        for name, w, g in zip(("scalar type", "sizes", "dim order"), want, got):
            if w != g:
                raise InvalidData(
                    f"{where}: key {key!r} in {source}: {name} {_show(g)}, the program expects {_show(w)}"
                )
        if len(entry.data) != nbytes:
            raise InvalidData(
                f"{where}: key {key!r} in {source} holds {len(entry.data)} bytes, the tensor needs {nbytes}"
            )
        return entry.data


def _show(value: Any) -> str:
    return str(list(value)) if isinstance(value, bytes) else str(value)


def is_external(t: fb.Tensor) -> bool:
    """A tensor whose bytes live in a data file, by key."""
    info = t.extra_tensor_info
    return info is not None and info.location == fb.TensorDataLocation.EXTERNAL
