"""Float32 matrix products bound once: through Intel's MKL when it is installed, else numpy's BLAS.

numpy's OpenBLAS is about a fifth slower than MKL (the BLAS eager torch calls) on the products of
a transformer's layers, at one thread and at two (128 × 256 × 1024: 410 against 506 µs at one
thread, 228 against 304 at two; docs/runtime-speed.md). The `mkl` package from PyPI (a dependency
on Linux x86-64) ships `libmkl_rt`; when it is found, a product of at least MIN_MACS multiply-adds
whose operands are float32 matrices with a unit stride along one axis (transposed ones included) and
do not overlap its output is bound to one `cblas_sgemm` call (a stack of them, broadcast ones too,
to one `cblas_sgemm_batch_strided`), its pointers and sizes fixed at bind. Anything else keeps the
numpy call it was given.

MKL runs its threads on GNU OpenMP, the pool numba's parallel loops use (etbuild.kernels.native
picks numba's `omp` layer), so a program's products and loops share one pool of threads as eager
torch's do; two pools spinning on the same cores cost several times the products (docs/runtime-speed.md,
"One pool of threads, not two"). Without GNU OpenMP in the process MKL is not used. ETBUILD_BLAS=numpy
(or ETBUILD_NATIVE=0, every step on numpy) keeps numpy's BLAS; ETBUILD_BLAS=PATH names a `libmkl_rt`.

This module is numpy-only (no torch): the runtime binds its products through it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from etbuild.kernels import native

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS_LAYOUT and CBLAS_TRANSPOSE values
THREADING_GNU, INTERFACE_LP64 = 3, 0  # mkl_service's MKL_THREADING_GNU and MKL_INTERFACE_LP64
INT_MAX = 2**31 - 1  # MKL_INT under the LP64 interface
# Products of fewer multiply-adds stay with numpy: its BLAS's small-matrix kernels and cheaper call win there
# (64 × 64 × 64: 4.3 against 6.1 µs, one thread; 1 × 256 × 256: 3.7 against 4.6), MKL from about a million.
MIN_MACS = 1 << 20

Product = Callable[..., Any]


def bound_product(product: Product, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> Callable[[], Any]:
    """A call computing out = a @ b, as `product(a, b, out)` (np.matmul or np.dot) would: through MKL's
    sgemm when MKL is loaded in this process and the product is one it takes (module docstring), else that
    numpy call bound as given."""
    call = _sgemm_call(a, b, out)
    return call if call is not None else functools.partial(product, a, b, out)


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out = a @ b now, through the product `bound_product` would bind (a kernel's unbound path, so its bits
    match its bound one)."""
    bound_product(np.matmul, a, b, out)()


def _usable() -> ctypes.CDLL | None:
    """MKL when it may run here: loaded by this process (GNU OpenMP's threads do not survive a fork, so a
    forked child keeps numpy's BLAS) and outside `native.numpy_paths()` (a few calls do not repay its load)."""
    if not native.enabled():
        return None
    found = library()
    return found[0] if found is not None and found[1] == os.getpid() else None


