"""Plan stage: lifetimes of every planned tensor → offsets in one arena (`plan.json`).

Takes: `lowered.pte` and the recipe's `memory` section. Gives: per planned tensor its
memory id, offset and lifetime; the arena size; the lower bound (peak live bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from etbuild.errors import StageError
from etbuild.fsutil import write_json
from etbuild.memory.lifetimes import lifetimes, peak_live_bytes
from etbuild.memory.planners import PLANNERS, arena_size
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import read_program

if TYPE_CHECKING:
    from etbuild.recipe import MemoryConfig


@dataclass(frozen=True)
class MethodPlan:
    """Where each planned tensor of one method lives."""

    method: str
    planner: str
    alignment: int
    arena_bytes: int
    lower_bound: int
    placements: dict[int, tuple[int, int]]  # value index -> (memory_id, offset)
    lifetimes: dict[int, tuple[int, int, int]]  # value index -> (nbytes, start, end)

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method, "planner": self.planner, "alignment": self.alignment,
            "arenas": [{"memory_id": 1, "bytes": self.arena_bytes}],
            "planned_bytes": self.arena_bytes, "lower_bound": self.lower_bound,
            "tensors": [
                {"value": v, "memory_id": mid, "offset": off, "bytes": self.lifetimes[v][0],
                 "lifetime": list(self.lifetimes[v][1:])}
                for v, (mid, off) in sorted(self.placements.items())
            ],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MethodPlan:
        return cls(
            method=d["method"], planner=d["planner"], alignment=d["alignment"],
            arena_bytes=d["planned_bytes"], lower_bound=d["lower_bound"],
            placements={t["value"]: (t["memory_id"], t["offset"]) for t in d["tensors"]},
            lifetimes={t["value"]: (t["bytes"], *t["lifetime"]) for t in d["tensors"]},
        )


def plan_method(plan: fb.ExecutionPlan, cfg: MemoryConfig) -> MethodPlan:
    """Place every planned tensor of one method in memory id 1."""
    if cfg.planner not in PLANNERS:
        raise StageError(f"unknown planner {cfg.planner!r}; planners: {', '.join(sorted(PLANNERS))}")
    lives = lifetimes(plan)
    offsets = PLANNERS[cfg.planner](lives, cfg.alignment)
    return MethodPlan(
        method=plan.name or "", planner=cfg.planner, alignment=cfg.alignment,
        arena_bytes=arena_size(lives, offsets, cfg.alignment),
        lower_bound=peak_live_bytes(lives, cfg.alignment),
        placements={t.value: (1, offsets[t.value]) for t in lives},
        lifetimes={t.value: (t.nbytes, t.start, t.end) for t in lives},
    )


def run_plan(lowered: Path, cfg: MemoryConfig, out: Path) -> None:
    """Plan every method of `lowered.pte` and write `plan.json`."""
    program, _ = read_program(lowered.read_bytes())
    plans = [plan_method(p, cfg).to_json() for p in program.execution_plan]
    total = sum(p["planned_bytes"] for p in plans)
    bound = sum(p["lower_bound"] for p in plans)
    write_json(out, {"methods": plans, "planned_bytes": total, "lower_bound": bound})
