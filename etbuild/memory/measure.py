"""The memory table of any `.pte` (ours or ExecuTorch's), for `etbuild inspect --memory`.

Per method and memory id: the planned bytes the file declares (`non_const_buffer_sizes`),
the lower bound recomputed from the program's own tensor lifetimes (peak live bytes), and
the tensor count. Level names come from `memory.json` beside the file when etbuild wrote it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from etbuild.memory.hierarchy import HierarchyPlan, Level, Placement
from etbuild.memory.lifetimes import lifetimes, peak_live_bytes
from etbuild.memory.report import format_memory_table, memory_report
from etbuild.runtime.format import program as fb
from etbuild.runtime.program import Program

ALIGNMENT = 16


def method_table(plan: fb.ExecutionPlan, names: list[str] | None) -> dict[str, Any]:
    """The report of one method as built, in the shape `memory_report` gives."""
    sizes = list(plan.non_const_buffer_sizes[1:])
    lives = lifetimes(plan)
    placements = {}
    for t in lives:
        alloc = plan.values[t.value].val.allocation_info
        if alloc is not None:
            placements[t.value] = Placement(alloc.memory_id, alloc.offset)
    members = [[t for t in lives if t.value in placements and placements[t.value].memory_id == i + 1]
               for i in range(len(sizes))]
    built = HierarchyPlan(
        placements=placements, level_bytes=tuple(sizes),
        lower_bounds=tuple(peak_live_bytes(m, ALIGNMENT) for m in members),
        tensor_counts=tuple(len(m) for m in members), planner="as built",
    )
    labels = names if names and len(names) == len(sizes) else [f"mem{i + 1}" for i in range(len(sizes))]
    return memory_report(built, lives, [Level(n, None, ALIGNMENT) for n in labels], {})


def memory_tables(path: str | Path) -> str:
    """Text tables, one per method, for a `.pte` file."""
    program = Program.load(path)
    blocks = []
    for plan in program.program.execution_plan:
        table = method_table(plan, program.level_names.get(plan.name or ""))
        blocks.append(f"method {plan.name}:\n{format_memory_table(table)}")
    return "\n\n".join(blocks)
