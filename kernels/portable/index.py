"""Indexing and tensor creation: gather, index, index_select, embedding, where, scatter,
index_put(_), masked_fill/select/scatter, select/slice_scatter, nonzero, repeat_interleave.

Indices follow torch: int32 or int64, negative values wrap where torch wraps them (index,
index_select; not embedding), bool tensors in `index`/`index_put` are masks. Out-of-range indices raise
KernelError.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.portable.common import BOOL, broadcast_shape, cast, result_dtype, store, wrap_dim
from etbuild.runtime.kernel_registry import ALL_DTYPES, REAL_DTYPES, PositiveInt, kernel
from etbuild.runtime.tensor import resize


def _indices(index: np.ndarray, size: int, what: str) -> np.ndarray:
    """index as intp, checked against [-size, size)."""
    idx = index.astype(np.intp, copy=False)
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise KernelError(
            f"{what}: index {int(idx.max() if idx.max() >= size else idx.min())} is out of range for size {size}"
        )
    return idx


def _scatter_index(index: np.ndarray, axis: int, size: int, what: str) -> tuple[np.ndarray, ...]:
    """Full coordinates for scatter/gather: index along `axis`, positions elsewhere."""
    idx = _indices(index, size, what)
    if (idx < 0).any():
        raise KernelError(f"{what}: negative index {int(idx.min())}")
    grid = list(np.indices(index.shape, sparse=True))
    grid[axis] = idx
    return tuple(grid)


def _advanced(x: np.ndarray, indices: list[np.ndarray | None]) -> tuple[object, ...]:
    """A numpy index for torch's Tensor?[] indices: None holes are full slices."""
    if len(indices) > max(x.ndim, 1):
        raise KernelError(f"too many indices ({len(indices)}) for a {x.ndim}-d tensor")
    key: list[object] = []
    for d, ix in enumerate(indices):
        if ix is None:
            key.append(slice(None))
        elif ix.dtype in (np.bool_, np.uint8):
            key.append(ix.astype(bool, copy=False))
        else:
            key.append(_indices(ix, x.shape[d], "index"))
    return tuple(key)


def _gather_fast(x: np.ndarray, dim: int, index: np.ndarray, sparse_grad: bool, out: np.ndarray
                 ) -> Callable[[], None] | None:
    """gather bound at load for x and index of one rank and an out of index's shape and x's dtype: the positions
    off `dim` made once; per call the range check (the kernel raises for an index out of range), the gather and
    one copy into out."""
    if not (isinstance(x, np.ndarray) and isinstance(index, np.ndarray) and isinstance(out, np.ndarray)) \
            or x.ndim == 0 or x.ndim != index.ndim or out.shape != index.shape or out.dtype != x.dtype \
            or index.dtype.kind not in "iu" or not index.size:
        return None
    axis = wrap_dim(dim, x.ndim)
    size, grid = x.shape[axis], list(np.indices(index.shape, sparse=True))
    key = tuple(index if d == axis else g for d, g in enumerate(grid))
    copyto, args = np.copyto, (x, dim, index, sparse_grad, out)

    def gather() -> None:
        if index.min() < 0 or index.max() >= size:
            gather_out(*args)  # raises KernelError naming the index
        copyto(out, x[key])

    return gather


@kernel("aten::gather.out", dtypes=ALL_DTYPES, fast=_gather_fast)
def gather_out(x: np.ndarray, dim: int, index: np.ndarray, sparse_grad: bool, out: np.ndarray) -> np.ndarray:
    """out[i][j] = x[index[i][j]][j] (for dim 0); index may be smaller than x off dim."""
    if x.ndim == 0:
        _indices(index, 1, "gather")
        return store(out, np.broadcast_to(x, index.shape))
    axis = wrap_dim(dim, x.ndim)
    return store(out, x[_scatter_index(index, axis, x.shape[axis], "gather")])


@kernel("aten::index.Tensor_out", dtypes=ALL_DTYPES)
def index_tensor_out(x: np.ndarray, indices: list[np.ndarray | None], out: np.ndarray) -> np.ndarray:
    """Advanced indexing, x[i0, :, i2]; numpy's and torch's placement rules agree."""
    return store(out, x[_advanced(x, indices)])


def _index_select_fast(x: np.ndarray, dim: int, index: np.ndarray, out: np.ndarray) -> Callable[[], None] | None:
    """index_select bound at load for a 1-d integer index and an out of the selection's shape and x's dtype: per
    call one take into out, whose own range check (numpy's and the kernel's range, [-size, size)) hands a bad
    index to the kernel to raise its KernelError."""
    if not (isinstance(x, np.ndarray) and isinstance(index, np.ndarray) and isinstance(out, np.ndarray)) \
            or x.ndim == 0 or index.ndim != 1 or index.dtype.kind not in "iu" or out.dtype != x.dtype:
        return None
    axis = wrap_dim(dim, x.ndim)
    if out.shape != (*x.shape[:axis], index.size, *x.shape[axis + 1:]) or not out.flags.c_contiguous:
        return None
    take, args = np.take, (x, dim, index, out)

    def index_select() -> None:
        try:
            take(x, index, axis, out)
        except IndexError:
            index_select_out(*args)  # raises KernelError naming the index

    return index_select


