"""Fused float32 loops compiled by numba, for the steps numpy can only do in many passes.

numpy runs a chain of elementwise operations one pass over memory per operation; for GELU that is
19 passes, for a layer norm's rows about 12, for rounding onto an int8 grid four, where a compiled
loop makes one or three (and on small arrays numpy's cost is its dispatch per call). When numba
is importable these loops are compiled on first use (cached on disk beside this file) and the
kernels and the XNNPACK runtime bind them; without numba, or with ETBUILD_NATIVE=0 in the
environment, `loops()` is None and every caller keeps its numpy path. Trimmed runtimes are numpy-only:
the selective build does not ship the loops' module (it is imported by name, out of the tree shaker's sight).

The grid roundings give numpy's bits. GELU, sigmoid and layer norm are deterministic on a machine
and within a few float32 ulp of their numpy paths, not bit-identical to them: a kernel and its
load-time fast path call the same loop.
"""

from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType

import numpy as np

# GELU: x·Φ(x) = h + h·erf(x/√2) with h = x/2, erf(x/√2) ≈ u·P(u²)/Q(u²) on u = x clamped to
# ±GELU_CLAMP and then clamped to [-1, 1]. P (degree 5) and Q (degree 5, Q(0) = 1) were fitted to
# erf(t)/t on t ∈ [0, 4] by linearised least squares on 20,001 points, reweighted toward the minimax
# relative error (Loeb's iteration, then Lawson's weights): 2.5e-8 in exact arithmetic; then scaled
# from t to x = t·√2. In float32 erf(x/√2) is within 3.6e-7 of the exact value and GELU within
# 1.1e-6 absolute (torch's float32 gelu: 1.2e-6), tested against float64 in tests/kernels/test_native.py.
GELU_P = (
    0.7978845238685608, 0.06842729449272156, 0.009387081488966942,
    0.0003432310186326504, 1.2576176231959835e-05, 4.3903622071184145e-08,
)
GELU_Q = (
    1.0, 0.2524271607398987, 0.028837157413363457,
    0.001900873496197164, 7.40966570447199e-05, 1.1694036174958455e-06,
)
GELU_CLAMP = 5.147101  # where u·P(u²)/Q(u²) reaches 1.0f: beyond it erf(x/√2) is exactly ±1

# Up to this many elements the sigmoid loop (a libm exp per element) beats numpy's four vectorized
# passes, whose cost on small arrays is their dispatch (measured: 0.4–0.7 µs against 1.1 µs for 64–192).
SMALL_SIGMOID = 512


def enabled() -> bool:
    """False when ETBUILD_NATIVE=0 asks for the numpy paths."""
    return os.environ.get("ETBUILD_NATIVE", "1") != "0"


def loops() -> ModuleType | None:
    """The compiled loops (module `native_loops`), or None without numba or when disabled."""
    return _compiled() if enabled() else None


@functools.cache
def _compiled() -> ModuleType | None:
    try:
        return importlib.import_module("etbuild.kernels.native_loops")
    except ImportError:  # no numba (or an incompatible one); in a trimmed runtime, no native_loops
        return None


def flat_pair(x: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """x and out as flat float32 views for an elementwise loop: both float32 and C-contiguous, of one
    size, either disjoint or the same memory (the loops read x[i] before they write out[i]); else None."""
    if not (x.dtype == out.dtype == np.float32 and x.size == out.size and x.flags.c_contiguous
            and out.flags.c_contiguous):
        return None
    if np.may_share_memory(x, out) and x.ctypes.data != out.ctypes.data:
        return None
    return x.reshape(-1), out.reshape(-1)


def warm() -> None:
    """Compile every loop now (or load it from numba's disk cache): on a machine's first use each takes
    about a second to compile, which otherwise lands on the first call that binds it. No-op without numba."""
    fused = loops()
    if fused is None:
        return
    x, out, row = np.ones(4, np.float32), np.empty(4, np.float32), np.ones(2, np.float32)
    fused.gelu(x, out)
    fused.sigmoid(x, out)
    fused.snap_to_grid(out, np.float32(1), np.float32(1), np.float32(-1), np.float32(1))
    fused.snap_rows_qdint8(out.reshape(2, 2))
    fused.layer_norm(x.reshape(2, 2), row, row, np.float32(1e-5), out.reshape(2, 2), row.copy(), row.copy())
