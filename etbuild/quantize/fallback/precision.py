"""The steps that buy accuracy with bytes: a layer one step up in precision, int4 → int8 → float.

A step's cost is the weight bytes it adds, as the program stores them: float 4 bytes a weight;
int8 1 byte a weight plus a float32 scale per output channel (per tensor: one); int4 half a
byte a weight plus a float32 scale per group of `group_size`. Biases stay float either way and
an op without a weight (add, matmul) costs nothing. Steps are ordered by dB gained per byte
added, most first (free steps first, by gain), and a layer's int8 → float step never comes
before its int4 → int8 one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

INT4, INT8, FLOAT = "int4", "int8", "float"
LADDER = (INT4, INT8, FLOAT)


@dataclass(frozen=True)
class Step:
    """Layer `node` from precision `before` to `after`; `bytes_added` weight bytes; `gain_db`
    the output SNR it gains alone (measured from the state before any step)."""

    node: str
    before: str
    after: str
    bytes_added: int
    gain_db: float

    @property
    def change(self) -> str:
        return f"{self.before}->{self.after}"


def weight_bytes(weight: torch.Tensor | None, precision: str, per_channel: bool, group_size: int) -> int:
    """Bytes of a layer's weight stored at `precision` (0 without a weight)."""
    if weight is None:
        return 0
    n = weight.numel()
    if precision == FLOAT:
        return 4 * n
    if precision == INT8:
        return n + 4 * (weight.shape[0] if per_channel else 1)
    return math.ceil(n / 2) + 4 * (n // group_size)


def ordered(steps: Sequence[Step]) -> list[Step]:
    """`steps` most dB per byte first, each layer's steps in ladder order."""
    ranked = sorted(steps, key=_priority)
    done: set[tuple[str, str]] = set()
    waiting: dict[tuple[str, str], Step] = {}
    result: list[Step] = []
    for step in ranked:
        if step.before != LADDER[0] and (step.node, step.before) not in done and _has_lower(step, steps):
            waiting[step.node, step.before] = step
            continue
        _emit(step, result, done, waiting)
    return result + list(waiting.values())


def _emit(step: Step, result: list[Step], done: set[tuple[str, str]], waiting: dict[tuple[str, str], Step]) -> None:
    result.append(step)
    done.add((step.node, step.after))
    follower = waiting.pop((step.node, step.after), None)
    if follower is not None:
        _emit(follower, result, done, waiting)


def _has_lower(step: Step, steps: Sequence[Step]) -> bool:
    return any(s.node == step.node and s.after == step.before for s in steps)


def _priority(step: Step) -> tuple[int, float]:
    """Sort key: steps that gain come first, free ones by gain, others by bytes per dB; then the rest."""
    if step.gain_db <= 0 or math.isnan(step.gain_db):
        return (2, -step.gain_db if not math.isnan(step.gain_db) else math.inf)
    if step.bytes_added <= 0:
        return (0, -step.gain_db)
    return (1, step.bytes_added / step.gain_db)
