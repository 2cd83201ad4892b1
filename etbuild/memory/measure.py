"""The memory table of any `.pte` (ours or ExecuTorch's), for `etbuild inspect --memory`.

Per method and memory id: the planned bytes the file declares (`non_const_buffer_sizes`),
the lower bound recomputed from the program's own tensor lifetimes (peak live bytes), and
the tensor count. Level names come from `memory.json` beside the file when etbuild wrote it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from etbuild.memory.lifetimes import lifetimes, peak_live_bytes
from etbuild.memory.report import format_memory_table
from etbuild.runtime.format import program as fb
from etbuild.runtime.program import Program

ALIGNMENT = 16


def _memory_id(plan: fb.ExecutionPlan, value: int) -> int:
    alloc = plan.values[value].val.allocation_info
    return alloc.memory_id if alloc is not None else 0


def method_table(plan: fb.ExecutionPlan, names: list[str] | None) -> dict[str, Any]:
    """The report of one method, in the shape `format_memory_table` prints."""
    sizes = list(plan.non_const_buffer_sizes[1:])
    lives = lifetimes(plan)
    levels = []
    for i, size in enumerate(sizes):
        members = [t for t in lives if _memory_id(plan, t.value) == i + 1]
        bound = peak_live_bytes(members, ALIGNMENT)
        levels.append({
            "name": names[i] if names and len(names) == len(sizes) else f"mem{i + 1}", "memory_id": i + 1,
            "capacity": None, "planned_bytes": size, "lower_bound": bound,
            "ratio": round(size / bound, 4) if bound else None, "free_bytes": None,
            "unshared_bytes": sum(-(-t.nbytes // ALIGNMENT) * ALIGNMENT for t in members),
            "tensor_count": len(members),
        })
    planned, bound = sum(sizes), sum(lv["lower_bound"] for lv in levels)
    return {
        "planner": "as built", "levels": levels, "runtime_allocations": {},
        "totals": {
            "planned_bytes": planned, "lower_bound": bound, "ratio": round(planned / bound, 4) if bound else None,
            "unshared_bytes": sum(lv["unshared_bytes"] for lv in levels),
            "tensor_count": sum(lv["tensor_count"] for lv in levels),
        },
    }


def memory_tables(path: str | Path) -> str:
    """Text tables, one per method, for a `.pte` file."""
    program = Program.load(path)
    blocks = []
    for plan in program.program.execution_plan:
        table = method_table(plan, program.level_names.get(plan.name or ""))
        blocks.append(f"method {plan.name}:\n{format_memory_table(table)}")
    return "\n\n".join(blocks)
