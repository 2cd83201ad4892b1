"""ExportedPrograms passed from the stage that saves them to the stage that loads them next, in one process
(export to quantize or to lower).

`save(ep, path)` writes a `.pt2` (atomically) and keeps the object; `load(path)` in the same
process hands the object back instead of reading the file again (`torch.export.load` rebuilds the
graph from its serialized form: about 0.3 s for a ResNet-18, more on a first load), once:
the entry is taken out when handed over, since the taker may change it, and only while the file is
the one written (same size, modification time and inode). Anywhere else (a `-n` worker, a Dask
worker, a stage restored from the cache, a second load) `load` reads the file. The export stage
calls `clear()` first, so a build of many recipes holds at most one recipe's programs.

Lowering an ExportedProgram in memory or after its round trip gives the same program (every
`.pte` of the recipes folder compared, docs/build-speed.md); the source frames `lowered.unplanned`
keeps may number fx's generated code (`<eval_with_key>.N`) differently, as N counts the graph
modules the process made before.

Every file written here loads in a fresh process: `write` records in the archive (extra file
`OP_LIBRARIES`) the registrars of the operator libraries its graphs call (`etbuild.stages.op_libraries`:
`llama::` for `llm.attention: custom`, `quantized_decomposed::`, a model's own), and `read` runs them
before `torch.export.load`. A file that still does not load is a StageError naming it.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import torch
from torch.export import ExportedProgram

from etbuild.errors import StageError
from etbuild.fsutil import atomic_path
from etbuild.stages import op_libraries

OP_LIBRARIES = "etbuild-op-libraries.json"
"""The archive's extra file that maps operator namespaces to their registrars."""

_KEPT: dict[Path, tuple[tuple[int, int, int], ExportedProgram]] = {}


def _stamp(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ino


def clear() -> None:
    """Forget every program kept."""
    _KEPT.clear()


def save(ep: ExportedProgram, path: Path) -> None:
    """Write the program to `path` (`write`), and keep it for `load`."""
    write(ep, path)
    _KEPT[path.resolve()] = (_stamp(path), ep)


def load(path: Path) -> ExportedProgram:
    """The program `save` wrote to `path` in this process, if the file is still that one; else the file's."""
    kept = _KEPT.pop(path.resolve(), None)
    if kept is not None and kept[0] == _stamp(path):
        return kept[1]
    return read(path)


def write(ep: ExportedProgram, path: Path) -> None:
    """`torch.export.save` to `path` atomically, with the registrars of the operator libraries `ep` calls."""
    extra = {OP_LIBRARIES: json.dumps(op_libraries.registrars(ep), sort_keys=True)}
    with atomic_path(path) as tmp:
        torch.export.save(ep, str(tmp), extra_files=extra)


def read(path: Path) -> ExportedProgram:
    """`torch.export.load` of `path` after registering the operator libraries it records."""
    op_libraries.register(recorded_libraries(path))
    try:
        return torch.export.load(str(path))
    except (RuntimeError, KeyError, AttributeError) as exc:  # torch's deserializer raises these for unknown ops
        raise StageError(f"{path}: cannot load the saved program in this process: {type(exc).__name__}: {exc} "
                         "(an operator library it calls may not be registered)") from exc


def recorded_libraries(path: Path) -> dict[str, str]:
    """Namespace → registrar, as `write` recorded them in the archive at `path` (empty for other files)."""
    with zipfile.ZipFile(path) as archive:
        names = [name for name in archive.namelist() if name.endswith(f"/extra/{OP_LIBRARIES}")]
        return json.loads(archive.read(names[0])) if names else {}