@kernel("aten::index_select.out", dtypes=ALL_DTYPES, fast=_index_select_fast)
def index_select_out(x: np.ndarray, dim: int, index: np.ndarray, out: np.ndarray) -> np.ndarray:
    if x.ndim == 0:
        _indices(index, 1, "index_select")
        return store(out, x)
    axis = wrap_dim(dim, x.ndim)
    return store(out, np.take(x, _indices(index, x.shape[axis], "index_select"), axis=axis))


def _embedding_fast(weight: np.ndarray, indices: np.ndarray, padding_idx: int, scale_grad: bool, sparse: bool,
                    out: np.ndarray) -> Callable[[], None] | None:
    """embedding bound at load for a 2-D weight and an out of (*indices.shape, dim) in weight's dtype: per call the
    range check (the kernel raises for an index out of range) and one take of the rows into out."""
    if not (isinstance(weight, np.ndarray) and isinstance(indices, np.ndarray) and isinstance(out, np.ndarray)) \
            or weight.ndim != 2 or indices.dtype.kind not in "iu" or not indices.size or out.dtype != weight.dtype \
            or out.shape != (*indices.shape, weight.shape[1]) or not out.flags.c_contiguous:
        return None
    rows, take, args = weight.shape[0], np.take, (weight, indices, padding_idx, scale_grad, sparse, out)

    def embedding() -> None:
        if indices.min() < 0 or indices.max() >= rows:
            embedding_out(*args)  # raises KernelError naming the index
        take(weight, indices, 0, out, "clip")

    return embedding


@kernel("aten::embedding.out", dtypes=ALL_DTYPES, fast=_embedding_fast)
def embedding_out(
    weight: np.ndarray, indices: np.ndarray, padding_idx: int, scale_grad: bool, sparse: bool, out: np.ndarray
) -> np.ndarray:
    """weight rows by index: (*indices.shape, embedding_dim). An index outside [0, rows) is a KernelError: torch's
    embedding does not wrap negative ones (a token id of -1 is not the last token)."""
    rows = weight.shape[0]
    idx = _indices(indices, rows, "embedding")
    if idx.size and idx.min() < 0:
        raise KernelError(f"embedding: index {int(idx.min())} is out of range for size {rows} "
                          f"(expected 0 … {rows - 1})")
    return store(out, np.take(weight, idx, axis=0))


