"""The timing helpers the benchmark scripts share (torch-free; the fresh-process child imports torch
and ExecuTorch's runtime in its own process only).

    python benchmarks/timing.py executorch PTE INPUTS.npz RUNS WARMUP THREADS   (the child)
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
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


def executorch_fresh_us(pte: Path, inputs_npz: Path, runs: int, warmup: int = 5, threads: int = 1) -> float:
    """The median wall time (µs) of `forward` of `pte` in ExecuTorch's runtime, measured in a fresh
    Python process that loads nothing else (no etbuild, no exir, no other program): nothing one
    program did (caches warmed, memory grown, libraries loaded) flatters or burdens the next.
    `inputs_npz` holds the inputs as `in0`, `in1`, …; torch's and ExecuTorch's thread pools get
    `threads` threads (0: their defaults). Raises RuntimeError with the child's last stderr line when it fails."""
    argv = [sys.executable, str(Path(__file__).resolve()), "executorch", str(pte), str(inputs_npz), str(runs),
            str(warmup), str(threads)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise RuntimeError(f"{Path(pte).name} could not be timed in ExecuTorch's runtime: {last}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["median_us"])


def _executorch_child(pte: str, inputs_npz: str, runs: str, warmup: str, threads: str) -> None:
    """The child of `executorch_fresh_us`: load, warm up, time, print one JSON line."""
    import executorch.kernels.quantized  # noqa: F401  (the quantized_decomposed kernels, as the guide asks)
    import numpy as np
    import torch
    from executorch.extension.pybindings import _C  # the runtime without importing exir (seconds of start-up)

    if int(threads):  # 0: every library's default
        torch.set_num_threads(int(threads))
        _C._unsafe_reset_threadpool(int(threads))
    data = Path(pte).read_bytes()  # the loaded program reads these bytes: keep them alive
    module = _C._load_for_executorch_from_buffer(data)
    with np.load(inputs_npz) as npz:
        args = tuple(torch.from_numpy(npz[f"in{k}"]) for k in range(len(npz.files)))
    us = median_us(lambda: module.run_method("forward", args), int(runs), int(warmup))
    print(json.dumps({"median_us": us, "threads": _C._threadpool_get_thread_count()}))


if __name__ == "__main__":
    if len(sys.argv) != 7 or sys.argv[1] != "executorch":
        sys.exit("usage: python benchmarks/timing.py executorch PTE INPUTS.npz RUNS WARMUP THREADS")
    _executorch_child(*sys.argv[2:7])
