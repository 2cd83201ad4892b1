"""The memory report (`memory.json`) of a hierarchy plan, and its text table (`inspect --memory`).

Per level: planned bytes against the lower bound (the most bytes live at once) and the
capacity; the bytes the tensors would take unshared; the runtime's own allocations passed
through as given (the caller names them and picks their units).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from etbuild.memory.hierarchy import HierarchyPlan, Level
from etbuild.memory.lifetimes import TensorLife


def _ratio(planned: int, bound: int) -> float | None:
    """planned / bound to 4 places; None when the bound is 0 (nothing to compare with)."""
    return round(planned / bound, 4) if bound else None


def _level_entry(i: int, level: Level, plan: HierarchyPlan, lives: Sequence[TensorLife]) -> dict[str, Any]:
    members = [t for t in lives if t.value in plan.placements and plan.placements[t.value].memory_id == i + 1]
    planned, bound = plan.level_bytes[i], plan.lower_bounds[i]
    return {
        "name": level.name, "memory_id": i + 1, "capacity": level.capacity, "alignment": level.alignment,
        "planned_bytes": planned, "lower_bound": bound, "ratio": _ratio(planned, bound),
        "unshared_bytes": sum(-(-t.nbytes // level.alignment) * level.alignment for t in members),
        "free_bytes": None if level.capacity is None else level.capacity - planned,
        "tensor_count": plan.tensor_counts[i],
    }


def memory_report(
    plan: HierarchyPlan, lives: Sequence[TensorLife], levels: Sequence[Level], extra: Mapping[str, int]
) -> dict[str, Any]:
    """The JSON-able content of `memory.json`: levels, runtime allocations and totals."""
    entries = [_level_entry(i, level, plan, lives) for i, level in enumerate(levels)]
    planned, bound = sum(plan.level_bytes), sum(plan.lower_bounds)
    return {
        "planner": plan.planner,
        "levels": entries,
        "runtime_allocations": dict(extra),
        "totals": {
            "planned_bytes": planned, "lower_bound": bound, "ratio": _ratio(planned, bound),
            "unshared_bytes": sum(e["unshared_bytes"] for e in entries),
            "tensor_count": sum(plan.tensor_counts),
        },
    }


_COLUMNS = (
    ("level", "name"), ("id", "memory_id"), ("capacity", "capacity"), ("planned", "planned_bytes"),
    ("lower bound", "lower_bound"), ("ratio", "ratio"), ("free", "free_bytes"), ("unshared", "unshared_bytes"),
    ("tensors", "tensor_count"),
)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def format_memory_table(report: Mapping[str, Any]) -> str:
    """A fixed-width table of the report: one row per level, a total row, then the runtime's allocations."""
    total = {"name": "total", **report["totals"]}
    rows = [[title for title, _ in _COLUMNS]]
    rows += [[_cell(entry.get(key)) for _, key in _COLUMNS] for entry in [*report["levels"], total]]
    widths = [max(len(row[c]) for row in rows) for c in range(len(_COLUMNS))]

    def line(row: list[str]) -> str:
        return "  ".join(cell.ljust(w) if c == 0 else cell.rjust(w) for c, (cell, w) in enumerate(zip(row, widths)))

    rule = "  ".join("-" * w for w in widths)
    lines = [f"planner: {report['planner']}", line(rows[0]), rule, *map(line, rows[1:-1]), rule, line(rows[-1])]
    allocations = ", ".join(f"{name} {n:,}" for name, n in report["runtime_allocations"].items())
    lines.append(f"runtime allocations: {allocations or 'none'}")
    return "\n".join(text.rstrip() for text in lines) + "\n"
