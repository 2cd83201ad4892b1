"""Runtime size accounting: bytes of the files a runtime ships.

The full runtime is what ships without selective build: `etbuild/__init__.py`,
`errors.py`, every module of `etbuild.runtime`, `etbuild.kernels` and `etbuild.backends`,
and `schema/__init__.py` with `program.fbs` (which the full runtime parses at load).
A trimmed runtime is the tree `generate_runtime` writes. Both count source bytes on disk;
bytecode caches are left out.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path

from etbuild.errors import InternalError

CODE_PACKAGES = ("etbuild.runtime", "etbuild.kernels", "etbuild.backends")
SCHEMA_FILES = ("__init__.py", "program.fbs")


def runtime_size(paths: Iterable[str | Path]) -> int:
    """Total bytes of the files at paths; a directory counts every file under it."""
    return sum(f.stat().st_size for f in _files(paths))


def full_runtime_files() -> list[Path]:
    """The files of the full runtime (see the module docstring), sorted."""
    package = _package_dir("etbuild")
    files = [package / "__init__.py", package / "errors.py"]
    for name in CODE_PACKAGES:
        files.extend(_package_dir(name).rglob("*.py"))
    schema = _package_dir("etbuild.schema")
    files.extend(schema / f for f in SCHEMA_FILES)
    return sorted(f for f in files if "__pycache__" not in f.parts)


def full_runtime_bytes() -> int:
    """Bytes of the full runtime: core + every kernel module + backends."""
    return runtime_size(full_runtime_files())


def _files(paths: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
        else:
            out.append(p)
    return out


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise InternalError(f"cannot locate package {name}")
    return Path(next(iter(spec.submodule_search_locations)))
