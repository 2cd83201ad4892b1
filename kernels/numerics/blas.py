"""Float32 matrix products bound once: split over the program's pool of threads, each block one BLAS call on one
thread, through a BLAS library of the runtime's own where the options allow it (on an Intel processor Intel's MKL
when the `mkl` extra is installed, else the OpenBLAS of the `scipy-openblas32` package), else numpy's BLAS.

Threads come from one place, the pool (etbuild.runtime.threads): a product of at least SPLIT_MACS multiply-adds
and enough rows is cut into blocks of rows that the calling thread and the pool's workers claim one at a time, so
a busy core costs at most its share. BLAS itself never starts threads inside a program's call: MKL is set to its
sequential layer (it then holds no OpenMP state, and a forked child may call it), the packaged OpenBLAS to one
thread when it is loaded, and numpy's OpenBLAS is held at one thread while a program runs
(`threads.single_threaded` around each call, the previous count restored after, never a setting left behind). A
static split by BLAS's own threads waits for its slowest thread: beside a busy process that is a scheduler time
slice per product (docs/runtime-speed.md).

Why a library of our own: numpy's BLAS is whichever OpenBLAS the environment's numpy ships, and an environment that
pins an older numpy (the ethos-u extra's tosa-tools: numpy < 2.2, OpenBLAS 0.3.27) multiplies a transformer's
float32 products about 10% slower on the Zen 4 guest the benchmarks run on than scipy-openblas32 0.3.34 (24 products
of 128 rows × 256 or 1024, one thread, either filter layout: 10.2-11.0 against 9.4-9.9 ms). A product of at least
LIBRARY_MACS multiply-adds whose operands are float32 matrices with a unit stride along one axis (transposed ones
included) and that do not overlap its output is bound to one `cblas_sgemm` call (a stack of them to one
`cblas_sgemm_batch_strided`), its pointers and sizes fixed at bind. Anything else keeps the numpy call it was given.

This module is numpy-only (no torch): the runtime binds its products through it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from etbuild.kernels import native
from etbuild.runtime import threads

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS_LAYOUT and CBLAS_TRANSPOSE values
THREADING_SEQUENTIAL, INTERFACE_LP64 = 1, 0  # mkl_service's MKL_THREADING_SEQUENTIAL and MKL_INTERFACE_LP64
INT_MAX = 2**31 - 1  # MKL_INT under the LP64 interface
# Products of fewer multiply-adds stay with numpy: its BLAS's small-matrix kernels and cheaper call win there
# (MKL: 64 × 64 × 64 4.3 against 6.1 µs, one thread; 1 × 256 × 256 3.7 against 4.6), a library from about a million.
LIBRARY_MACS = 1 << 20
# A product is split over threads from this many multiply-adds (about 0.1 ms on one core), into blocks of at least
# BLOCK_MACS and BLOCK_ROWS rows: a block's call and claim cost a few µs, and each thread must have blocks enough.
SPLIT_MACS, BLOCK_MACS, BLOCK_ROWS = 1 << 22, 1 << 20, 16
# Claimed without the GIL (kernels/pool_loops.py) a split costs a few µs: products from FAST_SPLIT_MACS (about 25 µs
# on one core) and FEW_ROWS rows split by columns (a vision transformer's 17 tokens × 192 @ 192 × 768).
FAST_SPLIT_MACS, FEW_ROWS = 1 << 21, 8
STACK_MACS = 1 << 16  # a stack of products is split one matrix a block when each has at least this many
BLOCK_COLS = 16  # a column block's width is a multiple of this: whole 64-byte lines of b and out

Product = Callable[..., Any]


def bound_product(product: Product, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> Callable[[], Any]:
    """A call computing out = a @ b, as `product(a, b, out)` (np.matmul or np.dot) would, with the options kernels
    bind with now (etbuild.runtime.threads.current): split over the pool when large enough (`_blocks`), each block
    through the runtime's BLAS library (`_usable`) where it takes it, else the numpy call as given."""
    count, by_columns = _blocks(a, b, out)
    if count < 2:
        stack = _stack_split(a, b, out)
        return stack if stack is not None else _one_call(product, a, b, out)
    views = _block_views(a, b, out, count, by_columns)
    calls = [_one_call(np.matmul if by_columns else product, *view, minimum=0) for view in views]  # np.dot: no
    return _split(calls, views, (a, b, out), _table(views))  # strided out


