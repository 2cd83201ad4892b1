"""Emit stage: unplanned program + memory plan → the final `.pte`.

Takes: `lowered.unplanned` and `plan.json`. Gives: `<recipe>.pte` with allocation_info on every
planned tensor and `non_const_buffer_sizes`, without per-instruction stack traces. A
program that calls an operator with no kernel in our runtime is a build error here, so a
`.pte` never fails at load for want of a kernel.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from etbuild.errors import StageError
from etbuild.fsutil import write_bytes
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.pte import read_program, segment_bytes, write_program
from etbuild.runtime.kernel_registry import canonical_name, load_all
from etbuild.stages.plan import MethodPlan


def apply_plan(plan: fb.ExecutionPlan, mplan: MethodPlan) -> None:
    """Set allocation_info and buffer sizes from the memory plan (in place)."""
    for value, (memory_id, offset) in mplan.placements.items():
        t = plan.values[value].val
        if not isinstance(t, fb.Tensor):
            raise StageError(f"plan places value {value}, which is not a tensor")
        t.allocation_info = fb.AllocationDetails(memory_id, offset & 0xFFFFFFFF, offset >> 32)
    plan.non_const_buffer_sizes = [0, *mplan.level_bytes]
    for chain in plan.chains:
        chain.stacktrace = None


def missing_kernels(program: fb.Program) -> Counter[str]:
    """Operators the program calls that have no kernel in etbuild's runtime, with call counts."""
    kernels = load_all()
    missing: Counter[str] = Counter()
    for plan in program.execution_plan:
        for ins in plan.chains[0].instructions:
            call = ins.instr_args
            if isinstance(call, fb.KernelCall):
                op = plan.operators[call.op_index]
                name = canonical_name(op.name or "", op.overload or "")
                if name not in kernels:
                    missing[name] += 1
    return missing


def emit(program: fb.Program, plans: list[MethodPlan]) -> fb.Program:
    """Apply the memory plans; refuse programs that call operators we have no kernel for."""
    missing = missing_kernels(program)
    if missing:
        listed = ", ".join(f"{name} ({n} call{'s' * (n > 1)})" for name, n in sorted(missing.items()))
        raise StageError(f"the program calls operators with no kernel in the etbuild runtime: {listed}")
    by_name = {p.method: p for p in plans}
    for plan in program.execution_plan:
        apply_plan(plan, by_name[plan.name or ""])
    return program


def run_emit(lowered: Path, plan_json: Path, out: Path) -> None:
    """Write the final `.pte` from `lowered.unplanned` and `plan.json`."""
    data = lowered.read_bytes()
    program, header = read_program(data)
    segments = [bytes(segment_bytes(data, program, header, i)) for i in range(len(program.segments))]
    plans = [MethodPlan.from_json(m) for m in json.loads(plan_json.read_text())["methods"]]
    _own_bytes(program)
    write_bytes(out, write_program(emit(program, plans), segments))


def _own_bytes(program: fb.Program) -> None:
    """Replace memoryviews into the input file with bytes before the file is closed."""
    for plan in program.execution_plan:
        for ev in plan.values:
            if isinstance(ev.val, fb.Tensor):
                ev.val.dim_order = bytes(ev.val.dim_order)
