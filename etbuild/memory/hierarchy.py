"""Placement across a memory hierarchy: each tensor gets a level (memory id) and an offset in it.

Levels are listed fastest first (e.g. SRAM, then DRAM); level i is planned memory id i + 1.
A tensor that matches a rule goes to the rule's level and never moves (the first matching
rule wins). The other tensors fill the levels in order: a level is planned with the chosen
planner, and while its arena exceeds its capacity one tensor at a time moves on to the next
level (see `_victim`). When nothing can move, `MemoryOverflow` names the level, the bytes
it needs and holds, and the largest tensors live at its peak.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from types import MappingProxyType

from etbuild.errors import StageError
from etbuild.memory.lifetimes import TensorLife, peak_live_bytes
from etbuild.memory.planners import PLANNERS, arena_size

_NO_MODULES: Mapping[int, str] = MappingProxyType({})
SHOWN_AT_PEAK = 3  # tensors an overflow message lists


@dataclass(frozen=True)
class Level:
    """One memory of the hierarchy; `capacity` None means unbounded."""

    name: str
    capacity: int | None
    alignment: int


@dataclass(frozen=True)
class Rule:
    """Send the tensors that match to `level`.

    A tensor matches when its bytes are at most `max_bytes`, or when its module path
    matches the fnmatch pattern `module` (case-sensitive). A rule with neither matches every
    tensor.
    """

    level: str
    max_bytes: int | None = None
    module: str | None = None

    def matches(self, life: TensorLife, module: str | None) -> bool:
        if self.max_bytes is None and self.module is None:
            return True
        small = self.max_bytes is not None and life.nbytes <= self.max_bytes
        named = self.module is not None and module is not None and fnmatchcase(module, self.module)
        return small or named


@dataclass(frozen=True)
class Placement:
    """Where one tensor lives: planned memory `memory_id` (1 + level index), at `offset`."""

    memory_id: int
    offset: int


@dataclass(frozen=True)
class HierarchyPlan:
    """The placement of every tensor and, per level, its arena bytes, lower bound and count."""

    placements: dict[int, Placement]
    level_bytes: tuple[int, ...]
    lower_bounds: tuple[int, ...]
    tensor_counts: tuple[int, ...]
    planner: str


class MemoryOverflow(StageError):
    """The tensors a memory level must hold do not fit in its capacity."""


class InvalidHierarchy(StageError, ValueError):
    """The levels, rules or planner given to `place` are inconsistent."""


@dataclass(frozen=True)
class LivePeak:
    """The first instruction where the most (aligned) bytes are live, and who is live there."""

    pc: int
    live_bytes: int
    live: tuple[TensorLife, ...]


def live_peak(lives: Sequence[TensorLife], alignment: int) -> LivePeak:
    """Where the most bytes are live (instruction 0 with nothing live when there are no tensors)."""
    events: dict[int, int] = {}
    for t in lives:
        events[t.start] = events.get(t.start, 0) + _aligned(t, alignment)
        events[t.end + 1] = events.get(t.end + 1, 0) - _aligned(t, alignment)
    best_pc, best, running = 0, 0, 0
    for pc in sorted(events):
        running += events[pc]
        if running > best:
            best_pc, best = pc, running
    return LivePeak(best_pc, best, tuple(t for t in lives if t.start <= best_pc <= t.end))


def place(
    lives: list[TensorLife], levels: Sequence[Level], rules: Sequence[Rule], planner: str,
    modules: Mapping[int, str] = _NO_MODULES,
) -> HierarchyPlan:
    """Place every tensor in a level of the hierarchy, spilling from fast levels to slow ones."""
    _check(levels, rules, planner)
    forced = _forced(lives, levels, rules, modules)
    placements: dict[int, Placement] = {}
    stats: list[tuple[int, int, int]] = []
    incoming = [t for t in lives if t.value not in forced]
    for i, level in enumerate(levels):
        members = sorted([t for t in lives if forced.get(t.value) == i] + incoming, key=lambda t: t.value)
        last = i == len(levels) - 1
        kept, offsets, incoming = _fill(level, members, set(forced), planner, last, modules)
        placements.update({t.value: Placement(i + 1, offsets[t.value]) for t in kept})
        stats.append((arena_size(kept, offsets, level.alignment), peak_live_bytes(kept, level.alignment), len(kept)))
    return HierarchyPlan(
        placements=dict(sorted(placements.items())),
        level_bytes=tuple(s[0] for s in stats), lower_bounds=tuple(s[1] for s in stats),
        tensor_counts=tuple(s[2] for s in stats), planner=planner,
    )


def _check(levels: Sequence[Level], rules: Sequence[Rule], planner: str) -> None:
    """Reject an empty or ambiguous hierarchy, a rule naming no level and an unknown planner."""
    if planner not in PLANNERS:
        raise InvalidHierarchy(f"unknown planner {planner!r}; planners: {', '.join(sorted(PLANNERS))}")
    names = [level.name for level in levels]
    if not names:
        raise InvalidHierarchy("a memory hierarchy needs at least one level")
    for level in levels:
        if names.count(level.name) > 1:
            raise InvalidHierarchy(f"memory level {level.name!r} is listed {names.count(level.name)} times")
        if level.alignment < 1 or (level.capacity is not None and level.capacity < 0):
            raise InvalidHierarchy(
                f"memory level {level.name!r} has alignment {level.alignment} and capacity {level.capacity}; "
                "alignment must be positive and capacity not negative"
            )
    for n, rule in enumerate(rules, 1):
        if rule.level not in names:
            close = difflib.get_close_matches(rule.level, names, n=1)
            hint = f"; perhaps you meant {close[0]!r}?" if close else ""
            raise InvalidHierarchy(
                f"memory rule {n} names level {rule.level!r}, which is not one of: {', '.join(names)}{hint}"
            )


def _forced(
    lives: list[TensorLife], levels: Sequence[Level], rules: Sequence[Rule], modules: Mapping[int, str]
) -> dict[int, int]:
    """Value index -> level index of every tensor some rule places (the first match wins)."""
    index = {level.name: i for i, level in enumerate(levels)}
    forced = {}
    for t in lives:
        rule = next((r for r in rules if r.matches(t, modules.get(t.value))), None)
        if rule is not None:
            forced[t.value] = index[rule.level]
    return forced


def _fill(
    level: Level, members: list[TensorLife], forced: set[int], planner: str, last: bool, modules: Mapping[int, str]
) -> tuple[list[TensorLife], dict[int, int], list[TensorLife]]:
    """Plan `members` in `level`, moving tensors out until the arena fits: (kept, offsets, moved out).

    While the peak of live bytes alone exceeds the capacity the level is not planned: a
    tensor must leave whatever the planner does.
    """
    kept, moved = list(members), list[TensorLife]()
    while True:
        if level.capacity is None:
            return kept, PLANNERS[planner](kept, level.alignment), moved
        peak = live_peak(kept, level.alignment)
        offsets: dict[int, int] | None = None
        if peak.live_bytes <= level.capacity:
            offsets = PLANNERS[planner](kept, level.alignment)
            if arena_size(kept, offsets, level.alignment) <= level.capacity:
                return kept, offsets, moved
        victim = None if last else _victim(level.capacity, level.alignment, kept, forced, peak, offsets)
        if victim is None:
            raise MemoryOverflow(_overflow_message(level, kept, forced, peak, offsets, last, planner, modules))
        kept.remove(victim)
        moved.append(victim)


def _victim(
    capacity: int, alignment: int, kept: list[TensorLife], forced: set[int], peak: LivePeak,
    offsets: dict[int, int] | None,
) -> TensorLife | None:
    """The tensor to move to the next level, or None when only rule-placed tensors remain to blame.

    When the live bytes at the peak exceed the capacity, a tensor live there must go: the
    smallest whose departure alone brings the peak within capacity, else the largest. When
    the peak fits but the arena does not (fragmentation), the largest movable tensor at the
    arena's top goes, else the largest movable one at the peak, else the largest movable one.
    """
    size = {t.value: _aligned(t, alignment) for t in kept}
    at_peak = [t for t in peak.live if t.value not in forced]
    if offsets is None:
        excess = peak.live_bytes - capacity
        enough = [t for t in at_peak if size[t.value] >= excess]
        return min(enough, key=lambda t: (size[t.value], t.value)) if enough else _largest(at_peak, size)
    top = arena_size(kept, offsets, alignment)
    on_top = [t for t in kept if t.value not in forced and offsets[t.value] + size[t.value] >= top]
    movable = [t for t in kept if t.value not in forced]
    return _largest(on_top, size) or _largest(at_peak, size) or _largest(movable, size)


def _largest(candidates: list[TensorLife], size: dict[int, int]) -> TensorLife | None:
    return min(candidates, key=lambda t: (-size[t.value], t.value), default=None)


def _aligned(t: TensorLife, alignment: int) -> int:
    return -(-t.nbytes // alignment) * alignment


def _overflow_message(
    level: Level, kept: list[TensorLife], forced: set[int], peak: LivePeak, offsets: dict[int, int] | None,
    last: bool, planner: str, modules: Mapping[int, str],
) -> str:
    """Which level overflows, by how much, why nothing can move, and who is live at its peak."""
    if offsets is None:
        needs = f"needs at least {peak.live_bytes:,} bytes"
    else:
        needs = f"needs {arena_size(kept, offsets, level.alignment):,} bytes with planner {planner!r}"
    if last:
        why = "no slower level follows to take tensors"
    else:
        n = sum(t.value in forced for t in kept)
        why = f"the {_count(n, 'tensor')} that rules place there cannot move"
    largest = sorted(peak.live, key=lambda t: (-t.nbytes, t.value))
    shown = ", ".join(_describe(t, modules) for t in largest[:SHOWN_AT_PEAK])
    more = f", and {len(largest) - SHOWN_AT_PEAK} more" if len(largest) > SHOWN_AT_PEAK else ""
    hint = "" if offsets is None or planner == "best" else "; planner 'best' may pack them tighter"
    return (
        f"memory level {level.name!r} {needs} but holds {level.capacity:,}, and {why}: "
        f"the largest tensors live at its peak ({_when(peak.pc)}, {peak.live_bytes:,} bytes live) "
        f"are {shown}{more}{hint}"
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _describe(t: TensorLife, modules: Mapping[int, str]) -> str:
    module = f", {modules[t.value]}" if t.value in modules else ""
    return f"value {t.value} ({t.nbytes:,} bytes, instructions {t.start}..{t.end}{module})"


def _when(pc: int) -> str:
    return "before the first instruction" if pc < 0 else f"instruction {pc}"