def _split(calls: list[Callable[[], Any]], views: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
           arrays: tuple[np.ndarray, ...], table: np.ndarray | None) -> Callable[[], None]:
    """One step running the blocks over the pool: the table's BLAS calls claimed without the GIL where there is
    one, else the Python calls (`Pool.run`)."""
    pool = threads.pool(threads.current().thread_count)
    if table is not None:  # claimed and run without the GIL (kernels/pool_loops.py)
        def split() -> None:
            pool.run_table(table)

        split.table, split.arrays = table, arrays  # type: ignore[attr-defined]  # its addresses' memory
    else:
        run, blocks = pool.run, len(calls)

        def split() -> None:
            run(lambda i: calls[i](), blocks)

    split.calls = calls  # type: ignore[attr-defined]  # the blocks, for tests and the profiler
    return split


def bound_stack(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> Callable[[], Any]:
    """out = a @ b over a stack of matrices (batch dims broadcast), one sgemm call per matrix (for an out whose
    matrices interleave, which MKL's strided batch call refuses): a table of them over the pool, claimed without
    the GIL (on the calling thread alone at one thread), else one `bound_product` per matrix in turn."""
    a_, b_ = (np.broadcast_to(x, (*out.shape[:-2], *x.shape[-2:])) for x in (a, b))
    views = [(a_[i], b_[i], out[i]) for i in np.ndindex(*out.shape[:-2])]
    table = _table(views) if native.enabled() and not np.may_share_memory(out, a) \
        and not np.may_share_memory(out, b) else None
    calls = [bound_product(np.matmul, *view) for view in views]
    if table is not None and threads.current().thread_count > 1:
        return _split(calls, views, (a, b, out), table)
    if table is not None:
        run_all = threads.compiled_loops().run_all

        def products() -> None:
            run_all(table)
    else:
        def products() -> None:
            for call in calls:
                call()

    products.arrays = (a, b, out)  # type: ignore[attr-defined]  # the memory the table addresses
    return products


def _stack_split(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> Callable[[], None] | None:
    """A stack of products (attention's heads) of at least SPLIT_MACS in all and STACK_MACS each, one block a
    matrix, when the options give it threads and the pool's compiled side takes the table; else None (one call)."""
    if threads.current().thread_count < 2 or out.ndim < 3 or not native.enabled():
        return None
    found = _operands(a, b, out, SPLIT_MACS)
    if found is None or found[2] < 2 or a.shape[-2] * a.shape[-1] * b.shape[-1] < STACK_MACS:
        return None
    a_, b_, _ = found
    views = [(a_[i], b_[i], out[i]) for i in np.ndindex(out.shape[:-2])]
    table = _table(views)
    if table is None:
        return None
    return _split([_one_call(np.matmul, *view, minimum=0) for view in views], views, (a, b, out), table)


def _block_views(a: np.ndarray, b: np.ndarray, out: np.ndarray, count: int,
                 by_columns: bool) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(a, b, out) of each block: count blocks of columns (each packs only its columns of b: a row block would
    pack all of b again), their width a multiple of BLOCK_COLS, or of rows."""
    if by_columns:
        per_block = -(-b.shape[1] // count)
        width = -(-per_block // BLOCK_COLS) * BLOCK_COLS
        return [(a, b[:, c:c + width], out[:, c:c + width]) for c in range(0, b.shape[1], width)]
    rows = -(-a.shape[0] // count)
    return [(a[r:r + rows], b, out[r:r + rows]) for r in range(0, a.shape[0], rows)]


def _table(views: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> np.ndarray | None:
    """The blocks as a table of cblas_sgemm calls for the pool's compiled side (kernels/pool_loops.py), through
    the runtime's BLAS library where the options take one, else numpy's own OpenBLAS (its cblas_sgemm, the function
    numpy's matmul calls); None without numba's loops, without a BLAS whose address is known, or for operands sgemm
    does not take."""
    loops = threads.compiled_loops()
    found = _sgemm_address()
    if loops is None or found is None:
        return None
    address, width = found
    table = np.zeros((len(views), loops.FIELDS), np.int64)
    for row, (a, b, out) in zip(table, views, strict=True):
        fields = _gemm_fields(a, b, out)
        if fields is None:
            return None
        row[:len(fields) + 2] = (address, width, *fields)
    if width == 64 and any(_openblas_threads(*view[:2]) for view in views):
        threads.note_numpy_blas()
    return table


def _gemm_fields(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> tuple[int, ...] | None:
    """(ta, tb, m, n, k, a, lda, b, ldb, out, ldout) of one row-major sgemm computing out = a @ b, for 2-D float32
    operands with a unit stride along one axis, out with unit column stride and disjoint from both; else None."""
    if not (a.dtype == b.dtype == out.dtype == np.float32) or not (a.ndim == b.ndim == out.ndim == 2):
        return None
    if min(a.shape) == 0 or b.shape[1] == 0 or np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return None
    ta, tb, to = _matrix(a), _matrix(b), _matrix(out)
    if ta is None or tb is None or to is None or to[0] != NO_TRANS or max(a.size, b.size, out.size) > INT_MAX:
        return None
    if any(s % 4 or s < 0 for x in (a, b, out) for s in x.strides) or not all(x.flags.aligned for x in (a, b, out)):
        return None
    return (ta[0], tb[0], a.shape[0], b.shape[1], a.shape[1], a.ctypes.data, ta[1], b.ctypes.data, tb[1],
            out.ctypes.data, to[1])


def _sgemm_address() -> tuple[int, int] | None:
    """(address, integer width) of the cblas_sgemm that split products call: the runtime's BLAS library's (32-bit
    integers) when the options take one, else numpy's bundled OpenBLAS's (ILP64: 64); None when neither is found."""
    chosen = _usable()
    if chosen is not None:
        return ctypes.cast(chosen.sgemm, ctypes.c_void_p).value, 32
    return _numpy_sgemm()


@functools.cache
def _numpy_sgemm() -> tuple[int, int] | None:
    """numpy's own OpenBLAS's cblas_sgemm (the library in numpy.libs that numpy loaded), or None."""
    lib = threads.numpy_openblas()
    for name, width in (("scipy_cblas_sgemm64_", 64), ("cblas_sgemm64_", 64)):
        if lib is not None and hasattr(lib, name):
            return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value, width
    return None


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out = a @ b now, through the product `bound_product` would bind (a kernel's unbound path, so its bits
    match its bound one)."""
    bound_product(np.matmul, a, b, out)()


def _blocks(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> tuple[int, bool]:
    """How many blocks to split out = a @ b into, and whether by columns (out has at least as many columns as rows
    and overlaps neither operand) or by rows: 2-D operands and out, threads to run them, at least SPLIT_MACS
    multiply-adds and 2 × BLOCK_ROWS rows, or, where blocks are claimed without the GIL (`_fast`), FAST_SPLIT_MACS
    and FEW_ROWS rows by columns (fewer rows, a decode step's, stay on the calling thread: bound by memory, they
    gain nothing from a second core); else 1. Either way each output element is one BLAS call's sum over all of k."""
    workers = threads.current().thread_count
    if workers < 2 or a.ndim != 2 or b.ndim != 2 or out.ndim != 2 or not native.enabled():
        return 1, False
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    by_columns = n >= m and not (np.may_share_memory(out, a) or np.may_share_memory(out, b))
    fast = by_columns and m >= FEW_ROWS and _fast()
    if m * k * n < (FAST_SPLIT_MACS if fast else SPLIT_MACS) or not out.flags.c_contiguous \
            or (m < 2 * BLOCK_ROWS and not fast):
        return 1, False
    most = n // BLOCK_COLS if by_columns else m // BLOCK_ROWS
    return max(1, min(4 * workers if not by_columns else workers, m * k * n // BLOCK_MACS, most)), by_columns


def _fast() -> bool:
    """Whether split products are claimed without the GIL here (numba's loops and a BLAS function address)."""
    return threads.compiled_loops() is not None and _sgemm_address() is not None


def _one_call(product: Product, a: np.ndarray, b: np.ndarray, out: np.ndarray,
              minimum: int = LIBRARY_MACS) -> Callable[[], Any]:
    """One BLAS call: the runtime's library's sgemm for a product of at least `minimum` multiply-adds that it takes,
    else numpy's."""
    call = _sgemm_call(a, b, out, minimum)
    if call is not None:
        return call
    if _openblas_threads(a, b):
        threads.note_numpy_blas()
    return functools.partial(product, a, b, out)


def _openblas_threads(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether OpenBLAS would run a @ b on threads of its own: a matrix product of more than 2^18 multiply-adds, or
    a matrix–vector product over at least 9,216 weights (its interface's thresholds)."""
    m, k, n = (a.shape[-2] if a.ndim > 1 else 1), a.shape[-1], (b.shape[-1] if b.ndim > 1 else 1)
    return m * k * n > (1 << 18) if min(m, n) > 1 else m * k * n >= 9216


@dataclasses.dataclass(frozen=True)
class Library:
    """A BLAS library the runtime calls through its C interface, with 32-bit integers: its name ("mkl" or
    "openblas"), `cblas_sgemm`, and `cblas_sgemm_batch_strided` (None where it has none)."""

    name: str
    sgemm: Any
    batch: Any | None


def _usable() -> Library | None:
    """The library the options kernels bind with take, with numba's loops on: for blas "auto" on an Intel processor
    MKL (the `mkl` extra) else the packaged OpenBLAS, on any other the packaged OpenBLAS else MKL; for "mkl" or a
    path MKL alone, for "openblas" the packaged OpenBLAS alone; None (numpy's BLAS) for "numpy" and where the one
    asked for is not installed."""
    options = threads.current()
    if not native.enabled() or options.blas == "numpy":
        return None
    if options.blas == "openblas":
        return _openblas()
    if options.blas != "auto":
        return _mkl(options.blas)
    if intel_cpu():
        return _mkl("auto") or _openblas()
    return _openblas() or _mkl("auto")


@functools.cache
def intel_cpu() -> bool:
    """Whether the processor is Intel's (`vendor_id` in /proc/cpuinfo). MKL picks its kernels by processor: on an AMD
    Zen 4 with AVX-512 its verbose mode names its generic "Intel(R) Architecture processors" code path, and it runs
    the transformer 3-5% slower than OpenBLAS's AVX-512 kernels. True where the file cannot be read (the `mkl` extra
    installs on Linux alone)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip() == "GenuineIntel"
    except OSError:
        pass
    return True


@functools.cache
def _mkl(wanted: str) -> Library | None:
    lib = library(wanted)
    return Library("mkl", lib.cblas_sgemm, lib.cblas_sgemm_batch_strided) if lib is not None else None


@functools.cache
def _openblas() -> Library | None:
    lib = packaged_openblas()
    if lib is None:
        return None
    batch = getattr(lib, "scipy_cblas_sgemm_batch_strided", None)  # OpenBLAS 0.3.30 and later
    _declare_products(lib.scipy_cblas_sgemm, batch)
    return Library("openblas", lib.scipy_cblas_sgemm, batch)


@functools.cache
def packaged_openblas() -> ctypes.CDLL | None:
    """The OpenBLAS of the `scipy-openblas32` package (32-bit integers, symbols prefixed `scipy_`), loaded and set to
    one thread (threads are the pool's; it is the runtime's alone, numpy and scipy ship their own copies); None
    when the package is not installed, not importable here (a trimmed runtime's import guard), or its library does
    not load."""
    try:
        spec = importlib.util.find_spec("scipy_openblas32")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for path in sorted(Path(folder, "lib").glob("libscipy_openblas*")):
            if path.suffix not in (".so", ".dylib", ".dll"):
                continue
            try:
                lib = ctypes.CDLL(str(path))
                lib.scipy_openblas_set_num_threads.argtypes = [ctypes.c_int]
                lib.scipy_openblas_set_num_threads(1)
                lib.scipy_cblas_sgemm  # noqa: B018  # an OpenBLAS without the C interface is not one to use
            except (OSError, AttributeError):
                continue
            return lib
    return None


@functools.cache
def library(wanted: str = "auto") -> ctypes.CDLL | None:
    """libmkl_rt, loaded and set to the LP64 interface and its sequential layer (threads are the pool's); None
    when it is not installed (the `mkl` extra), cannot be loaded, or runs another threading layer already (another
    library in the process started it first). wanted: "auto"/"mkl" (where pip puts it, then the loader's search
    path) or a path."""
    paths = _candidates() if wanted in ("auto", "mkl") else [wanted]
    for path in paths:
        try:
            mkl = ctypes.CDLL(path)
            _declare_products(mkl.cblas_sgemm, mkl.cblas_sgemm_batch_strided)
            mkl.MKL_Set_Threading_Layer.argtypes = [ctypes.c_int]
            mkl.MKL_Set_Threading_Layer.restype = ctypes.c_int
        except (OSError, AttributeError):  # not loadable, or an MKL without the batched product (before 2020)
            continue
        mkl.MKL_Set_Interface_Layer(INTERFACE_LP64)
        if mkl.MKL_Set_Threading_Layer(THREADING_SEQUENTIAL) != THREADING_SEQUENTIAL:
            return None
        return mkl
    return None


def _candidates() -> list[str]:
    """Where pip puts libmkl_rt (the environment's lib folder), then the loader's search path."""
    found = sorted(str(p) for p in Path(sys.prefix, "lib").glob("libmkl_rt.so*"))
    system = ctypes.util.find_library("mkl_rt")
    return found + ([system] if system else [])


def _declare_products(sgemm: Any, batch: Any | None) -> None:
    """The argument types of cblas_sgemm and cblas_sgemm_batch_strided with 32-bit integers (MKL's LP64, OpenBLAS's
    default): the same in both libraries."""
    i, f, p = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    sgemm.argtypes, sgemm.restype = [i, i, i, i, i, i, f, p, i, p, i, f, p, i], None
    if batch is not None:
        batch.argtypes, batch.restype = [i, i, i, i, i, i, f, p, i, i, p, i, i, f, p, i, i, i], None


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


def _operands(a: np.ndarray, b: np.ndarray, out: np.ndarray,
              minimum: int) -> tuple[np.ndarray, np.ndarray, int] | None:
    """a and b broadcast to out's batch and the number of matrices, when a library may take the product: float32
    matrices, at least `minimum` multiply-adds, out not overlapping an operand; else None."""
    if not (a.dtype == b.dtype == out.dtype == np.float32) or min(a.ndim, b.ndim) < 2:
        return None
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = out.shape[:-2]
    if b.shape[-2] != k or out.shape[-2:] != (m, n) or out.ndim < max(a.ndim, b.ndim):
        return None
    count = int(np.prod(batch))
    if count * m * n * k < minimum or max(a.size, b.size, out.size) > INT_MAX:
        return None
    if np.may_share_memory(out, a) or np.may_share_memory(out, b):
        return None
    try:
        a_, b_ = (np.broadcast_to(x, (*batch, *x.shape[-2:])) for x in (a, b))
    except ValueError:
        return None
    return a_, b_, count


def _sgemm_call(a: np.ndarray, b: np.ndarray, out: np.ndarray, minimum: int = LIBRARY_MACS) -> Callable[[], Any] | None:
    """One cblas_sgemm (or cblas_sgemm_batch_strided) call of the runtime's library computing out = a @ b, or None
    when it does not take this product (see `_operands`; also a stack of matrices of fewer than `minimum`
    multiply-adds each, which numpy's BLAS runs faster than MKL's strided batch: 8 × [9, 160] @ [160, 160] 42
    against 67 µs, 2 × 3 × [64, 96] @ [96, 64] 43 against 55, one thread; operands without unit inner strides,
    batch dims that do not flatten to one stride, a stack where the library has no batch call) or when the options
    take no library (loaded only once a product qualifies)."""
    found = _operands(a, b, out, minimum)
    if found is None or a.shape[-2] * a.shape[-1] * b.shape[-1] < minimum:  # a stack: each matrix that large too
        return None
    a_, b_, count = found
    ta, tb, to = _matrix(a_), _matrix(b_), _matrix(out)
    if ta is None or tb is None or to is None or to[0] != NO_TRANS:
        return None
    views = (a_, b_, out)
    if any(s % 4 or s < 0 for x in views for s in x.strides) or not all(x.flags.aligned for x in views):
        return None
    chosen = _usable()
    if chosen is None or (count > 1 and chosen.batch is None):
        return None
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    pa, pb, po = (ctypes.c_void_p(x.ctypes.data) for x in views)
    sizes = [ctypes.c_int(v) for v in (a.shape[-2], b.shape[-1], a.shape[-1])]
    if count == 1:
        call = functools.partial(chosen.sgemm, ROW_MAJOR, ta[0], tb[0], *sizes, alpha, pa, ta[1], pb, tb[1],
                                 beta, po, to[1])
    else:
        strides = [_batch_stride(x, out.shape[:-2]) for x in views]
        if any(s is None for s in strides) or strides[2] < to[1] * out.shape[-2]:
            return None  # MKL refuses (and skips) outputs whose matrices interleave: bound_stack writes those
        call = functools.partial(chosen.batch, ROW_MAJOR, ta[0], tb[0], *sizes, alpha,
                                 pa, ta[1], strides[0], pb, tb[1], strides[1], beta, po, to[1], strides[2], count)
    call.arrays = (a, b, out)  # type: ignore[attr-defined]  # the memory its pointers address, kept alive
    return call

