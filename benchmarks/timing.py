"""The timing helper the benchmark scripts share (torch-free)."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any


def median_us(fn: Callable[[], Any], runs: int, warmup: int = 5) -> float:
    """The median wall time of fn over `runs` calls after `warmup` calls, in microseconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def interleaved_us(contenders: dict[str, Callable[[], Any]], runs: int, warmup: int = 5) -> dict[str, float]:
    """The median wall time of each contender (µs) over `runs` rounds that call each once, who goes
    first alternating round by round: on a shared machine drift, and the cost of running right
    after another program, hit each alike.

    The objects made before (exported and lowered models, often millions) are first frozen out of
    Python's cyclic collector, whose passes otherwise scale with them and land on whichever call
    allocates: a cost of the benchmark's process, not of a runtime.
    """
    gc.collect()
    gc.freeze()
    try:
        for fn in contenders.values():
            for _ in range(warmup):
                fn()
        times: dict[str, list[float]] = {name: [] for name in contenders}
        order = list(contenders)
        for i in range(runs):
            for name in order if i % 2 == 0 else order[::-1]:
                t = time.perf_counter()
                contenders[name]()
                times[name].append(time.perf_counter() - t)
    finally:
        gc.unfreeze()
    return {name: statistics.median(ts) * 1e6 for name, ts in times.items()}
