"""Fused float32 loops compiled by numba, for the steps numpy can only do in many passes.

numpy runs a chain of elementwise operations one pass over memory per operation; for GELU that is
19 passes, for a layer norm's rows about 12, for rounding onto an int8 grid four, where a compiled
loop makes one or three (and on small arrays numpy's cost is its dispatch per call). When numba
is importable these loops are compiled on first use (cached on disk beside this file) and the
kernels and the XNNPACK runtime bind them; without numba, or with ETBUILD_NATIVE=0 in the
environment, `loops()` is None and every caller keeps its numpy path. Trimmed runtimes are numpy-only:
the selective build does not ship the loops' module (it is imported by name, out of the tree shaker's sight).

The grid roundings give numpy's bits. GELU (its rational erf: GELU_P, GELU_Q in
etbuild.kernels.numerics.erf), sigmoid and layer norm are deterministic on a machine
and within a few float32 ulp of their numpy paths, not bit-identical to them: a kernel and its
load-time fast path call the same loop.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
from collections.abc import Iterator
from types import ModuleType

import numpy as np

# Up to this many elements the sigmoid loop (a libm exp per element) beats numpy's four vectorized
# passes, whose cost on small arrays is their dispatch (measured: 0.4–0.7 µs against 1.1 µs for 64–192).
SMALL_SIGMOID = 512
F32 = np.float32
# numba's threading layers in the order we take them: GNU OpenMP first, the pool MKL's products run on
# (etbuild.kernels.numerics.blas), so loops and products share one pool of threads even where TBB is installed
# (numba's own order puts TBB first; the mkl package brings it).
THREADING_LAYERS = ("omp", "tbb", "workqueue")


_numpy_only = 0  # open `numpy_paths()` blocks


def enabled() -> bool:
    """False when ETBUILD_NATIVE=0 asks for the numpy paths, or inside a `numpy_paths()` block."""
    return not _numpy_only and os.environ.get("ETBUILD_NATIVE", "1") != "0"


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


def parallel_loops() -> ModuleType | None:
    """The multi-threaded loop (module `native_parallel`), or None: without numba or when disabled, when the
    process may use one thread (numba's count, or OMP_NUM_THREADS when it is set lower), when numba's only
    threading layer is its workqueue (which aborts the process when two threads launch loops at once), or in
    a process forked from one that had it (GNU OpenMP's threads do not survive a fork)."""
    if loops() is None or threads() < 2:
        return None
    found = _parallel_compiled()
    if found is None or found[1] != os.getpid():
        return None
    return found[0]


def threads() -> int:
    """The threads numba's parallel loops may use: numba's count, capped by OMP_NUM_THREADS when it is set."""
    import numba

    _prefer_gnu_openmp(numba)
    count, wanted = numba.get_num_threads(), os.environ.get("OMP_NUM_THREADS", "").strip()
    return min(count, int(wanted)) if wanted.isdigit() and int(wanted) > 0 else count


def _prefer_gnu_openmp(numba: ModuleType) -> None:
    """Put THREADING_LAYERS first for numba's threads, unless the user chose a layer: before numba starts them (its
    first count of threads does), and in the environment too, which numba reads again at each compilation."""
    if not any(os.environ.get(v) for v in ("NUMBA_THREADING_LAYER", "NUMBA_THREADING_LAYER_PRIORITY")):
        os.environ["NUMBA_THREADING_LAYER_PRIORITY"] = " ".join(THREADING_LAYERS)
        numba.config.THREADING_LAYER_PRIORITY = list(THREADING_LAYERS)


@functools.cache
def _parallel_compiled() -> tuple[ModuleType, int] | None:
    """The module with its loop compiled (or loaded) and run once, and the process that ran it."""
    try:
        import numba

        module = importlib.import_module("etbuild.kernels.native_parallel")
        one = np.ones(1, np.float32)
        module.row_dots(one.reshape(1, 1), one, one, one.copy())
        if numba.threading_layer() == "workqueue":
            return None
    except (ImportError, ValueError, RuntimeError):  # no numba, or no threading layer it can start
        return None
    return module, os.getpid()


def xnn_loops() -> ModuleType | None:
    """XNNPACK's AVX512F sigmoid, reciprocal square root, sine and cosine loops (module `native_xnn`, bit for
    bit ExecuTorch's runtime on such a CPU), or None without numba, when disabled, or on a CPU without AVX512F
    (there XNNPACK picks other microkernels, and the XNNPACK runtime keeps its own forms: see
    backends/xnnpack/runtime/ops/elementwise.py)."""
    return _xnn_compiled() if enabled() and loops() is not None else None


@functools.cache
def _xnn_compiled() -> ModuleType | None:
    try:
        from llvmlite import binding

        if not binding.get_host_cpu_features().get("avx512f", False):
            return None
        return importlib.import_module("etbuild.kernels.native_xnn")
    except (ImportError, RuntimeError):  # no llvmlite, or it cannot read this host's features
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
    fused.bias_gelu_rows(out.reshape(2, 2), row)
    fused.bias_add_rows(out.reshape(2, 2), row, x.reshape(2, 2))
    fused.softmax_rows(x.reshape(2, 2), np.float32(1), np.float32(1), out.reshape(2, 2))
    fused.sigmoid(x, out)
    fused.snap_to_grid(out, np.float32(1), np.float32(1), np.float32(-1), np.float32(1))
    fused.snap_rows_qdint8(out.reshape(2, 2))
    fused.layer_norm(x.reshape(2, 2), row, row, np.float32(1e-5), out.reshape(2, 2), row.copy(), row.copy())
    fused.grouped_matvec(np.ones((2, 2), np.int8), row.reshape(1, 2), row, row, row.copy(), row.copy())
    fused.fma_matvec(np.ones((2, 2), np.float32), row, row, row.copy())
    codes, params = np.zeros(2, np.int32), np.ones(2, np.float32)
    fused.snap_row_qdint8_codes(row.copy(), codes, params)
    fused.qd8_qb4w_matvec(np.zeros((8, 2), np.uint8), np.zeros((1, 2), np.float32), row, np.zeros(16, np.int32),
                          params, row, np.zeros(2, np.int32), np.zeros(2, np.int16), np.zeros(2, np.int16), row.copy())
    warm_convolution(fused)
    xnn = xnn_loops()
    if xnn is not None:
        xnn.sigmoid(x, out, xnn.EXP2_TABLE, out.copy())
        xnn.rsqrt(x, out)
        xnn.sin(x, out)
        xnn.cos(x, out)


def warm_convolution(fused: ModuleType) -> None:
    """Compile (or load) the XNNPACK convolutions' loops: depthwise, bias and clamp epilogues."""
    x, taps, bias, lo = np.zeros((1, 1, 1, 1), F32), np.zeros((1, 1, 1), F32), np.zeros(1, F32), F32(0)
    fused.depthwise_nhwc(x, taps, bias, np.empty_like(x), (1, 1), (1, 1), (0, 0), 1, lo, lo)
    fused.bias_clamp_rows(x.reshape(1, 1), bias, lo, lo)
    fused.bias_clamp_blocks(x.reshape(1, 1, 1), bias, lo, lo, x.reshape(1, 1))
    fused.clamp(bias, lo, lo)
