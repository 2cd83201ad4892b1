"""Tensor creation: arange, full/zeros/ones(_like), fill, scalar_tensor, empty.

Every creation op takes its dtype from `out` (and its layout from out's planned view);
`empty` leaves the planned memory as it is.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.portable.common import cast, store
from etbuild.runtime.kernel_registry import ALL_DTYPES, REAL_DTYPES, NonNegativeInts, kernel
from etbuild.runtime.tensor import resize


def _fill(out: np.ndarray, shape: tuple[int, ...] | list[int], value: float) -> np.ndarray:
    out = resize(out, shape)
    np.copyto(out, cast(value, out.dtype))
    return out


def _arange(start: float, end: float, step: float, out: np.ndarray) -> np.ndarray:
    """start + i * step for i < ceil((end - start) / step), computed in float64 or int64."""
    if step == 0 or (end - start) * step < 0:
        raise KernelError(f"arange: cannot go from {start} to {end} in steps of {step}")
    return store(out, _arange_values(start, end, step))


def _arange_values(start: float, end: float, step: float) -> np.ndarray:
    """start + i * step for i < ceil((end - start) / step), in int64 when all three are ints, else float64."""
    if all(isinstance(v, int) for v in (start, end, step)):
        return np.arange(start, end, step, dtype=np.int64)
    count = math.ceil((end - start) / step)
    return start + step * np.arange(count, dtype=np.float64)


def _arange_fast(start: float, end: float, step: float, out: np.ndarray) -> Callable[[], None] | None:
    """arange bound at load (its arguments are the binding's): the numbers computed once into a private array,
    one copy into out per call, when they fill out's shape."""
    if not isinstance(out, np.ndarray) or step == 0 or (end - start) * step < 0:
        return None
    numbers, value = _arange_values(start, end, step), np.empty(out.shape, out.dtype)
    if numbers.shape != out.shape:
        return None
    np.copyto(value, numbers, casting="unsafe")  # as `store` writes them
    return functools.partial(np.copyto, out, value)


@kernel("aten::arange.start_out", dtypes=REAL_DTYPES, fast=_arange_fast)
def arange_start_out(start: float, end: float, step: float, out: np.ndarray) -> np.ndarray:
    return _arange(start, end, step, out)


@kernel("aten::arange.out", dtypes=REAL_DTYPES, fast=lambda end, out: _arange_fast(0, end, 1, out))
def arange_out(end: float, out: np.ndarray) -> np.ndarray:
    return _arange(0, end, 1, out)


@kernel("aten::full.out", dtypes=ALL_DTYPES)
def full_out(size: NonNegativeInts, value: float, out: np.ndarray) -> np.ndarray:
    return _fill(out, size, value)


@kernel("aten::zeros.out", dtypes=ALL_DTYPES)
def zeros_out(size: NonNegativeInts, out: np.ndarray) -> np.ndarray:
    return _fill(out, size, 0)


@kernel("aten::ones.out", dtypes=ALL_DTYPES)
def ones_out(size: NonNegativeInts, out: np.ndarray) -> np.ndarray:
    return _fill(out, size, 1)


def _filled(out: np.ndarray, shape: tuple[int, ...] | list[int], value: float) -> Callable[[], None] | None:
    """_fill bound at load when out already has the shape: one copy of the value cast once."""
    if not isinstance(out, np.ndarray) or out.shape != tuple(shape):
        return None
    return functools.partial(np.copyto, out, cast(value, out.dtype))


def _full_like_fast(x: np.ndarray, value: float, memory_format: int | None, out: np.ndarray
                    ) -> Callable[[], None] | None:
    return _filled(out, x.shape, value)


def _scalar_tensor_fast(value: float, out: np.ndarray) -> Callable[[], None] | None:
    return _filled(out, (), value)


@kernel("aten::full_like.out", dtypes=ALL_DTYPES, fast=_full_like_fast)
def full_like_out(x: np.ndarray, value: float, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    return _fill(out, x.shape, value)


@kernel("aten::zeros_like.out", dtypes=ALL_DTYPES)
def zeros_like_out(x: np.ndarray, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    return _fill(out, x.shape, 0)


@kernel("aten::ones_like.out", dtypes=ALL_DTYPES)
def ones_like_out(x: np.ndarray, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    return _fill(out, x.shape, 1)


@kernel("aten::scalar_tensor.out", dtypes=ALL_DTYPES, fast=_scalar_tensor_fast)
def scalar_tensor_out(value: float, out: np.ndarray) -> np.ndarray:
    return _fill(out, (), value)


@kernel("aten::fill.Scalar_out", dtypes=ALL_DTYPES)
def fill_scalar_out(x: np.ndarray, value: float, out: np.ndarray) -> np.ndarray:
    return _fill(out, x.shape, value)


@kernel("aten::fill.Tensor_out", dtypes=ALL_DTYPES)
def fill_tensor_out(x: np.ndarray, value: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Fill with the single element of a 0-d (or 1-element) tensor."""
    if value.size != 1:
        raise KernelError(f"fill: the value tensor must have one element, not {value.size}")
    out = resize(out, x.shape)
    np.copyto(out, value.reshape(()), casting="unsafe")
    return out


@kernel("aten::empty.out", dtypes=ALL_DTYPES)
def empty_out(size: NonNegativeInts, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    return resize(out, size)


@kernel("dim_order_ops::_empty_dim_order.out", dtypes=ALL_DTYPES)
def empty_dim_order_out(size: NonNegativeInts, dim_order: list[int] | None, out: np.ndarray) -> np.ndarray:
    if dim_order is not None and sorted(dim_order) != list(range(len(size))):
        raise KernelError(f"dim_order {dim_order} is not a permutation of {len(size)} dims")
    return resize(out, size)
