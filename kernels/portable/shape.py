"""Layout copies: view/permute/expand/slice/select/squeeze/split/cat/stack/repeat/flip/...

Each builds a numpy view of the result (no copy) and copies it once into `out`; inputs of
several dtypes (cat, stack) are promoted like torch does before the cast into out.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.portable.common import result_dtype, store, wrap_dim
from etbuild.runtime.kernel_registry import ALL_DTYPES, NonNegativeInts, PositiveInt, kernel
from etbuild.runtime.tensor import resize


def _along(axis: int, index: int | slice) -> tuple[int | slice, ...]:
    """An index tuple that applies `index` to one axis."""
    return (slice(None),) * axis + (index,)


def _split_views(x: np.ndarray, sizes: Sequence[int], dim: int, out: list[np.ndarray]) -> list[np.ndarray]:
    axis = wrap_dim(dim, x.ndim)
    if sum(sizes) != x.shape[axis] or len(sizes) != len(out):
        raise KernelError(f"split sizes {list(sizes)} do not cover dim {dim} of {list(x.shape)} in {len(out)} outs")
    parts, start = [], 0
    for size in sizes:
        parts.append(x[_along(axis, slice(start, start + size))])
        start += size
    return parts


def _stores(out: list[np.ndarray], parts: list[np.ndarray]) -> list[np.ndarray]:
    return [store(o, part) for o, part in zip(out, parts)]


def _reshape_view(x: np.ndarray, size: list[int], out: np.ndarray) -> np.ndarray:
    return x.reshape(size)


def _same_view(x: np.ndarray, *_: object) -> np.ndarray:
    """The view of a copy that changes nothing (alias_copy, clone: out's planned layout is fixed)."""
    return x


@kernel("aten::view_copy.out", dtypes=ALL_DTYPES, view=_reshape_view)
def view_copy_out(x: np.ndarray, size: list[int], out: np.ndarray) -> np.ndarray:
    return store(out, x.reshape(size))


@kernel("aten::_unsafe_view.out", dtypes=ALL_DTYPES, view=_reshape_view)
def unsafe_view_out(x: np.ndarray, size: list[int], out: np.ndarray) -> np.ndarray:
    return store(out, x.reshape(size))


def _permute_view(x: np.ndarray, dims: list[int], out: np.ndarray) -> np.ndarray:
    return np.transpose(x, [wrap_dim(d, x.ndim) for d in dims]) if x.ndim else x


@kernel("aten::permute_copy.out", dtypes=ALL_DTYPES, view=_permute_view)
def permute_copy_out(x: np.ndarray, dims: list[int], out: np.ndarray) -> np.ndarray:
    return store(out, _permute_view(x, dims, out))


def _t_view(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    if x.ndim > 2:
        raise KernelError(f"t expects a tensor of at most 2 dims, got {x.ndim}")
    return x.T


@kernel("aten::t_copy.out", dtypes=ALL_DTYPES, view=_t_view)
def t_copy_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return store(out, _t_view(x, out))


def _transpose_view(x: np.ndarray, dim0: int, dim1: int, out: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, wrap_dim(dim0, x.ndim), wrap_dim(dim1, x.ndim)) if x.ndim else x


@kernel("aten::transpose_copy.int_out", dtypes=ALL_DTYPES, view=_transpose_view)
def transpose_copy_int_out(x: np.ndarray, dim0: int, dim1: int, out: np.ndarray) -> np.ndarray:
    return store(out, _transpose_view(x, dim0, dim1, out))


def _expand_view(x: np.ndarray, size: list[int], implicit: bool, out: np.ndarray) -> np.ndarray:
    lead = len(size) - x.ndim
    if lead < 0:
        raise KernelError(f"expand: size {size} has fewer dims than the tensor {list(x.shape)}")
    shape = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
    return np.broadcast_to(x, shape)


@kernel("aten::expand_copy.out", dtypes=ALL_DTYPES, view=_expand_view)
def expand_copy_out(x: np.ndarray, size: list[int], implicit: bool, out: np.ndarray) -> np.ndarray:
    """Broadcast x to size; -1 keeps the existing extent, new dims are prepended."""
    return store(out, _expand_view(x, size, implicit, out))


@kernel("aten::alias_copy.out", dtypes=ALL_DTYPES, view=_same_view)
def alias_copy_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return store(out, x)


@kernel("aten::clone.out", dtypes=ALL_DTYPES, view=_same_view)
def clone_out(x: np.ndarray, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    """A copy; the memory format is out's planned layout, already fixed by its view."""
    return store(out, x)


def _slice_view(x: np.ndarray, dim: int, start: int | None, end: int | None, step: int, out: np.ndarray) -> np.ndarray:
    if step <= 0:
        raise KernelError(f"slice step must be positive, got {step}")
    return x[_along(wrap_dim(dim, x.ndim), slice(start, end, step))]


@kernel("aten::slice_copy.Tensor_out", dtypes=ALL_DTYPES, view=_slice_view)
def slice_copy_tensor_out(
    x: np.ndarray, dim: int, start: int | None, end: int | None, step: int, out: np.ndarray
) -> np.ndarray:
    """x[start:end:step] along dim; bounds clamp like Python slices, step must be positive."""
    return store(out, _slice_view(x, dim, start, end, step, out))


def _narrow_view(x: np.ndarray, dim: int, start: int, length: int, out: np.ndarray) -> np.ndarray:
    axis = wrap_dim(dim, x.ndim)
    start = start % x.shape[axis] if start < 0 else start
    if length < 0 or start + length > x.shape[axis]:
        raise KernelError(f"narrow: [{start}, {start + length}) is outside dim {dim} of {list(x.shape)}")
    return x[_along(axis, slice(start, start + length))]


@kernel("aten::narrow_copy.out", dtypes=ALL_DTYPES, view=_narrow_view)
def narrow_copy_out(x: np.ndarray, dim: int, start: int, length: int, out: np.ndarray) -> np.ndarray:
    return store(out, _narrow_view(x, dim, start, length, out))


def _select_view(x: np.ndarray, dim: int, index: int, out: np.ndarray) -> np.ndarray:
    axis = wrap_dim(dim, x.ndim)
    if not -x.shape[axis] <= index < x.shape[axis]:
        raise KernelError(f"select: index {index} is out of range for dim {dim} of {list(x.shape)}")
    return x[(*_along(axis, index), ...)]  # the Ellipsis keeps a 1-d input's result a 0-d view, not a scalar


@kernel("aten::select_copy.int_out", dtypes=ALL_DTYPES, view=_select_view)
def select_copy_int_out(x: np.ndarray, dim: int, index: int, out: np.ndarray) -> np.ndarray:
    return store(out, _select_view(x, dim, index, out))


def _squeeze_view(x: np.ndarray, dims: list[int], out: np.ndarray) -> np.ndarray:
    """Drop the listed dims that have size 1 (others stay)."""
    axes = tuple({wrap_dim(d, x.ndim) for d in dims if x.ndim and x.shape[wrap_dim(d, x.ndim)] == 1})
    return np.squeeze(x, axis=axes) if axes else x


@kernel("aten::squeeze_copy.dims_out", dtypes=ALL_DTYPES, view=_squeeze_view)
def squeeze_copy_dims_out(x: np.ndarray, dims: list[int], out: np.ndarray) -> np.ndarray:
    """Drop the listed dims that have size 1 (others stay)."""
    return store(out, _squeeze_view(x, dims, out))


def _squeeze_dim_view(x: np.ndarray, dim: int, out: np.ndarray) -> np.ndarray:
    return _squeeze_view(x, [dim], out)


@kernel("aten::squeeze_copy.dim_out", dtypes=ALL_DTYPES, view=_squeeze_dim_view)
def squeeze_copy_dim_out(x: np.ndarray, dim: int, out: np.ndarray) -> np.ndarray:
    return store(out, _squeeze_view(x, [dim], out))


def _squeeze_all_view(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return np.squeeze(x)


@kernel("aten::squeeze_copy.out", dtypes=ALL_DTYPES, view=_squeeze_all_view)
def squeeze_copy_out(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return store(out, np.squeeze(x))


def _unsqueeze_view(x: np.ndarray, dim: int, out: np.ndarray) -> np.ndarray:
    return np.expand_dims(x, wrap_dim(dim, x.ndim + 1))


@kernel("aten::unsqueeze_copy.out", dtypes=ALL_DTYPES, view=_unsqueeze_view)
def unsqueeze_copy_out(x: np.ndarray, dim: int, out: np.ndarray) -> np.ndarray:
    return store(out, _unsqueeze_view(x, dim, out))


@kernel("aten::split_with_sizes_copy.out", dtypes=ALL_DTYPES, view=_split_views)
def split_with_sizes_copy_out(x: np.ndarray, sizes: list[int], dim: int, out: list[np.ndarray]) -> list[np.ndarray]:
    return _stores(out, _split_views(x, sizes, dim, out))


def _chunk_views(x: np.ndarray, size: int, dim: int, out: list[np.ndarray]) -> list[np.ndarray]:
    """Chunks of `size` along dim, the last one shorter."""
    extent = x.shape[wrap_dim(dim, x.ndim)]
    count = max(math.ceil(extent / size), 1) if size else 1
    return _split_views(x, [min(size, extent - i * size) for i in range(count)], dim, out)


@kernel("aten::split_copy.Tensor_out", dtypes=ALL_DTYPES, view=_chunk_views)
def split_copy_tensor_out(x: np.ndarray, size: int, dim: int, out: list[np.ndarray]) -> list[np.ndarray]:
    """Chunks of `size` along dim, the last one shorter."""
    return _stores(out, _chunk_views(x, size, dim, out))


def _unbind_views(x: np.ndarray, dim: int, out: list[np.ndarray]) -> list[np.ndarray]:
    axis = wrap_dim(dim, x.ndim)
    if len(out) != x.shape[axis]:
        raise KernelError(f"unbind: {len(out)} outs for dim {dim} of {list(x.shape)}")
    return [x[_along(axis, i)] for i in range(len(out))]


@kernel("aten::unbind_copy.int_out", dtypes=ALL_DTYPES, view=_unbind_views)
def unbind_copy_int_out(x: np.ndarray, dim: int, out: list[np.ndarray]) -> list[np.ndarray]:
    return _stores(out, _unbind_views(x, dim, out))


def _cat_inputs(tensors: list[np.ndarray]) -> list[np.ndarray]:
    """torch.cat skips legacy 1-d empty tensors next to tensors of another rank."""
    kept = [t for t in tensors if not (t.ndim == 1 and t.size == 0)]
    return kept or tensors[:1]


def _cat_fast(tensors: list[np.ndarray], dim: int, out: np.ndarray) -> Callable[[], Any] | None:
    """cat_out's one np.concatenate, bound at load when every part already has out's dtype and shape fits."""
    parts = _cat_inputs(tensors)
    if type(out) is not np.ndarray or out.ndim == 0 or any(t.dtype != out.dtype or t.ndim != out.ndim for t in parts):
        return None
    axis = wrap_dim(dim, out.ndim)
    rest = out.shape[:axis] + out.shape[axis + 1:]
    if any(t.shape[:axis] + t.shape[axis + 1:] != rest for t in parts):
        return None
    if sum(t.shape[axis] for t in parts) != out.shape[axis]:
        return None
    return functools.partial(np.concatenate, parts, axis, out)


@kernel("aten::cat.out", dtypes=ALL_DTYPES, fast=_cat_fast)
def cat_out(tensors: list[np.ndarray], dim: int, out: np.ndarray) -> np.ndarray:
    parts = _cat_inputs(tensors)
    axis = wrap_dim(dim, parts[0].ndim)
    shape = list(parts[0].shape)
    shape[axis] = sum(t.shape[axis] for t in parts)
    out = resize(out, shape)
    dtype = result_dtype(*[t.reshape(1) if t.ndim == 0 else t for t in tensors])
    np.concatenate([t.astype(dtype, copy=False) for t in parts], axis=axis, out=out, casting="unsafe")
    return out


@kernel("aten::stack.out", dtypes=ALL_DTYPES)
def stack_out(tensors: list[np.ndarray], dim: int, out: np.ndarray) -> np.ndarray:
    axis = wrap_dim(dim, tensors[0].ndim + 1)
    shape = list(tensors[0].shape)
    shape.insert(axis, len(tensors))
    out = resize(out, shape)
    dtype = result_dtype(*[t.reshape(1) if t.ndim == 0 else t for t in tensors])
    np.stack([t.astype(dtype, copy=False) for t in tensors], axis=axis, out=out, casting="unsafe")
    return out


@kernel("aten::repeat.out", dtypes=ALL_DTYPES)
def repeat_out(x: np.ndarray, repeats: NonNegativeInts, out: np.ndarray) -> np.ndarray:
    if len(repeats) < x.ndim:
        raise KernelError(f"repeat: {len(repeats)} repeats for a {x.ndim}-d tensor")
    lead = (1,) * (len(repeats) - x.ndim)
    return store(out, np.tile(x.reshape(lead + x.shape), repeats))


@kernel("aten::flip.out", dtypes=ALL_DTYPES)
def flip_out(x: np.ndarray, dims: list[int], out: np.ndarray) -> np.ndarray:
    axes = tuple({wrap_dim(d, x.ndim) for d in dims})
    return store(out, np.flip(x, axes) if x.ndim and axes else x)


@kernel("aten::roll.out", dtypes=ALL_DTYPES)
def roll_out(x: np.ndarray, shifts: list[int], dims: list[int], out: np.ndarray) -> np.ndarray:
    """Rotate along dims; with no dims, along the flattened tensor."""
    if not dims:
        return store(out, np.roll(x.reshape(-1), shifts[0]).reshape(x.shape))
    return store(out, np.roll(x, shifts, tuple(wrap_dim(d, x.ndim) for d in dims)))


@kernel("aten::tril.out", dtypes=ALL_DTYPES)
def tril_out(x: np.ndarray, diagonal: int, out: np.ndarray) -> np.ndarray:
    return store(out, np.tril(x, diagonal))


@kernel("aten::triu.out", dtypes=ALL_DTYPES)
def triu_out(x: np.ndarray, diagonal: int, out: np.ndarray) -> np.ndarray:
    return store(out, np.triu(x, diagonal))


@kernel("aten::diagonal_copy.out", dtypes=ALL_DTYPES)
def diagonal_copy_out(x: np.ndarray, offset: int, dim1: int, dim2: int, out: np.ndarray) -> np.ndarray:
    return store(out, np.diagonal(x, offset, wrap_dim(dim1, x.ndim), wrap_dim(dim2, x.ndim)))


@kernel("aten::unfold_copy.out", dtypes=ALL_DTYPES)
def unfold_copy_out(x: np.ndarray, dimension: int, size: int, step: PositiveInt, out: np.ndarray) -> np.ndarray:
    """Windows of `size` every `step` along dimension, as a new last dim."""
    if x.ndim == 0:
        return store(out, x.reshape(1))
    axis = wrap_dim(dimension, x.ndim)
    windows = np.lib.stride_tricks.sliding_window_view(x, size, axis=axis)
    return store(out, windows[_along(axis, slice(None, None, step))])


@kernel("aten::pixel_shuffle.out", dtypes=ALL_DTYPES)
def pixel_shuffle_out(x: np.ndarray, factor: PositiveInt, out: np.ndarray) -> np.ndarray:
    """(*, C·r², H, W) -> (*, C, H·r, W·r)."""
    *lead, c, h, w = x.shape
    r = factor
    y = x.reshape(*lead, c // (r * r), r, r, h, w)
    n = len(lead)
    y = y.transpose(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return store(out, y.reshape(*lead, c // (r * r), h * r, w * r))


@kernel("aten::pixel_unshuffle.out", dtypes=ALL_DTYPES)
def pixel_unshuffle_out(x: np.ndarray, factor: PositiveInt, out: np.ndarray) -> np.ndarray:
    """(*, C, H·r, W·r) -> (*, C·r², H, W)."""
    *lead, c, h, w = x.shape
    r = factor
    y = x.reshape(*lead, c, h // r, r, w // r, r)
    n = len(lead)
    y = y.transpose(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return store(out, y.reshape(*lead, c * r * r, h // r, w // r))


@kernel("aten::as_strided_copy.out", dtypes=ALL_DTYPES)
def as_strided_copy_out(
    x: np.ndarray, size: list[int], stride: list[int], storage_offset: int | None, out: np.ndarray
) -> np.ndarray:
    """Elements at storage_offset + Σ index·stride of x's memory, counted from its first element.

    Only the memory x itself spans may be read (its strides must be non-negative).
    """
    offset = storage_offset or 0
    if len(size) != len(stride) or min(stride, default=0) < 0 or min(x.strides, default=0) < 0 or offset < 0:
        raise KernelError(f"as_strided: size {size}, stride {stride}, offset {offset} on {list(x.shape)}")
    span = 1 + sum((n - 1) * s // x.itemsize for n, s in zip(x.shape, x.strides)) if x.size else 0
    last = offset + sum((n - 1) * s for n, s in zip(size, stride)) if math.prod(size) else -1
    if last >= span:
        raise KernelError(f"as_strided: element {last} is beyond the {span} that {list(x.shape)} spans")
    if last < 0:
        return store(out, np.zeros(size, dtype=x.dtype))
    flat = np.lib.stride_tricks.as_strided(x, shape=(span,), strides=(x.itemsize,), writeable=False)
    view = np.lib.stride_tricks.as_strided(flat[offset:], shape=size, strides=[s * x.itemsize for s in stride])
    return store(out, view)
