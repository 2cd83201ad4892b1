"""The accuracy search behind both `fallback: auto` keys: the fewest candidates, in a given order, a judge passes.

A search has an order of candidates (the precision steps of `quantize.accuracy.fallback`, most dB per byte
first; the layers `verify.fallback` keeps float, most sensitive first) and a `Judge`: `measure` applies the first
k candidates and measures the result, `passes` says whether a measurement meets the search's target. The
candidates are taken to help more the more are applied, so `fewest` goes up from a start in doubling steps (or
one at a time) and halves back to the fewest that pass. Each key brings its own judges: the observed graph's
gate and the converted graph's (`search.py`), agreement with a layer swapped float and agreement converted again
(`etbuild.llm.fallback`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

C = TypeVar("C")
M = TypeVar("M")


@dataclass(frozen=True)
class Judge(Generic[C, M]):
    """`measure(first k candidates)` -> a measurement; `passes(measurement)` -> whether it meets the target."""

    measure: Callable[[Sequence[C]], M]
    passes: Callable[[M], bool]


def fewest(order: Sequence[C], judge: Judge[C, M], start: int = 0, doubling: bool = True) -> tuple[int, M]:
    """The fewest first candidates of `order`, at least `start`, whose measurement passes (all of them when none
    does) and that measurement: upward in doubling steps (one at a time when not `doubling`), then halving back
    between the last count that failed and the first that passed."""
    end = len(order)
    failed, step, k = start - 1, 1, start
    found = judge.measure(order[:k])
    while not judge.passes(found) and k < end:
        failed, k = k, min(end, k + step)
        step *= 2 if doubling else 1
        found = judge.measure(order[:k])
    while k - failed > 1 and judge.passes(found):
        middle = (failed + k) // 2
        trial = judge.measure(order[:middle])
        if judge.passes(trial):
            found, k = trial, middle
        else:
            failed = middle
    return k, found
