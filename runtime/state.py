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
