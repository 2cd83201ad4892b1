"""Plan stage: lifetimes of every planned tensor → places in the recipe's memory hierarchy.

Takes: `lowered.unplanned` and the recipe's `memory` section (levels fastest first, planner,
placement rules). Gives, per method: each planned tensor's memory id (1 + its level's
index) and offset, and per level the planned bytes and the lower bound (peak live bytes):
`plan.json` for emit, `memory.json` (everything the runtime will allocate, so a device
team can size every pool before flashing) and `memory.svg` (the plan drawn over time).
A tensor that fits in no level fails the build naming the level, the bytes needed and
available, and the largest tensors live at the peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from etbuild.fsutil import write_bytes, write_json
from etbuild.memory.delegates import check_fastest_level, delegate_reports
from etbuild.memory.hierarchy import HierarchyPlan, Level, Rule, place
from etbuild.memory.lifetimes import TensorLife, lifetimes
from etbuild.memory.report import memory_report
from etbuild.memory.shared import SHARED_LEVEL, SharedState, shared_state
from etbuild.memory.svg import memory_svg
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import read_program
from etbuild.runtime.preload import preloaded_bytes

if TYPE_CHECKING:
    from etbuild.recipe import MemoryConfig

# Estimates for a C++ runtime such as ExecuTorch's (bytes): one EValue per value, tensor
# metadata (TensorImpl plus sizes, dim_order and strides per dim), one entry per instruction.
EVALUE_BYTES, TENSOR_IMPL_BYTES, BYTES_PER_DIM, INSTRUCTION_BYTES = 16, 64, 9, 16


@dataclass(frozen=True)
class MethodPlan:
    """Where each planned tensor of one method lives, and what each level holds."""

    method: str
    planner: str
    level_names: tuple[str, ...]
    level_bytes: tuple[int, ...]
    lower_bounds: tuple[int, ...]
    placements: dict[int, tuple[int, int]]  # value index -> (memory_id, offset)

    def to_json(self) -> dict[str, Any]:
        levels = [
            {"name": n, "memory_id": i + 1, "planned_bytes": b, "lower_bound": lb}
            for i, (n, b, lb) in enumerate(zip(self.level_names, self.level_bytes, self.lower_bounds))
        ]
        return {
            "method": self.method, "planner": self.planner, "levels": levels,
            "planned_bytes": sum(self.level_bytes), "lower_bound": sum(self.lower_bounds),
            "tensors": [{"value": v, "memory_id": m, "offset": o} for v, (m, o) in sorted(self.placements.items())],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> MethodPlan:
        levels = d["levels"]
        return cls(
            method=d["method"], planner=d["planner"], level_names=tuple(lv["name"] for lv in levels),
            level_bytes=tuple(lv["planned_bytes"] for lv in levels),
            lower_bounds=tuple(lv["lower_bound"] for lv in levels),
            placements={t["value"]: (t["memory_id"], t["offset"]) for t in d["tensors"]},
        )


def module_paths(plan: fb.ExecutionPlan) -> dict[int, str]:
    """value index -> module path of the call that produced it (from the lowered frames)."""
    if not plan.chains:
        return {}
    chain = plan.chains[0]
    modules: dict[int, str] = {}
    for ins, frame_list in zip(chain.instructions, chain.stacktrace or []):
        call = ins.instr_args
        if not isinstance(call, fb.KernelCall) or not call.args or not frame_list.items:
            continue
        path = (frame_list.items[0].name or "").split(" (", 1)[0]
        if not path or path == "<root>":
            continue
        ret = plan.values[call.args[-1]].val
        for v in ret.items if isinstance(ret, fb.TensorList) else [call.args[-1]]:
            modules.setdefault(v, path)
    return modules


def runtime_allocations(plan: fb.ExecutionPlan) -> dict[str, int]:
    """What a runtime allocates besides planned memory: counts, byte estimates for C++, and the
    constants etbuild's runtime computes at load by default (`etbuild.runtime.preload`)."""
    tensors = [ev.val for ev in plan.values if isinstance(ev.val, fb.Tensor)]
    instructions = len(plan.chains[0].instructions) if plan.chains else 0
    metadata = sum(TENSOR_IMPL_BYTES + BYTES_PER_DIM * len(t.sizes) for t in tensors)
    return {
        "values": len(plan.values), "tensors": len(tensors), "instructions": instructions,
        "estimated_method_bytes": EVALUE_BYTES * len(plan.values) + metadata + INSTRUCTION_BYTES * instructions,
        "preloaded_bytes": preloaded_bytes(plan),
    }


