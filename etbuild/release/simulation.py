"""Named data that only a simulation reads, dropped from a release's programs or kept in them.

An Ethos-U delegate's TOSA graph travels in the program's named data so that etbuild's runtime can run the
delegate without an NPU (backends/ethos_u/runtime). No device reads it, yet it sits in flash with the
program: about one more copy of the weights. A backend says which of a delegate's keys are such through
`simulation_keys(blob)` in its memory module (`BACKENDS[name].memory`, torch-free).

A release drops them by default (`simulation_data: drop`): the shipped `.pte` holds only what a device
reads, and the graphs go to `<build>/release/<release>/simulation/<product>.ptd`, never shipped, with
which the release verifies and times the product on its runtimes. `keep` ships the `.pte` as built.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etbuild.fsutil import write_bytes
from etbuild.lowering.external_weights import separate
from etbuild.release.config import Product
from etbuild.runtime.backend_registry import BACKENDS
from etbuild.runtime.delegates import processed_blob
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.ptd import write_ptd
from etbuild.runtime.format.pte import ExtendedHeader, read_program, segment_bytes, write_program


@dataclass(frozen=True)
class Split:
    """A program without its simulation data, and that data as a `.ptd` (None when it had none)."""

    pte: bytes
    ptd: bytes | None
    keys: tuple[str, ...]
    dropped_bytes: int


def simulation_keys(data: bytes, program: fb.Program, header: ExtendedHeader | None) -> list[str]:
    """The program's named-data keys that only a simulation reads, in delegate order."""
    hooks = {b.id: importlib.import_module(b.memory) for b in BACKENDS.values() if b.memory}
    keys: list[str] = []
    for plan in program.execution_plan:
        for k, d in enumerate(plan.delegates):
            hook = getattr(hooks.get(d.id), "simulation_keys", None)
            if hook is not None:
                blob = processed_blob(data, program, header, d.processed, f"delegate {k} ({d.id})")
                keys += [key for key in hook(blob) if key not in keys]
    present = {item.key for item in program.named_data}
    return [key for key in keys if key in present]


def simulation_bytes(data: bytes) -> int:
    """The bytes of named data in a `.pte` that only a simulation reads."""
    program, header = read_program(data)
    keys = set(simulation_keys(data, program, header))
    return sum(len(segment_bytes(data, program, header, item.segment_index))
               for item in program.named_data if item.key in keys)


def split_simulation(data: bytes) -> Split:
    """The `.pte` `data` without its simulation data, and that data as a `.ptd` for development runs."""
    program, header = read_program(data)
    keys = simulation_keys(data, program, header)
    if not keys:
        return Split(data, None, (), 0)
    segments = [bytes(segment_bytes(data, program, header, i)) for i in range(len(program.segments))]
    separated = separate(program, segments, {}, only=keys)
    dropped = sum(len(blob) for blob, _ in separated.entries.values())
    return Split(write_program(separated.program, separated.segments), write_ptd(separated.entries), tuple(keys),
                 dropped)


def drops_simulation(p: Product, built: Path) -> bool:
    """Whether the release drops simulation data from the product's built `.pte` (its runtimes then need the
    EXTERNAL_DATA feature, to verify and time it with the development `.ptd`)."""
    return not p.keep_simulation and simulation_bytes(built.read_bytes()) > 0


def development_file(build_root: Path, release: str, product: str) -> Path:
    """Where a release keeps the simulation data it dropped from a product (never shipped)."""
    return build_root / "release" / release / "simulation" / f"{product}.ptd"


def ship_program(p: Product, built: Path, shipped: Path, development: Path) -> dict[str, Any]:
    """Write the product's `.pte` to `shipped`, without its simulation data unless the product keeps it, and
    the dropped data to `development`; release.json's entry on it (empty when the program has none)."""
    data = built.read_bytes()
    split = Split(data, None, (), 0) if p.keep_simulation else split_simulation(data)
    write_bytes(shipped, split.pte)
    if split.ptd is not None:
        write_bytes(development, split.ptd)
    elif development.exists():
        development.unlink()
    kept = simulation_bytes(split.pte)
    if not kept and not split.dropped_bytes:
        return {}
    return {"simulation_data": {"kept_bytes": kept, "dropped_bytes": split.dropped_bytes}}
