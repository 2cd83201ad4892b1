"""Emit stage: unplanned program + memory plan → the final `.pte`.

Takes: `lowered.unplanned` and `plan.json`. Gives: `<recipe>.pte` with allocation_info on every
planned tensor and `non_const_buffer_sizes`, without per-instruction stack traces. A
program that calls an operator with no kernel in our runtime is a build error here, so a
`.pte` never fails at load for want of a kernel. A language model's constant methods (no
inputs, no instructions, outputs that are values of the plan: what ExecuTorch's emitter writes
for them) are added here, and its tokenizer.json is copied beside the `.pte`. With `emit.weights`
external, the constants (by the keys in `lowered.constants.json`) and the delegates' named data
go to `<file>.ptd` beside the `.pte` (etbuild.lowering.external_weights).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from etbuild.errors import StageError
from etbuild.fsutil import write_bytes
from etbuild.lowering.external_weights import separate
from etbuild.recipe import WeightsConfig
from etbuild.runtime.format import program as fb
from etbuild.runtime.format.ptd import write_ptd
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


LEAF = {"type": None, "context": None, "children_spec": []}


def constant_plan(name: str, values: Sequence[int | bool]) -> fb.ExecutionPlan:
    """A method that returns `values` (one value: that value; several: a list of them), as ExecuTorch emits it."""
    items = [fb.EValue(fb.Bool(v) if isinstance(v, bool) else fb.Int(v)) for v in values]
    spec: dict[str, Any] = LEAF if len(values) == 1 else {
        "type": "builtins.list", "context": "null", "children_spec": [LEAF] * len(values)}
    return fb.ExecutionPlan(
        name=name, container_meta_type=fb.ContainerMetadata("", json.dumps([1, spec])), values=items, inputs=[],
        outputs=list(range(len(items))), chains=[fb.Chain(instructions=[])], non_const_buffer_sizes=[0])


def run_emit(lowered: Path, plan_json: Path, out: Path, constants: Mapping[str, Sequence[int | bool]] | None = None,
             tokenizer: Path | None = None, names: Path | None = None, weights: WeightsConfig | None = None) -> None:
    """Write the final `.pte` from `lowered.unplanned` and `plan.json`, with the constant methods
    `constants` (name → values), and `tokenizer` copied beside it as tokenizer.json; with
    `weights`, the constants `names` (lowered.constants.json) lists go to `<weights.file>.ptd`."""
    data = lowered.read_bytes()
    program, header = read_program(data)
    segments = [bytes(segment_bytes(data, program, header, i)) for i in range(len(program.segments))]
    plans = [MethodPlan.from_json(m) for m in json.loads(plan_json.read_text())["methods"]]
    _own_bytes(program)
    program = emit(program, plans)
    program.execution_plan.extend(constant_plan(name, values) for name, values in (constants or {}).items())
    program.execution_plan.sort(key=lambda plan: plan.name or "")
    if weights is not None and names is not None:
        keys = {m: {int(i): k for i, k in values.items()} for m, values in json.loads(names.read_text()).items()}
        separated = separate(program, segments, keys, weights.only)
        program, segments = separated.program, separated.segments
        write_bytes(out.parent / f"{weights.file}.ptd", write_ptd(separated.entries))
    write_bytes(out, write_program(program, segments))
    if tokenizer is not None:
        write_bytes(out.parent / "tokenizer.json", tokenizer.read_bytes())


def _own_bytes(program: fb.Program) -> None:
    """Replace memoryviews into the input file with bytes before the file is closed."""
    for plan in program.execution_plan:
        for ev in plan.values:
            if isinstance(ev.val, fb.Tensor):
                ev.val.dim_order = bytes(ev.val.dim_order)
