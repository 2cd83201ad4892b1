"""Placement algorithms: each maps lifetimes to byte offsets in one arena.

Every planner has the same signature, `(lives, alignment) -> {value: offset}`, and is
listed in PLANNERS by the name a recipe uses. All are deterministic, give offsets that are
multiples of `alignment`, and never let two tensors whose lifetimes overlap share a byte.

- `naive`: every tensor its own bytes (the upper bound).
- `greedy`: largest first, each at the lowest free offset.
- `bottom_up`: repeatedly places, among the tensors left, the one that can go lowest
  (ties: the one whose lifetime sees the most bytes live, then the largest), filling the
  arena from the bottom.
- `search`: tries several orderings (size, lifetime, start, end, area, pressure: the most
  bytes live during the tensor's life) with first fit and best fit (the smallest gap that
  holds the tensor), and bottom-up; then a bounded, seeded perturbation of the best
  ordering; keeps the smallest arena, and never one larger than greedy's.
- `best`: runs every other planner and keeps the smallest arena (ties: the first listed).
"""

from __future__ import annotations

import heapq
import random
from bisect import bisect_left, bisect_right
from collections.abc import Callable

from etbuild.memory.lifetimes import TensorLife

Planner = Callable[[list[TensorLife], int], dict[int, int]]
Fit = Callable[[list[tuple[int, int]], int], int]
SortKey = Callable[[TensorLife], tuple[int, ...]]

SEARCH_SEED = 20240611
SEARCH_ROUNDS = 24
SEARCH_BUDGET = 3_000_000  # tensor and neighbour visits the perturbation rounds may spend


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def naive(lives: list[TensorLife], alignment: int) -> dict[int, int]:
    """Every tensor gets its own bytes: the upper bound, for comparison."""
    offsets, pos = {}, 0
    for t in lives:
        offsets[t.value] = pos
        pos += _align(t.nbytes, alignment)
    return offsets


def _greedy_key(t: TensorLife) -> tuple[int, int, int]:
    return (-t.nbytes, t.start, t.value)


def greedy(lives: list[TensorLife], alignment: int) -> dict[int, int]:
    """Largest first, each at the lowest aligned offset free for its whole lifetime."""
    placed: list[tuple[TensorLife, int]] = []
    offsets = {}
    for t in sorted(lives, key=_greedy_key):
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


def _first_fit(busy: list[tuple[int, int]], size: int) -> int:
    """The lowest offset where `size` bytes clear every (sorted) busy range."""
    pos = 0
    for start, end in busy:
        if pos + size <= start:
            break
        pos = max(pos, end)
    return pos


def _best_fit(busy: list[tuple[int, int]], size: int) -> int:
    """The start of the smallest gap between busy ranges that holds `size`, else the top."""
    best: tuple[int, int] | None = None  # (gap length, offset)
    pos = 0
    for start, end in busy:
        if start - pos >= size and (best is None or start - pos < best[0]):
            best = (start - pos, pos)
        pos = max(pos, end)
    return pos if best is None else best[1]


def _overlapping(lives: list[TensorLife]) -> dict[int, list[TensorLife]]:
    """For each tensor, the tensors whose lifetimes overlap its own (a sweep over starts)."""
    near: dict[int, list[TensorLife]] = {t.value: [] for t in lives}
    active: list[TensorLife] = []
    for t in sorted(lives, key=lambda t: (t.start, t.value)):
        active = [a for a in active if a.end >= t.start]
        for a in active:
            near[a.value].append(t)
            near[t.value].append(a)
        active.append(t)
    return near


def _take(ranges: list[tuple[int, int]], lo: int, hi: int) -> None:
    """Add [lo, hi) to sorted, disjoint, non-touching `ranges`, merging what it meets."""
    i = bisect_left(ranges, (lo,))
    if i > 0 and ranges[i - 1][1] >= lo:
        i -= 1
    j = i
    while j < len(ranges) and ranges[j][0] <= hi:
        lo, hi = min(lo, ranges[j][0]), max(hi, ranges[j][1])
        j += 1
    ranges[i:j] = [(lo, hi)]


