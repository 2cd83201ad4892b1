"""Which layout of a constant float32 filter the BLAS in use multiplies faster: [K, N] (a plain sgemm) or [N, K]
read transposed (sgemm with a transposed b), measured once per product shape in the process.

BLAS libraries disagree, and the gap is large on a transformer's products (128 rows × 256 @ 256 × 1024 and its
kin, one thread, filters that the other steps have pushed out of the core's caches; the 2-core AMD EPYC guest the
benchmarks run on): numpy 2.4's OpenBLAS 0.3.31 takes the whole of a 4-layer encoder's products in 9.1 ms from
[K, N] and 10.5 ms from [N, K]; numpy 2.1's OpenBLAS 0.3.27 takes 10.9 and 10.1 ms. No rule by name or version
would carry to the next release or another machine's kernels, so `kn_faster` times both on the shape it is
asked about, in a process of its own making, and keeps the answer.

The probe multiplies private operands (never a program's memory): a random [M, K] input by as many copies of a
random filter as fill PROBE_BYTES, in each layout, so that each product reads a filter that is not in the core's
caches, as in a program, where every step evicts the last one's data. It times the rounds after a first one,
through the very call a bound product makes (`blas._one_call` on one thread: the runtime's BLAS library where the
options take one, else numpy's). The two layouts must give the same bits, or the default stays: the answer then
changes only speed, never a result. About 30 ms a shape.
"""

from __future__ import annotations

import functools
import time

import numpy as np

from etbuild.kernels.numerics import blas
from etbuild.runtime import hugepages, threads

PROBE_BYTES = 4 << 20  # filter copies per timing: more than a core's L2 (1–2 MB), within its L3
PROBE_ROWS = 128  # more input rows than this are timed at this many: the layout's gain holds per row block
LARGEST = 64 << 20  # a larger filter keeps the default layout (the probe would hold two more copies)
SMALLEST_MACS = 1 << 18  # below this, a product costs a few µs whichever layout it reads
ROUNDS = 3  # the first one warms the calls up and is not timed


def kn_faster(m: int, k: int, n: int, default: bool) -> bool:
    """Whether [M, K] @ [K, N] runs faster from a [K, N] filter than from an [N, K] one read transposed, with the
    BLAS the current options bind (`threads.current`); `default` for products too small or too large to time, and
    where the two layouts give other bits."""
    if m < 2 or m * k * n < SMALLEST_MACS or k * n * 4 > LARGEST:
        return default
    chosen = blas._usable()
    return _measured(chosen.name if chosen is not None else None, min(m, PROBE_ROWS), k, n, default)


@functools.cache
def _measured(library: str | None, m: int, k: int, n: int, default: bool) -> bool:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k), dtype=np.float32)
    filters = rng.standard_normal((n, k), dtype=np.float32)
    copies = max(1, min(32, -(-PROBE_BYTES // filters.nbytes)))
    arena = hugepages.Arena()  # huge pages as a program's filters have, in a mapping of its own (freed after)
    by_output = [arena.copy(filters) for _ in range(copies)]
    by_input = [arena.copy(filters.T) for _ in range(copies)]
    outs = np.empty((2, m, n), np.float32)
    calls = [[blas._one_call(np.dot, x, w, outs[0]) for w in by_input],
             [blas._one_call(np.dot, x, w.T, outs[1]) for w in by_output]]
    best = [float("inf"), float("inf")]
    with threads.single_threaded:
        for r in range(ROUNDS):
            for layout in (r % 2, 1 - r % 2):
                start = time.perf_counter()
                for call in calls[layout]:
                    call()
                if r:
                    best[layout] = min(best[layout], time.perf_counter() - start)
    if not np.array_equal(outs[0], outs[1]):
        return default
    return best[0] < best[1]

