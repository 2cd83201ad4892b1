"""What a program's delegates need of the memory hierarchy, from their backends (`delegate_memory`).

Each backend whose registry entry names a `memory` module (`BACKENDS[name].memory`, torch-free, exposing
`delegate_memory(blob, compile_specs, named_data) -> DelegateMemory | None`) says, per delegate,
the working memory it takes from the fastest level (an NPU's scratch in SRAM, outside the planned
arenas: ExecuTorch's runtime takes it from the temp allocator on every call) and the bytes it reads in
place. `memory.json` lists them; `check_fastest_level` holds the fastest level's bytes against the
CPU's planned arenas there plus the largest delegate's working memory (they never run at once).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from etbuild.errors import RecipeError
from etbuild.runtime.backend_registry import BACKENDS
from etbuild.runtime.delegates import named_data, processed_blob
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import ExtendedHeader


@dataclass(frozen=True)
class DelegateMemory:
    """One delegate's needs beyond the CPU's planned arenas: `fast_bytes` of working memory in the fastest
    level (an NPU's scratch arena in SRAM), `read_only_bytes` read in place from flash or DRAM (command
    stream, weights), and the backend's own estimate (`details`: e.g. Vela's cycles and MACs)."""

    fast_bytes: int
    read_only_bytes: int
    details: Mapping[str, Any] = field(default_factory=dict)


def delegate_reports(data: Any, program: fb.Program, header: ExtendedHeader | None) -> list[dict[str, Any]]:
    """One record per delegate whose backend reports its memory: method, index, backend and its numbers."""
    by_id = {b.id: name for name, b in BACKENDS.items() if b.memory}
    named = named_data(data, program, header) if program.named_data else {}
    found = []
    for plan in program.execution_plan:
        for k, d in enumerate(plan.delegates):
            if d.id not in by_id:
                continue
            hook = importlib.import_module(BACKENDS[by_id[d.id]].memory).delegate_memory
            blob = processed_blob(data, program, header, d.processed, f"delegate {k} ({d.id})")
            specs = {s.key: bytes(s.value) for s in d.compile_specs}
            report = hook(blob, specs, named)
            if report is not None:
                found.append({"method": plan.name, "delegate": k, "backend": by_id[d.id],
                              "fast_bytes": report.fast_bytes, "read_only_bytes": report.read_only_bytes,
                              **dict(report.details)})
    return found


def check_fastest_level(levels: Sequence[Any], cpu_bytes: int, reports: Sequence[dict[str, Any]]) -> None:
    """RecipeError when the fastest level cannot hold its planned CPU bytes and the largest delegate's
    working memory together."""
    if not levels or levels[0].bytes is None or not reports:
        return
    worst = max(reports, key=lambda r: r["fast_bytes"])
    if cpu_bytes + worst["fast_bytes"] > levels[0].bytes:
        raise RecipeError(
            f"memory.levels[0].bytes: level {levels[0].name} holds {levels[0].bytes} bytes, but the CPU's arenas "
            f"planned there take {cpu_bytes} and {worst['backend']} delegate {worst['delegate']} of method "
            f"{worst['method']} needs {worst['fast_bytes']} more for its working memory "
            f"({cpu_bytes + worst['fast_bytes']} in all)")
