"""The runtime's one multi-threaded loop, compiled by numba with `parallel=True` (see `native.parallel_loops`).

A one-row product through a float filter reads every weight once per call, so its time is the time to stream
the filter from cache. One core's L2 does not hold the filters of a chain of such products (the zoo mlp's
784 → 512 → 256: 2.1 MB against 2 MB), so each call reads them from L3 again; split by output across the
cores, each core keeps its part of every filter in its own L2 from call to call. OpenBLAS does not split a
product this small (784 × 512: 26 µs at one thread and at two). Measured on that chain (/tmp scripts):
53 µs through BLAS, 26 µs in these loops on two threads, 54 on one.
"""

from __future__ import annotations

import numba
import numpy as np

F = np.float32


@numba.njit(cache=True, nogil=True, parallel=True, error_model="numpy", fastmath={"reassoc", "contract"})
def row_dots(w: np.ndarray, x: np.ndarray, bias: np.ndarray, out: np.ndarray) -> None:
    """out[n] = bias[n] + Σ_k w[n, k] · x[k], the outputs split across numba's threads. w (N, K) float32
    C-contiguous; x (K,); bias, out (N,). Each sum is reassociated (so it vectorizes): not BLAS's bits."""
    for n in numba.prange(out.shape[0]):
        total = F(0)
        for k in range(x.shape[0]):
            total += w[n, k] * x[k]
        out[n] = total + bias[n]
