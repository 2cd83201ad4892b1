"""Fused float32 loops compiled by numba, for the steps numpy can only do in many passes.

numpy runs a chain of elementwise operations one pass over memory per operation; for GELU that is
19 passes, for a layer norm's rows about 12, for rounding onto an int8 grid four, where a compiled
loop makes one or three (and on small arrays numpy's cost is its dispatch per call). When numba
is importable these loops are compiled on first use (cached on disk beside this file) and the
kernels and the XNNPACK runtime bind them; without numba, or for a program loaded with `native=False`
(etbuild.runtime.threads.NumericOptions), `loops()` is None and every caller keeps its numpy path. Trimmed
runtimes are numpy-only: the selective build does not ship the loops' module (it is imported by name, out of
the tree shaker's sight).

The grid roundings give numpy's bits. GELU (its rational erf: GELU_P, GELU_Q in
etbuild.kernels.numerics.erf) and layer norm are deterministic on a machine
and within a few float32 ulp of their numpy paths, not bit-identical to them: a kernel and its
load-time fast path call the same loop.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Iterator
from types import ModuleType

import numpy as np

from etbuild.runtime import threads

_numpy_only = 0  # open `numpy_paths()` blocks


def enabled() -> bool:
    """False for kernels bound with `native=False` options, or inside a `numpy_paths()` block."""
    return not _numpy_only and threads.current().native


@contextlib.contextmanager
def numpy_paths() -> Iterator[None]:
    """Kernels bound in this block take their numpy paths: for a program loaded to run a few times in a
    process that has not used numba yet, where numba's start (its registries and cache, about half a
    second) costs more than its loops save."""
    global _numpy_only
    _numpy_only += 1
    try:
        yield
    finally:
        _numpy_only -= 1


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
    """Compile the loops now (or load them from numba's disk cache): on a machine's first use each takes about a
    second to compile, which otherwise lands on the first call that binds it. No-op without numba. (A backend's
    own loops have a warm() of their own, e.g. etbuild.backends.xnnpack.runtime.loops.warm.)"""
    fused = loops()
    if fused is None:
        return
    x, out, row = np.ones(4, np.float32), np.empty(4, np.float32), np.ones(2, np.float32)
    fused.gelu(x, out)
    fused.layer_norm(x.reshape(2, 2), row, row, np.float32(1e-5), out.reshape(2, 2), row.copy(), row.copy())
    cache = np.ones((1, 2, 1, 2), np.float32)
    fused.rows_attention(x.reshape(1, 1, 2, 2), cache, cache, 1, True, np.float32(1), out.reshape(1, 1, 2, 2))
    fused.sequential_means(x.reshape(2, 2), np.float32(2), row)