def _where_fast(cond: np.ndarray, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> Callable[[], None] | None:
    """where bound at load for a bool cond and a, b of out's dtype broadcasting to out's shape, out sharing memory
    with none of them: b copied into out, then a where cond (the same selection, no temporary)."""
    arrays = (cond, a, b, out)
    if not all(isinstance(v, np.ndarray) for v in arrays) or cond.dtype != BOOL or not a.dtype == b.dtype == out.dtype:
        return None
    try:
        if np.broadcast_shapes(cond.shape, a.shape, b.shape) != out.shape:
            return None
    except ValueError:
        return None
    if any(np.may_share_memory(out, v) for v in arrays[:3]):
        return None
    a_full, cond_full = np.broadcast_to(a, out.shape), np.broadcast_to(cond, out.shape)
    copyto = np.copyto

    def where() -> None:
        copyto(out, b)
        copyto(out, a_full, where=cond_full)

    return where


@kernel("aten::where.self_out", dtypes=ALL_DTYPES, fast=_where_fast)
def where_self_out(cond: np.ndarray, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and cond.dtype == BOOL and a.dtype == b.dtype:
        # No promotion, cast or resize. (Two copyto calls, b then a where cond, would spare the
        # temporary but read a and cond after writing out: wrong if out overlaps either.)
        try:
            value = np.where(cond, a, b)
        except ValueError:  # shapes that do not broadcast: the general path reports them
            value = None
        if value is not None and value.shape == out.shape:
            np.copyto(out, value, casting="unsafe")
            return out
    dtype = result_dtype(a, b)
    out = resize(out, broadcast_shape(cond, a, b))
    np.copyto(out, np.where(cond.astype(bool, copy=False), cast(a, dtype), cast(b, dtype)), casting="unsafe")
    return out


def _scatter_into(out: np.ndarray, dim: int, index: np.ndarray, what: str) -> tuple[np.ndarray, ...]:
    if out.ndim == 0:
        _indices(index, 1, what)
        return ()
    axis = wrap_dim(dim, out.ndim)
    return _scatter_index(index, axis, out.shape[axis], what)


@kernel("aten::scatter.src_out", dtypes=ALL_DTYPES)
def scatter_src_out(x: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out = x, then out[index[i][j]][j] = src[i][j] (dim 0); duplicates: the last one wins."""
    out = store(out, x)
    key = _scatter_into(out, dim, index, "scatter")
    out[key] = src[tuple(slice(0, n) for n in index.shape)]
    return out


@kernel("aten::scatter.value_out", dtypes=ALL_DTYPES)
def scatter_value_out(x: np.ndarray, dim: int, index: np.ndarray, value: float, out: np.ndarray) -> np.ndarray:
    out = store(out, x)
    out[_scatter_into(out, dim, index, "scatter")] = cast(value, out.dtype)
    return out


@kernel("aten::scatter_add.out", dtypes=REAL_DTYPES)
def scatter_add_out(x: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out = x, then out[index[i][j]][j] += src[i][j] (dim 0), duplicates accumulating."""
    out = store(out, x)
    key = _scatter_into(out, dim, index, "scatter_add")
    np.add.at(out, key, src[tuple(slice(0, n) for n in index.shape)].astype(out.dtype, copy=False))
    return out


def _put(dst: np.ndarray, indices: list[np.ndarray | None], values: np.ndarray, accumulate: bool) -> np.ndarray:
    """dst[indices] = values, or += with duplicates adding up; returns dst."""
    key = _advanced(dst, indices)
    if accumulate:
        np.add.at(dst, key, values.astype(dst.dtype, copy=False))
    else:
        dst[key] = values
    return dst


@kernel("aten::index_put.out", dtypes=ALL_DTYPES)
def index_put_out(
    x: np.ndarray, indices: list[np.ndarray | None], values: np.ndarray, accumulate: bool, out: np.ndarray
) -> np.ndarray:
    """out = x, then out[indices] = values (or += with accumulate)."""
    return _put(store(out, x), indices, values, accumulate)


@kernel("aten::index_put_", dtypes=ALL_DTYPES)
def index_put_(x: np.ndarray, indices: list[np.ndarray | None], values: np.ndarray, accumulate: bool) -> np.ndarray:
    """In place: x[indices] = values (or += with accumulate); returns x."""
    return _put(x, indices, values, accumulate)


@kernel("aten::masked_fill.Scalar_out", dtypes=ALL_DTYPES)
def masked_fill_scalar_out(x: np.ndarray, mask: np.ndarray, value: float, out: np.ndarray) -> np.ndarray:
    out = store(out, x)
    np.copyto(out, cast(value, out.dtype), where=np.broadcast_to(mask.astype(bool, copy=False), out.shape))
    return out


@kernel("aten::select_scatter.out", dtypes=ALL_DTYPES)
def select_scatter_out(x: np.ndarray, src: np.ndarray, dim: int, index: int, out: np.ndarray) -> np.ndarray:
    """out = x with x.select(dim, index) replaced by src."""
    out = store(out, x)
    axis = wrap_dim(dim, x.ndim)
    np.copyto(out[(slice(None),) * axis + (index,)], src, casting="unsafe")
    return out


@kernel("aten::slice_scatter.out", dtypes=ALL_DTYPES)
def slice_scatter_out(
    x: np.ndarray, src: np.ndarray, dim: int, start: int | None, end: int | None, step: PositiveInt, out: np.ndarray
) -> np.ndarray:
    """out = x with x[start:end:step] along dim replaced by src."""
    out = store(out, x)
    axis = wrap_dim(dim, x.ndim)
    np.copyto(out[(slice(None),) * axis + (slice(start, end, step),)], src, casting="unsafe")
    return out


@kernel("aten::nonzero.out", dtypes=ALL_DTYPES)
def nonzero_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """(count, ndim) coordinates of the non-zero elements, in row-major order."""
    return store(out, np.argwhere(x))


@kernel("aten::masked_select.out", dtypes=ALL_DTYPES)
def masked_select_out(x: np.ndarray, mask: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The elements where mask (broadcast with x) is true, flattened in row-major order."""
    shape = broadcast_shape(x, mask)
    return store(out, np.broadcast_to(x, shape)[np.broadcast_to(mask.astype(bool, copy=False), shape)])


@kernel("aten::masked_scatter.out", dtypes=ALL_DTYPES)
def masked_scatter_out(x: np.ndarray, mask: np.ndarray, source: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out = x, then the positions where mask is true take source's elements in order."""
    out = store(out, x)
    where = np.broadcast_to(mask.astype(bool, copy=False), out.shape)
    count = int(where.sum())
    if count > source.size:
        raise KernelError(f"masked_scatter: mask selects {count} elements, source has {source.size}")
    out[where] = source.reshape(-1)[:count]
    return out


@kernel("aten::repeat_interleave.Tensor_out", dtypes=("int32", "int64"))
def repeat_interleave_tensor_out(repeats: np.ndarray, output_size: int | None, out: np.ndarray) -> np.ndarray:
    """Index i repeated repeats[i] times: [0, 0, 1, 2, 2, 2] for repeats [2, 1, 3]."""
    if repeats.ndim > 1 or (repeats.size and repeats.min() < 0):
        raise KernelError("repeat_interleave: repeats must be a 1-d tensor of non-negative counts")
    return store(out, np.repeat(np.arange(repeats.size, dtype=np.int64), repeats.reshape(-1)))
