"""One arena for a delegate's values: lifetimes over the step order, greedy placement.

A storage group is a value and the views of it (see compile.py). It lives from the first
step that writes a member to the last step that reads one; step -1 is the prologue that
loads external inputs and the step after the last node is the epilogue that stores
external outputs. Groups are placed largest first at the lowest offset that overlaps no
placed group alive at the same time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from etbuild.errors import InvalidProgram

ALIGN = 64
MAX_ARENA = 2 << 30


@dataclass(frozen=True)
class Interval:
    """A group's lifetime in steps (inclusive)."""

    first: int
    last: int

    def overlaps(self, other: Interval) -> bool:
        return self.first <= other.last and other.first <= self.last


def place(groups: Mapping[int, tuple[Interval, int]]) -> tuple[dict[int, int], int]:
    """Byte offsets of each group (lifetime, bytes) and the arena size; InvalidProgram beyond MAX_ARENA."""
    placed: list[tuple[int, int, Interval]] = []
    offsets: dict[int, int] = {}
    for gid, (life, nbytes) in sorted(groups.items(), key=lambda kv: (-kv[1][1], kv[0])):
        size = -(-nbytes // ALIGN) * ALIGN
        offset = 0
        for start, stop, _ in sorted((p for p in placed if p[2].overlaps(life)), key=lambda p: p[0]):
            if offset + size <= start:
                break
            offset = max(offset, stop)
        offsets[gid] = offset
        placed.append((offset, offset + size, life))
        if offset + size > MAX_ARENA:
            raise InvalidProgram(f"the delegate's values need more than {MAX_ARENA} bytes")
    return offsets, max((stop for _, stop, _ in placed), default=0)