class _Layout:
    """Offsets placed so far, and for each unplaced tensor the merged byte ranges its neighbours take."""

    def __init__(self, p: _Problem) -> None:
        self.p = p
        self.offsets: dict[int, int] = {}
        self.busy: dict[int, list[tuple[int, int]]] = {t.value: [] for t in p.lives}

    def put(self, t: TensorLife, pos: int) -> None:
        self.offsets[t.value] = pos
        for o in self.p.near[t.value]:
            if o.value not in self.offsets:
                _take(self.busy[o.value], pos, pos + self.p.size[t.value])

    def first_fit(self, t: TensorLife) -> int:
        return _first_fit(self.busy[t.value], self.p.size[t.value])


class _Problem:
    """One planning problem, prepared once and placed in many orders.

    A tensor live beside every other one (mutable state, an input read by the last
    instruction) shares bytes with none, so any plan can move such tensors to the bottom
    and the rest down by as much, at no cost. They are set aside in `pinned`, stacked
    largest first, and the orderings and overlap lists only hold the rest (`lives`).
    """

    def __init__(self, lives: list[TensorLife], alignment: int, pin: bool = True) -> None:
        self.size = {t.value: _align(t.nbytes, alignment) for t in lives}
        first_end, last_start = min((t.end for t in lives), default=0), max((t.start for t in lives), default=0)
        pinned = [t for t in lives if pin and t.start <= first_end and t.end >= last_start]
        self.pinned = sorted(pinned, key=lambda t: (-self.size[t.value], t.value))
        self.base = sum(self.size[t.value] for t in pinned)
        aside = set(pinned)
        self.lives = [t for t in lives if t not in aside]
        self.near = _overlapping(self.lives)
        self.pressure = _pressure(self.lives, self.size)

    def place(self, order: list[TensorLife], fit: Fit) -> dict[int, int]:
        """Place tensors one by one in `order`, each where `fit` puts it among its neighbours."""
        placed: dict[int, int] = {}
        size = self.size
        for t in order:
            near = self.near[t.value]
            busy = sorted((placed[o.value], placed[o.value] + size[o.value]) for o in near if o.value in placed)
            placed[t.value] = fit(busy, size[t.value])
        offsets, pos = {}, 0
        for t in self.pinned:
            offsets[t.value], pos = pos, pos + size[t.value]
        return offsets | {v: off + self.base for v, off in placed.items()}

    def bottom_up_order(self, key: SortKey) -> list[TensorLife]:
        """The order that places, each time, the tensor whose first fit is lowest (ties: `key`).

        A tensor's first fit only rises as others are placed, and only when one lands on the
        slot it would take; such a tensor is marked stale and re-checked when it comes up.
        """
        layout, stale, order = _Layout(self), set[int](), list[TensorLife]()
        slot = {t.value: 0 for t in self.lives}
        heap = [(0, key(t), i) for i, t in enumerate(self.lives)]
        heapq.heapify(heap)
        while heap:
            pos, k, i = heapq.heappop(heap)
            t = self.lives[i]
            if t.value in stale:
                stale.discard(t.value)
                slot[t.value] = layout.first_fit(t)
                heapq.heappush(heap, (slot[t.value], k, i))
                continue
            layout.put(t, pos)
            order.append(t)
            end = pos + self.size[t.value]
            stale.update(
                o.value for o in self.near[t.value]
                if o.value not in layout.offsets and slot[o.value] < end and pos < slot[o.value] + self.size[o.value]
            )
        return order

    def arena(self, offsets: dict[int, int]) -> int:
        return max((off + self.size[v] for v, off in offsets.items()), default=0)


def _pressure(lives: list[TensorLife], size: dict[int, int]) -> dict[int, int]:
    """For each tensor, the most bytes live at any instruction of its lifetime."""
    events: dict[int, int] = {}
    for t in lives:
        events[t.start] = events.get(t.start, 0) + size[t.value]
        events[t.end + 1] = events.get(t.end + 1, 0) - size[t.value]
    points = sorted(events)
    live, running = [], 0
    for pc in points:
        running += events[pc]
        live.append(running)
    return {t.value: max(live[bisect_left(points, t.start):bisect_right(points, t.end)], default=0) for t in lives}


