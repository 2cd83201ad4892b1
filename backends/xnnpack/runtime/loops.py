"""The XNNPACK runtime's compiled loops, when numba's loops are on for the program being bound
(etbuild.kernels.native.loops): `compiled()` (module `compiled`: epilogues, grid roundings, softmax, depthwise
convolution, one-row products) and `exact()` (module `exact`: XNNPACK's AVX512F sigmoid, reciprocal square root,
sine and cosine, on a CPU with AVX512F). Without numba, or bound with `native=False`, both are None and every op
keeps its numpy form. Imported by name, so a trimmed runtime without numba never loads them.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

import numpy as np

from etbuild.kernels import native

F = np.float32


def compiled() -> ModuleType | None:
    """The backend's numba loops, or None without numba or when numba's loops are off."""
    return _compiled() if native.loops() is not None else None


@functools.cache
def _compiled() -> ModuleType | None:
    try:
        return importlib.import_module("etbuild.backends.xnnpack.runtime.compiled")
    except ImportError:  # no numba (or an incompatible one)
        return None


def exact() -> ModuleType | None:
    """XNNPACK's AVX512F elementwise loops (its bits), or None without numba, when numba's loops are off, or on a
    CPU without AVX512F (there XNNPACK picks other microkernels and the ops keep their own forms)."""
    return _exact() if compiled() is not None else None


@functools.cache
def _exact() -> ModuleType | None:
    try:
        from llvmlite import binding

        if not binding.get_host_cpu_features().get("avx512f", False):
            return None
        return importlib.import_module("etbuild.backends.xnnpack.runtime.exact")
    except (ImportError, RuntimeError):  # no llvmlite, or it cannot read this host's features
        return None


def warm() -> None:
    """Compile every loop now (or load it from numba's disk cache): on a machine's first use each takes about a
    second to compile, which otherwise lands on the first call that binds it. No-op without numba."""
    fused = compiled()
    if fused is None:
        return
    x, out, row = np.ones(4, F), np.empty(4, F), np.ones(2, F)
    fused.bias_gelu_rows(out.reshape(2, 2), row)
    fused.bias_add_rows(out.reshape(2, 2), row, x.reshape(2, 2))
    fused.softmax_rows(x.reshape(2, 2), F(1), F(1), out.reshape(2, 2))
    fused.snap_to_grid(out, F(1), F(1), F(-1), F(1))
    fused.snap_rows_qdint8(out.reshape(2, 2))
    fused.grouped_matvec(np.ones((2, 2), np.int8), row.reshape(1, 2), row, row, row.copy(), row.copy())
    fused.fma_matvec(np.ones((2, 2), F), row, row, row.copy())
    fused.row_dots(np.ones((2, 2), F), row, row, row.copy())
    fused.tiled_matvec(fused.pack_tiles(np.ones((2, 2), F)), row, row, row.copy())
    codes, params = np.zeros(2, np.int32), np.ones(2, F)
    fused.snap_row_qdint8_codes(row.copy(), codes, params)
    fused.qd8_qb4w_matvec(np.zeros((8, 2), np.uint8), np.zeros((1, 2), F), row, np.zeros(16, np.int32), params,
                          row, np.zeros(2, np.int32), np.zeros(2, np.int16), np.zeros(2, np.int16), row.copy())
    warm_convolution(fused)
    xnn = exact()
    if xnn is not None:
        xnn.sigmoid(x, out, xnn.EXP2_TABLE, out.copy())
        xnn.rsqrt(x, out)
        xnn.sin(x, out)
        xnn.cos(x, out)
        importlib.import_module("etbuild.backends.xnnpack.runtime.chain_loops").warm()


def warm_convolution(fused: ModuleType) -> None:
    """Compile (or load) the convolutions' loops: depthwise, bias and clamp epilogues."""
    x, taps, bias, lo = np.zeros((1, 1, 1, 1), F), np.zeros((1, 1, 1), F), np.zeros(1, F), F(0)
    fused.depthwise_nhwc(x, taps, bias, np.empty_like(x), (1, 1), (1, 1), (0, 0), 1, lo, lo)
    fused.bias_clamp_rows(x.reshape(1, 1), bias, lo, lo)
    fused.bias_clamp_blocks(x.reshape(1, 1, 1), bias, lo, lo, x.reshape(1, 1))
    fused.clamp(bias, lo, lo)
