"""Mutable state that several methods of one program share: one memory id, one layout.

A buffer the model mutates is planned with its fully qualified name (`extra_tensor_info`).
When two or more methods mutate the buffer of one name (a KV cache that `prefill` fills and
`decode` extends), it is one piece of program state: every such buffer goes to a memory id of
its own after the recipe's levels (the level `shared_state`), at the same offset in every
method, and is live for ever. This is the layout of ExecuTorch's `share_mutable_buffers`
(its memory id 2 after the one activation arena); a runtime that gives that memory id one
arena per program, not per method, lets each method see what the others wrote
(`etbuild.runtime.state`). Buffers only one method mutates stay in that method's levels.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from etbuild.errors import StageError
from etbuild.memory.hierarchy import HierarchyPlan, Level, Placement
from etbuild.memory.lifetimes import is_mutable_state
from etbuild.runtime.format import program as fb
from etbuild.runtime.values import tensor_nbytes

SHARED_LEVEL = "shared_state"


@dataclass(frozen=True)
class SharedState:
    """Offsets of the shared buffers by name, and the bytes of their memory id."""

    offsets: dict[str, int]
    nbytes: int
    alignment: int

    def level(self) -> Level:
        return Level(SHARED_LEVEL, None, self.alignment)

    def values(self, plan: fb.ExecutionPlan) -> dict[int, int]:
        """value index -> offset for the plan's shared buffers."""
        return {i: self.offsets[name] for i, name in _named_state(plan) if name in self.offsets}

    def extend(self, placed: HierarchyPlan, values: dict[int, int]) -> HierarchyPlan:
        """The plan with the shared memory id added as its last level (holding `values`)."""
        if not values:
            return placed
        memory_id = len(placed.level_bytes) + 1
        placements = {**placed.placements, **{v: Placement(memory_id, off) for v, off in values.items()}}
        return replace(
            placed, placements=dict(sorted(placements.items())),
            level_bytes=(*placed.level_bytes, self.nbytes), lower_bounds=(*placed.lower_bounds, self.nbytes),
            tensor_counts=(*placed.tensor_counts, len(values)),
        )


def _named_state(plan: fb.ExecutionPlan) -> list[tuple[int, str]]:
    """(value index, name) of each mutable buffer of the plan that has a name."""
    out = []
    for i, ev in enumerate(plan.values):
        t = ev.val
        if isinstance(t, fb.Tensor) and is_mutable_state(t) and t.extra_tensor_info is not None:
            name = t.extra_tensor_info.fully_qualified_name
            if name:
                out.append((i, str(name)))
    return out


def shared_state(plans: list[fb.ExecutionPlan], levels: list[Level], alignment: int) -> SharedState:
    """The buffers more than one method mutates, laid out by name; their shapes must agree."""
    seen: dict[str, tuple[str, tuple[int, ...], int, int]] = {}  # name -> method, sizes, dtype, bytes
    users: dict[str, int] = {}
    for plan in plans:
        for i, name in _named_state(plan):
            t = plan.values[i].val
            meta = (plan.name or "", tuple(t.sizes), t.scalar_type, tensor_nbytes(t, f"value {i}")[1])
            first = seen.setdefault(name, meta)
            if first[1:] != meta[1:]:
                raise StageError(
                    f"buffer {name} is {list(first[1])} (scalar type {first[2]}) in method {first[0]} "
                    f"but {list(meta[1])} (scalar type {meta[2]}) in method {meta[0]}; one buffer needs one shape"
                )
            users[name] = users.get(name, 0) + 1
    offsets, end = {}, 0
    for name in sorted(n for n, count in users.items() if count > 1):
        offsets[name] = end
        end += -(-seen[name][3] // alignment) * alignment
    if offsets and any(level.name == SHARED_LEVEL for level in levels):
        raise StageError(f"memory level name {SHARED_LEVEL!r} is reserved for the state that methods share")
    return SharedState(offsets, end, alignment)