def _orderings(p: _Problem) -> dict[str, SortKey]:
    """Named priorities; each sorts the most constrained tensors first."""
    size, pressure = p.size, p.pressure

    def length(t: TensorLife) -> int:
        return t.end - t.start + 1

    return {
        "pressure": lambda t: (-pressure[t.value], -size[t.value], t.start, t.value),
        "size": _greedy_key,
        "size_length": lambda t: (-size[t.value], -length(t), t.value),
        "area": lambda t: (-size[t.value] * length(t), t.start, t.value),
        "pressure_area": lambda t: (-pressure[t.value], -size[t.value] * length(t), t.value),
        "length": lambda t: (-length(t), -size[t.value], t.value),
        "start": lambda t: (t.start, -size[t.value], t.value),
        "end": lambda t: (-t.end, -size[t.value], t.value),
    }


def bottom_up(lives: list[TensorLife], alignment: int) -> dict[int, int]:
    """Repeatedly place the tensor that can go lowest; ties: the one in the busiest stretch, then the largest."""
    p = _Problem(lives, alignment)
    return p.place(p.bottom_up_order(_orderings(p)["pressure"]), _first_fit)


def _perturbed(order: list[TensorLife], rng: random.Random) -> list[TensorLife]:
    """The order with a few tensors moved a short way earlier or later."""
    out = list(order)
    for _ in range(max(1, len(out) // 16)):
        i = rng.randrange(len(out))
        j = min(len(out) - 1, max(0, i + rng.randint(-4, 4)))
        out.insert(j, out.pop(i))
    return out


def _candidates(p: _Problem) -> list[tuple[list[TensorLife], Fit]]:
    """The orderings `search` starts from: every priority with best and first fit, then bottom-up."""
    keys = _orderings(p)
    out: list[tuple[list[TensorLife], Fit]] = []
    for key in keys.values():
        order = sorted(p.lives, key=key)
        out += [(order, _first_fit), (order, _best_fit)]
    out += [(p.bottom_up_order(keys[name]), _first_fit) for name in ("pressure", "pressure_area", "area", "size")]
    return out


def _improve(p: _Problem, order: list[TensorLife], fit: Fit, offsets: dict[int, int]) -> dict[int, int]:
    """Seeded perturbations of `order`, each kept only when it shrinks the arena.

    At most SEARCH_ROUNDS, fewer when a placement visits so many tensors and overlapping
    pairs that the rounds would cost more than SEARCH_BUDGET visits.
    """
    cost = len(p.lives) + sum(len(near) for near in p.near.values())
    rng = random.Random(SEARCH_SEED)
    for _ in range(min(SEARCH_ROUNDS, SEARCH_BUDGET // max(cost, 1)) if len(order) > 1 else 0):
        tried = _perturbed(order, rng)
        placed = p.place(tried, fit)
        if p.arena(placed) < p.arena(offsets):
            order, offsets = tried, placed
    return offsets


def search(lives: list[TensorLife], alignment: int) -> dict[int, int]:
    """Try every candidate ordering, improve the best by perturbation; keep the smallest arena.

    The work is bounded (20 candidate placements, then `_improve`), and the seed is fixed, so
    the result is deterministic. Greedy's own plan is the last candidate: search never loses to it.
    """
    p = _Problem(lives, alignment)
    plans = [(order, fit, p.place(order, fit)) for order, fit in _candidates(p)]
    order, fit, offsets = min(plans, key=lambda plan: p.arena(plan[2]))
    offsets = _improve(p, order, fit, offsets)
    as_greedy = _Problem(lives, alignment, pin=False).place(sorted(lives, key=_greedy_key), _first_fit)
    return as_greedy if p.arena(as_greedy) < p.arena(offsets) else offsets


def best(lives: list[TensorLife], alignment: int) -> dict[int, int]:
    """Run every other planner; keep the smallest arena (ties: the first in PLANNERS)."""
    chosen: tuple[int, dict[int, int]] | None = None
    for name, planner in PLANNERS.items():
        if name != "best":
            offsets = planner(lives, alignment)
            size = arena_size(lives, offsets, alignment)
            if chosen is None or size < chosen[0]:
                chosen = (size, offsets)
    return {} if chosen is None else chosen[1]


PLANNERS: dict[str, Planner] = {
    "greedy": greedy, "naive": naive, "bottom_up": bottom_up, "search": search, "best": best,
}


def arena_size(lives: list[TensorLife], offsets: dict[int, int], alignment: int) -> int:
    """The bytes an arena needs to hold every placed tensor."""
    return max((_align(offsets[t.value] + t.nbytes, alignment) for t in lives), default=0)
