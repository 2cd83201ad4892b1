"""Placement algorithms: each maps lifetimes to byte offsets in one arena.

Every planner has the same signature, `(lives, alignment) -> {value: offset}`, and is
listed in PLANNERS by the name a recipe uses.
"""

from __future__ import annotations

from collections.abc import Callable

from etbuild.memory.lifetimes import TensorLife

Planner = Callable[[list[TensorLife], int], dict[int, int]]


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def naive(lives: list[TensorLife], alignment: int) -> dict[int, int]:
    """Every tensor gets its own bytes: the upper bound, for comparison."""
    offsets, pos = {}, 0
    for t in lives:
        offsets[t.value] = pos
        pos += _align(t.nbytes, alignment)
    return offsets


def greedy(lives: list[TensorLife], alignment: int) -> dict[int, int]:
    """Largest first, each at the lowest aligned offset free for its whole lifetime."""
    placed: list[tuple[TensorLife, int]] = []
    offsets = {}
    for t in sorted(lives, key=lambda t: (-t.nbytes, t.start, t.value)):
        size = _align(t.nbytes, alignment)
        busy = sorted((off, off + _align(o.nbytes, alignment)) for o, off in placed if o.overlaps(t))
        pos = 0
        for start, end in busy:
            if pos + size <= start:
                break
            pos = max(pos, _align(end, alignment))
        offsets[t.value] = pos
        placed.append((t, pos))
    return offsets


PLANNERS: dict[str, Planner] = {"greedy": greedy, "naive": naive}


def arena_size(lives: list[TensorLife], offsets: dict[int, int], alignment: int) -> int:
    """The bytes an arena needs to hold every placed tensor."""
    return max((_align(offsets[t.value] + t.nbytes, alignment) for t in lives), default=0)
