"""Program state: the memory ids that hold only named mutable buffers get one arena per program.

ExecuTorch's `share_mutable_buffers` layout (and etbuild's plan stage, `etbuild.memory.shared`)
puts the buffers that several methods mutate in a memory id of their own, at the same offset in
every method, each tensor named by `extra_tensor_info.fully_qualified_name`. Giving such a
memory id one arena per `Program`, which every method loaded from it uses, lets one method see
what another wrote (a KV cache `prefill` fills and `decode` extends). ExecuTorch's runtime
shares every host arena between the methods of a program; sharing only the state ids keeps
each method's activations its own. As in ExecuTorch's runtime, loading a method copies the
initial value of the state it names into the arena: load every method before the first call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from etbuild.errors import InvalidProgram
from etbuild.runtime.format import program as fb


def state_memory_ids(program: fb.Program) -> dict[int, int]:
    """memory id -> arena bytes (the largest any method plans) for each id only named buffers use."""
    named: set[int] = set()
    other: set[int] = set()
    for plan in program.execution_plan:
        for ev in plan.values:
            t = ev.val
            if isinstance(t, fb.Tensor) and t.allocation_info is not None:
                info = t.extra_tensor_info
                (named if info is not None and info.fully_qualified_name else other).add(t.allocation_info.memory_id)
    sizes: dict[int, int] = {}
    for memory_id in sorted(named - other):
        planned = [
            p.non_const_buffer_sizes[memory_id] for p in program.execution_plan
            if 0 < memory_id < len(p.non_const_buffer_sizes)
        ]
        if planned:
            sizes[memory_id] = max(planned)
    return sizes


def with_state(program: Any, plan: fb.ExecutionPlan, buffers: Sequence[Any] | None, limit: int) -> Sequence[Any] | None:
    """The caller's buffers with the state arenas of `program` (a runtime Program, which keeps
    them: one per Program, made at its first load) where the caller gave none."""
    if program._state is None:
        sizes = state_memory_ids(program.program)
        if any(size < 0 for size in sizes.values()):
            return buffers  # _arenas refuses the negative size
        total = sum(sizes.values())
        if total > limit:
            raise InvalidProgram(f"its state memory, {total} bytes, exceeds max_planned_bytes ({limit})")
        program._state = {memory_id: np.zeros(size, dtype=np.uint8) for memory_id, size in sizes.items()}
    count = len(plan.non_const_buffer_sizes) - 1
    if not program._state or count < 1:
        return buffers
    given = list(buffers) if buffers is not None else [None] * count
    if len(given) != count:
        return given  # _arenas names the mismatch
    return [program._state.get(i + 1) if buf is None else buf for i, buf in enumerate(given)]