@functools.cache
def library() -> tuple[ctypes.CDLL, int] | None:
    """libmkl_rt, loaded and set to the LP64 interface and GNU OpenMP threads, and the process that loaded it;
    None when it is not installed, when ETBUILD_BLAS=numpy, or when GNU OpenMP cannot be loaded."""
    wanted = os.environ.get("ETBUILD_BLAS", "").strip()
    paths = [wanted] if wanted else _candidates()
    if wanted == "numpy" or not paths:
        return None
    try:
        ctypes.CDLL(ctypes.util.find_library("gomp") or "libgomp.so.1", mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return None
    for path in paths:
        try:
            mkl = ctypes.CDLL(path)
            _declare(mkl)
        except (OSError, AttributeError):  # not loadable, or an MKL without the batched product (before 2020)
            continue
        if os.environ.get("MKL_INTERFACE_LAYER") is None:
            mkl.MKL_Set_Interface_Layer(INTERFACE_LP64)
        if os.environ.get("MKL_THREADING_LAYER") is None:
            mkl.MKL_Set_Threading_Layer(THREADING_GNU)
        return mkl, os.getpid()
    return None


def _candidates() -> list[str]:
    """Where pip puts libmkl_rt (the environment's lib folder), then the loader's search path."""
    found = sorted(str(p) for p in Path(sys.prefix, "lib").glob("libmkl_rt.so*"))
    system = ctypes.util.find_library("mkl_rt")
    return found + ([system] if system else [])


def _declare(mkl: ctypes.CDLL) -> None:
    i, f, p = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    mkl.cblas_sgemm.argtypes = [i, i, i, i, i, i, f, p, i, p, i, f, p, i]
    mkl.cblas_sgemm.restype = None
    mkl.cblas_sgemm_batch_strided.argtypes = [i, i, i, i, i, i, f, p, i, i, p, i, i, f, p, i, i, i]
    mkl.cblas_sgemm_batch_strided.restype = None


def _matrix(x: np.ndarray) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) of a float32 matrix view with a unit stride along one axis; None
    if neither axis has one. A dimension of one has no stride of its own: its leading dimension is free."""
    rows, cols = x.shape[-2:]
    s0, s1 = (s // 4 for s in x.strides[-2:])
    if s1 == 1 or cols == 1:
        ld = s0 if rows > 1 else cols
        return (NO_TRANS, ld) if ld >= max(1, cols) else None
    if s0 == 1 or rows == 1:
        ld = s1 if cols > 1 else rows
        return (TRANS, ld) if ld >= max(1, rows) else None
    return None


def _batch_stride(x: np.ndarray, batch: tuple[int, ...]) -> int | None:
    """The one element stride between consecutive matrices of x's batch dims (flattened), or None."""
    if x.shape[:-2] != batch:
        return None
    stride, size = None, 1
    for n, s in zip(reversed(batch), reversed(x.strides[:-2]), strict=True):
        if n == 1:
            continue
        if stride is None:
            stride = s
        elif s != stride * size:
            return None
        size *= n
    return 0 if stride is None else stride // 4


def _sgemm_call(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> Callable[[], Any] | None:
    """One cblas_sgemm (or cblas_sgemm_batch_strided) call computing out = a @ b, or None when MKL does not take
    this product: not float32 matrices with unit inner strides, out overlapping an operand, batch dims that do not
    flatten to one stride, fewer than MIN_MACS multiply-adds, or MKL not usable here (loaded only once a product
    qualifies)."""
    if not (a.dtype == b.dtype == out.dtype == np.float32) or min(a.ndim, b.ndim) < 2:
        return None
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = out.shape[:-2]
    if b.shape[-2] != k or out.shape[-2:] != (m, n) or out.ndim < max(a.ndim, b.ndim):
        return None
    count = int(np.prod(batch))
    if count * m * n * k < MIN_MACS or max(a.size, b.size, out.size) > INT_MAX:
        return None
    if np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return None
    try:
        a_, b_ = (np.broadcast_to(x, (*batch, *x.shape[-2:])) for x in (a, b))
    except ValueError:
        return None
    ta, tb, to = _matrix(a_), _matrix(b_), _matrix(out)
    if ta is None or tb is None or to is None or to[0] != NO_TRANS:
        return None
    views = (a_, b_, out)
    if any(s % 4 or s < 0 for x in views for s in x.strides) or not all(x.flags.aligned for x in views):
        return None
    mkl = _usable()
    if mkl is None:
        return None
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    pa, pb, po = (ctypes.c_void_p(x.ctypes.data) for x in (a_, b_, out))
    sizes = [ctypes.c_int(v) for v in (m, n, k)]
    if count == 1:
        call = functools.partial(mkl.cblas_sgemm, ROW_MAJOR, ta[0], tb[0], *sizes, alpha, pa, ta[1], pb, tb[1],
                                 beta, po, to[1])
    else:
        strides = [_batch_stride(x, batch) for x in (a_, b_, out)]
        if any(s is None for s in strides) or strides[2] == 0:
            return None
        call = functools.partial(mkl.cblas_sgemm_batch_strided, ROW_MAJOR, ta[0], tb[0], *sizes, alpha,
                                 pa, ta[1], strides[0], pb, tb[1], strides[1], beta, po, to[1], strides[2], count)
    call.arrays = (a, b, out)  # type: ignore[attr-defined]  # the memory its pointers address, kept alive
    return call
