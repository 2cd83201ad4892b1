"""What `profile` and `generate` say of delegates that etbuild's runtime simulates (torch-free).

A delegate handle with a `simulation` attribute (the Ethos-U and TOSA backends' runtime halves: each TOSA
graph runs in the TOSA reference model in a child process) computes the right results on a laptop, but its
wall time is the simulator's, not the device's. `profile` labels such delegates and puts the build's own
estimate beside the simulation time: Vela's cycles per delegate, from `memory.json` beside the `.pte`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from etbuild.runtime.backend_registry import backend
from etbuild.runtime.format import program as fb


def simulated_delegates(method: Any) -> dict[int, tuple[int, str, str]]:
    """Instruction index → (delegate index, backend id, what the simulation is) for simulated delegate calls."""
    found = {}
    for k, ins in enumerate(method.plan.chains[0].instructions if method.plan.chains else []):
        call = ins.instr_args
        if not isinstance(call, fb.DelegateCall):
            continue
        what = getattr(method.delegates.get(call.delegate_index), "simulation", None)
        if what:
            found[k] = (call.delegate_index, method.plan.delegates[call.delegate_index].id or "", what)
    return found


def program_note(program: Any) -> str:
    """One line saying which of a loaded program's delegates etbuild's runtime simulates; "" for none. The
    backends' runtime halves say it (`simulation`), so nothing needs to run first."""
    found = {}
    for plan in program.program.execution_plan:
        for d in plan.delegates:
            what = getattr(backend(d.id or ""), "simulation", None)
            if what:
                found[d.id] = what
    if not found:
        return ""
    return (f"note: {', '.join(sorted(found))} delegates run as a functional simulation, not NPU timing "
            f"({'; '.join(sorted(set(found.values())))}): times and rates are the simulator's")


def build_estimates(pte: str | Path) -> dict[tuple[str, int], Mapping[str, Any]]:
    """(method, delegate index) → the build's estimate for it (Vela's report in `memory.json` beside the `.pte`);
    empty when there is no such file."""
    path = Path(pte).parent / "memory.json"
    try:
        delegates = json.loads(path.read_text()).get("delegates", [])
    except (OSError, ValueError):
        return {}
    return {(d["method"], d["delegate"]): d.get("vela", {}) for d in delegates}


def simulation_note(method: Any, times_us: Mapping[int, float], pte: str | Path) -> str:
    """Lines for the profile table: which delegates were simulated, their simulation time per call, and
    Vela's estimated cycles and time next to it; "" when nothing was simulated."""
    found = simulated_delegates(method)
    if not found:
        return ""
    estimates = build_estimates(pte)
    lines = [f"{'instruction':>11} {'delegate':<24} {'simulated µs/call':>17}  Vela's estimate (NPU, not measured)"]
    for k, (index, backend_id, _) in sorted(found.items()):
        vela = estimates.get((method.name, index), {})
        estimate = "— (no memory.json beside the .pte)"
        if "cycles_total" in vela:
            estimate = f"{vela['cycles_total']:,.0f} cycles"
            if vela.get("inference_time"):
                estimate += f" = {vela['inference_time'] * 1e6:,.1f} µs at {vela.get('core_clock', 0) / 1e6:,.0f} MHz"
        lines.append(f"{k:>11} {f'{backend_id} {index}':<24} {times_us.get(k, 0.0):>17,.1f}  {estimate}")
    kinds = sorted({what for _, _, what in found.values()})
    return "\n".join([
        "", "", f"functional simulation, not NPU timing: {'; '.join(kinds)}. The times above are the simulator's "
            "wall time; a board or Arm's FVP gives real cycles.", *lines])
