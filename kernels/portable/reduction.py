"""Reductions: sum, mean, prod, amax/amin, argmax/argmin, max/min with indices, var/std,
any/all, cumsum/cumprod, logsumexp, vector norms.

`dim` None (or [] for the IntList overloads) reduces every dim, as in torch; integer and
bool sums and products accumulate in int64 unless a `dtype` code says otherwise.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels import native
from etbuild.kernels.portable.common import (
    INT64,
    NATIVE,
    cast,
    float_dtype,
    opmath,
    quiet,
    reduce_axes,
    store,
    vector_norm,
    wrap_dim,
)
from etbuild.runtime.kernel_registry import ALL_DTYPES, FLOAT_DTYPES, REAL_DTYPES, kernel
from etbuild.runtime.tensor import numpy_dtype

Dims = Sequence[int] | int | None


def _acc_dtype(x: np.ndarray, dtype: int | None) -> np.dtype:
    """The dtype a sum/prod accumulates in: the `dtype` argument, else int64 for integers."""
    if dtype is not None:
        return numpy_dtype(dtype)
    return x.dtype if x.dtype.kind == "f" else INT64


def _reduce(
    fn: Callable[..., np.ndarray], x: np.ndarray, dim: Dims, keepdim: bool, ct: np.dtype, out: np.ndarray, **kw: object
) -> np.ndarray:
    axes = reduce_axes(dim, x.ndim)
    return store(out, fn(cast(x, opmath(ct)), axis=axes, keepdims=keepdim, **kw))


def _sum_into(x: np.ndarray, axes: tuple[int, ...], keepdim: bool, ct: np.dtype, out: np.ndarray) -> bool:
    """out = Σ x over axes in one add.reduce straight into out, when that is exactly what the
    general path (np.sum of x cast to ct, then copied into out) computes; False otherwise.

    Integer and bool sums into int64 are exact in any order; a float32/float64 sum is the same
    only with no cast and with x and out C-contiguous, so numpy iterates as it would for a
    result it allocates itself (summation order decides float rounding; the tests in
    tests/kernels/test_fast_paths.py compare the two bit for bit).
    """
    if out.dtype != ct:
        return False
    if ct == INT64:
        if x.dtype.kind not in "biu":
            return False
    elif not (x.dtype == ct and ct in NATIVE and x.flags.c_contiguous and out.flags.c_contiguous):
        return False
    try:
        np.add.reduce(x, axis=axes, dtype=ct, keepdims=keepdim, out=out)
    except ValueError:  # out has another shape (dynamic): the general path resizes
        return False
    return True


@kernel("aten::sum.IntList_out", dtypes=ALL_DTYPES)
def sum_intlist_out(
    x: np.ndarray, dim: list[int] | None, keepdim: bool, dtype: int | None, out: np.ndarray
) -> np.ndarray:
    ct = _acc_dtype(x, dtype)
    if _sum_into(x, reduce_axes(dim, x.ndim), keepdim, ct, out):
        return out
    return _reduce(np.sum, x, dim, keepdim, _acc_dtype(x, dtype), out)


@kernel("aten::sum.out", dtypes=ALL_DTYPES)
def sum_out(x: np.ndarray, dtype: int | None, out: np.ndarray) -> np.ndarray:
    return _reduce(np.sum, x, None, False, _acc_dtype(x, dtype), out)


@kernel("aten::prod.int_out", dtypes=ALL_DTYPES)
def prod_int_out(x: np.ndarray, dim: int, keepdim: bool, dtype: int | None, out: np.ndarray) -> np.ndarray:
    return _reduce(np.prod, x, dim, keepdim, _acc_dtype(x, dtype), out)


@kernel("aten::prod.out", dtypes=ALL_DTYPES)
def prod_out(x: np.ndarray, dtype: int | None, out: np.ndarray) -> np.ndarray:
    return _reduce(np.prod, x, None, False, _acc_dtype(x, dtype), out)


# aten::mean as ExecuTorch's portable kernel computes it (op_mean.cpp, checked against its runtime): per output,
# the reduced elements summed one after another in index order, in the output dtype (float32 for float16), then
# divided by the count in that dtype. numpy's add.reduce sums pairwise and in SIMD lanes: other last bits.


def _mean_plan(x: np.ndarray, axes: tuple[int, ...], ct: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """x with the reduced axes moved last and flattened into one, [outer, count] (a view when it can be), and
    the count as a scalar of the accumulation dtype."""
    acc = opmath(ct)
    kept = [a for a in range(x.ndim) if a not in axes]
    count = math.prod(x.shape[a] for a in axes)
    rows = x.transpose(kept + list(axes)).reshape(math.prod(x.shape[a] for a in kept), count)
    return rows, acc.type(np.float32(count))


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdim: bool) -> tuple[int, ...]:
    """The shape of a reduction of `shape` over `axes`: those dims 1 (keepdim) or gone."""
    return tuple(1 if a in axes else n for a, n in enumerate(shape) if keepdim or a not in axes)


def _sequential_means(rows: np.ndarray, count: np.generic, scratch: np.ndarray, means: np.ndarray) -> None:
    """means[i] = (rows[i, 0] + rows[i, 1] + ... in order, in scratch's dtype) / count; rows [outer, count > 0]."""
    np.add.accumulate(rows, axis=1, dtype=scratch.dtype, out=scratch)
    np.divide(scratch[:, -1], count, out=means)


def _mean_fast(x: np.ndarray, dim: list[int] | None, keepdim: bool, dtype: int | None,
               out: np.ndarray) -> Callable[[], None] | None:
    """mean_out bound at load for a native float dtype, no cast, C-contiguous x reduced over its last axes
    into a C-contiguous out of the result's shape: the same sums and division into preallocated scratch."""
    ct = numpy_dtype(dtype) if dtype is not None else x.dtype
    if ct != x.dtype or ct not in NATIVE or out.dtype != ct or not (x.flags.c_contiguous and out.flags.c_contiguous):
        return None
    axes = reduce_axes(dim, x.ndim)
    shape = _reduced_shape(x.shape, axes, keepdim)
    if axes != tuple(range(x.ndim - len(axes), x.ndim)) or out.shape != shape or not x.size:
        return None
    rows, count = _mean_plan(x, axes, ct)
    fused = native.loops() if ct == np.float32 and rows.dtype == np.float32 else None
    if fused is not None:  # one compiled call: the same sums in the same order
        return functools.partial(fused.sequential_means, rows, count, out.reshape(-1))
    return functools.partial(_sequential_means, rows, count, np.empty(rows.shape, ct), out.reshape(-1))


@kernel("aten::mean.out", dtypes=FLOAT_DTYPES, fast=_mean_fast)
@quiet
def mean_out(x: np.ndarray, dim: list[int] | None, keepdim: bool, dtype: int | None, out: np.ndarray) -> np.ndarray:
    """The mean over dim in ExecuTorch's order (above); an empty reduction gives NaN."""
    ct = numpy_dtype(dtype) if dtype is not None else x.dtype
    axes = reduce_axes(dim, x.ndim)
    rows, count = _mean_plan(x, axes, ct)
    means = np.empty(rows.shape[0], count.dtype)
    if rows.shape[1]:
        _sequential_means(rows, count, np.empty(rows.shape, count.dtype), means)
    else:
        means.fill(np.nan)
    shape = _reduced_shape(x.shape, axes, keepdim)
    return store(out, means.reshape(shape))


def _extreme(fn: Callable[..., np.ndarray], x: np.ndarray, dim: Dims, keepdim: bool, out: np.ndarray) -> np.ndarray:
    axes = reduce_axes(dim, x.ndim)
    if any(x.shape[a] == 0 for a in axes) and x.ndim:
        raise KernelError(f"cannot take the max/min over an empty dim of {list(x.shape)}")
    return store(out, fn(x, axis=axes, keepdims=keepdim))


@kernel("aten::amax.out", dtypes=ALL_DTYPES)
def amax_out(x: np.ndarray, dim: list[int], keepdim: bool, out: np.ndarray) -> np.ndarray:
    return _extreme(np.max, x, dim, keepdim, out)


@kernel("aten::amin.out", dtypes=ALL_DTYPES)
def amin_out(x: np.ndarray, dim: list[int], keepdim: bool, out: np.ndarray) -> np.ndarray:
    return _extreme(np.min, x, dim, keepdim, out)


@kernel("aten::max.unary_out", dtypes=ALL_DTYPES)
def max_unary_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return _extreme(np.max, x, None, False, out)


@kernel("aten::min.unary_out", dtypes=ALL_DTYPES)
def min_unary_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return _extreme(np.min, x, None, False, out)


def _arg(fn: Callable[..., np.ndarray], x: np.ndarray, dim: int | None, keepdim: bool) -> np.ndarray:
    """Index of the first max/min (NaN counts as the extreme); dim None flattens."""
    if x.ndim == 0:
        return np.zeros((), dtype=INT64)
    if dim is None:
        flat = fn(x.reshape(-1))
        return np.full((1,) * x.ndim, flat) if keepdim else np.asarray(flat)
    return fn(x, axis=wrap_dim(dim, x.ndim), keepdims=keepdim)


@kernel("aten::argmax.out", dtypes=REAL_DTYPES)
def argmax_out(x: np.ndarray, dim: int | None, keepdim: bool, out: np.ndarray) -> np.ndarray:
    return store(out, _arg(np.argmax, x, dim, keepdim))


@kernel("aten::argmin.out", dtypes=REAL_DTYPES)
def argmin_out(x: np.ndarray, dim: int | None, keepdim: bool, out: np.ndarray) -> np.ndarray:
    return store(out, _arg(np.argmin, x, dim, keepdim))


def _with_indices(
    value_fn: Callable[..., np.ndarray],
    index_fn: Callable[..., np.ndarray],
    x: np.ndarray,
    dim: int,
    keepdim: bool,
    values: np.ndarray,
    indices: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    values = _extreme(value_fn, x, dim, keepdim, values)
    return values, store(indices, _arg(index_fn, x, dim, keepdim))


@kernel("aten::max.dim_max", dtypes=REAL_DTYPES)
def max_dim_max(
    x: np.ndarray, dim: int, keepdim: bool, values: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    return _with_indices(np.max, np.argmax, x, dim, keepdim, values, indices)


@kernel("aten::min.dim_min", dtypes=REAL_DTYPES)
def min_dim_min(
    x: np.ndarray, dim: int, keepdim: bool, values: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    return _with_indices(np.min, np.argmin, x, dim, keepdim, values, indices)


def _var(x: np.ndarray, dim: Dims, correction: float | None, keepdim: bool) -> np.ndarray:
    axes = reduce_axes(dim, x.ndim)
    ddof = 1 if correction is None else correction
    return np.var(cast(x, opmath(x.dtype)), axis=axes, ddof=ddof, keepdims=keepdim)


@kernel("aten::var.correction_out", dtypes=FLOAT_DTYPES)
@quiet
def var_correction_out(
    x: np.ndarray, dim: list[int] | None, correction: float | None, keepdim: bool, out: np.ndarray
) -> np.ndarray:
    """Variance with Bessel-style `correction` (default 1); N <= correction gives inf/nan."""
    return store(out, _var(x, dim, correction, keepdim))


@kernel("aten::std.correction_out", dtypes=FLOAT_DTYPES)
@quiet
def std_correction_out(
    x: np.ndarray, dim: list[int] | None, correction: float | None, keepdim: bool, out: np.ndarray
) -> np.ndarray:
    return store(out, np.sqrt(_var(x, dim, correction, keepdim)))


@kernel("aten::var_mean.correction_out", dtypes=FLOAT_DTYPES)
@quiet
def var_mean_correction_out(
    x: np.ndarray,
    dim: list[int] | None,
    correction: float | None,
    keepdim: bool,
    var: np.ndarray,
    mean: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    axes = reduce_axes(dim, x.ndim)
    mean_value = np.mean(cast(x, opmath(x.dtype)), axis=axes, keepdims=keepdim)
    return store(var, _var(x, dim, correction, keepdim)), store(mean, mean_value)


def _logical(
    fn: Callable[..., np.ndarray], x: np.ndarray, axes: tuple[int, ...], keepdim: bool, out: np.ndarray
) -> np.ndarray:
    return store(out, fn(x.astype(bool, copy=False), axis=axes, keepdims=keepdim))


def _logical_fast(reduce: np.ufunc, all_dims: bool = False) -> Callable[..., Callable[[], None] | None]:
    """any/all bound at load for bool x and out of the result's shape: one logical_or/logical_and reduce straight
    into out (what np.any/np.all compute on bools, without the cast, the temporary and the copy)."""

    def fast(x: np.ndarray, *args: object) -> Callable[[], None] | None:
        out = args[-1]
        if all_dims:
            axes, keepdim = tuple(range(x.ndim)), False
        else:
            dim, keepdim = args[0], bool(args[1])
            axes = () if dim == [] else reduce_axes(dim, x.ndim)  # type: ignore[arg-type]
        if not (isinstance(out, np.ndarray) and x.dtype == out.dtype == np.bool_ and x.size
                and out.shape == _reduced_shape(x.shape, axes, keepdim)):
            return None
        return functools.partial(reduce.reduce, x, axes, None, out, keepdim)

    return fast


@kernel("aten::any.out", dtypes=ALL_DTYPES, fast=_logical_fast(np.logical_or))
def any_out(x: np.ndarray, dim: int, keepdim: bool, out: np.ndarray) -> np.ndarray:
    return _logical(np.any, x, reduce_axes(dim, x.ndim), keepdim, out)


@kernel("aten::any.dims_out", dtypes=ALL_DTYPES, fast=_logical_fast(np.logical_or))
def any_dims_out(x: np.ndarray, dim: list[int] | None, keepdim: bool, out: np.ndarray) -> np.ndarray:
    """dim None reduces everything; [] reduces nothing (unlike sum)."""
    axes = () if dim == [] else reduce_axes(dim, x.ndim)
    return _logical(np.any, x, axes, keepdim, out)


@kernel("aten::any.all_out", dtypes=ALL_DTYPES, fast=_logical_fast(np.logical_or, all_dims=True))
def any_all_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return _logical(np.any, x, reduce_axes(None, x.ndim), False, out)


@kernel("aten::all.out", dtypes=ALL_DTYPES, fast=_logical_fast(np.logical_and))
def all_out(x: np.ndarray, dim: int, keepdim: bool, out: np.ndarray) -> np.ndarray:
    return _logical(np.all, x, reduce_axes(dim, x.ndim), keepdim, out)


@kernel("aten::all.dims_out", dtypes=ALL_DTYPES, fast=_logical_fast(np.logical_and))
def all_dims_out(x: np.ndarray, dim: list[int] | None, keepdim: bool, out: np.ndarray) -> np.ndarray:
    """dim None reduces everything; [] reduces nothing (unlike sum)."""
    axes = () if dim == [] else reduce_axes(dim, x.ndim)
    return _logical(np.all, x, axes, keepdim, out)


@kernel("aten::all.all_out", dtypes=ALL_DTYPES, fast=_logical_fast(np.logical_and, all_dims=True))
def all_all_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return _logical(np.all, x, reduce_axes(None, x.ndim), False, out)


def _scan(fn: Callable[..., np.ndarray], x: np.ndarray, dim: int, dtype: int | None, out: np.ndarray) -> np.ndarray:
    ct = opmath(_acc_dtype(x, dtype))
    if x.ndim == 0:
        wrap_dim(dim, 0)
        return store(out, cast(x, ct))
    return store(out, fn(cast(x, ct), axis=wrap_dim(dim, x.ndim)))


@kernel("aten::cumsum.out", dtypes=ALL_DTYPES)
def cumsum_out(x: np.ndarray, dim: int, dtype: int | None, out: np.ndarray) -> np.ndarray:
    return _scan(np.cumsum, x, dim, dtype, out)


@kernel("aten::cumprod.out", dtypes=ALL_DTYPES)
def cumprod_out(x: np.ndarray, dim: int, dtype: int | None, out: np.ndarray) -> np.ndarray:
    return _scan(np.cumprod, x, dim, dtype, out)


@kernel("aten::logsumexp.out", dtypes=REAL_DTYPES)
@quiet
def logsumexp_out(x: np.ndarray, dim: list[int], keepdim: bool, out: np.ndarray) -> np.ndarray:
    """log Σ exp(x), shifted by the max (an infinite max is not shifted)."""
    axes = reduce_axes(dim, x.ndim)
    v = cast(x, opmath(float_dtype(x.dtype)))
    m = np.max(v, axis=axes, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0)
    value = np.log(np.sum(np.exp(v - m), axis=axes, keepdims=True)) + m
    return store(out, value if keepdim else np.squeeze(value, axis=axes))


@kernel("aten::linalg_vector_norm.out", dtypes=FLOAT_DTYPES)
@quiet
def linalg_vector_norm_out(
    x: np.ndarray, ord: float, dim: list[int] | None, keepdim: bool, dtype: int | None, out: np.ndarray
) -> np.ndarray:
    """(Σ|x|^ord)^(1/ord); ord inf/-inf are max/min |x|, ord 0 counts non-zeros."""
    ct = opmath(numpy_dtype(dtype) if dtype is not None else x.dtype)
    return store(out, vector_norm(cast(x, ct), float(ord), reduce_axes(dim, x.ndim), keepdim))


@kernel("aten::mean.dtype_out", dtypes=FLOAT_DTYPES)
@quiet
def mean_dtype_out(x: np.ndarray, dtype: int | None, out: np.ndarray) -> np.ndarray:
    return mean_out(x, None, False, dtype, out)


@kernel("aten::var.out", dtypes=FLOAT_DTYPES)
@quiet
def var_out(x: np.ndarray, dim: list[int] | None, unbiased: bool, keepdim: bool, out: np.ndarray) -> np.ndarray:
    return store(out, _var(x, dim, 1 if unbiased else 0, keepdim))
