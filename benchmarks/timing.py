"""The timing helper the benchmark scripts share (torch-free)."""

from __future__ import annotations

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