def levels_of(cfg: MemoryConfig) -> list[Level]:
    return [Level(lv.name, lv.bytes, lv.alignment) for lv in cfg.levels]


def _levels(cfg: MemoryConfig, plan: MethodPlan, shared: SharedState) -> list[Level]:
    """The recipe's levels, and the shared-state level when the method has one."""
    return levels_of(cfg) + [shared.level()] * (len(plan.level_names) - len(cfg.levels))


@dataclass(frozen=True)
class PlannedMethod:
    """One method's plan with what it was made from (for the report and the drawing)."""

    plan: MethodPlan
    placed: HierarchyPlan
    lives: list[TensorLife]
    modules: dict[int, str]


def plan_method(plan: fb.ExecutionPlan, cfg: MemoryConfig, shared: SharedState | None = None) -> PlannedMethod:
    """Place every planned tensor of one method in the hierarchy (the `shared` buffers in their own level)."""
    lives, modules = lifetimes(plan), module_paths(plan)
    rules = [Rule(r.level, r.max_bytes, r.module) for r in cfg.rules]
    state = shared.values(plan) if shared else {}
    placed = place([t for t in lives if t.value not in state], levels_of(cfg), rules, cfg.planner, modules)
    names = tuple(lv.name for lv in cfg.levels)
    if shared and state:
        placed, names = shared.extend(placed, state), (*names, SHARED_LEVEL)
    method = MethodPlan(
        method=plan.name or "", planner=cfg.planner, level_names=names,
        level_bytes=placed.level_bytes, lower_bounds=placed.lower_bounds,
        placements={v: (p.memory_id, p.offset) for v, p in placed.placements.items()},
    )
    return PlannedMethod(method, placed, lives, modules)


def plan_program(program: fb.Program, cfg: MemoryConfig) -> tuple[list[PlannedMethod], SharedState]:
    """Plan every method, the state that several of them mutate laid out once for all."""
    shared = shared_state(program.execution_plan, levels_of(cfg), cfg.alignment)
    return [plan_method(p, cfg, shared) for p in program.execution_plan], shared


def run_plan(lowered: Path, cfg: MemoryConfig, out_dir: Path) -> None:
    """Plan every method of `lowered.unplanned`; write plan.json, memory.json and memory.svg."""
    data = lowered.read_bytes()
    program, header = read_program(data)
    planned, shared = plan_program(program, cfg)
    delegates = delegate_reports(data, program, header)
    check_fastest_level(cfg.levels, max(m.plan.level_bytes[0] for m in planned), delegates)
    plans = [m.plan.to_json() for m in planned]
    reports = {
        m.plan.method: memory_report(m.placed, m.lives, _levels(cfg, m.plan, shared), runtime_allocations(p))
        for m, p in zip(planned, program.execution_plan)
    }
    first = planned[0]
    title = f"{lowered.parent.name}: method {first.plan.method}, planner {cfg.planner}"
    svg = memory_svg(first.lives, first.placed.placements, first.plan.level_names, first.plan.level_bytes,
                     title, first.modules)
    total, bound = sum(p["planned_bytes"] for p in plans), sum(p["lower_bound"] for p in plans)
    write_json(out_dir / "plan.json", {"methods": plans, "planned_bytes": total, "lower_bound": bound})
    write_json(out_dir / "memory.json", {"methods": reports, **({"delegates": delegates} if delegates else {})})
    write_bytes(out_dir / "memory.svg", svg.encode())
