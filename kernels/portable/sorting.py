"""Sorting: sort (values + indices, stable) and topk.

Sorts are stable; NaN sorts as the largest value (last ascending, first descending), as in
torch. Ties in torch's unstable sort may order differently.
"""

from __future__ import annotations

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.portable.common import store, wrap_dim
from etbuild.runtime.kernel_registry import REAL_DTYPES, kernel

Pair = tuple[np.ndarray, np.ndarray]


def sort_order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable argsort along axis; descending keeps equal elements in their original order."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    flipped = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return n - 1 - np.flip(flipped, axis)


def _sorted(x: np.ndarray, dim: int, descending: bool, k: int | None, values: np.ndarray, indices: np.ndarray) -> Pair:
    if x.ndim == 0:
        return store(values, x), store(indices, np.zeros((), dtype=np.int64))
    axis = wrap_dim(dim, x.ndim)
    order = sort_order(x, axis, descending)
    if k is not None:
        order = np.take(order, np.arange(k), axis=axis)
    return store(values, np.take_along_axis(x, order, axis)), store(indices, order)


@kernel("aten::sort.values", dtypes=REAL_DTYPES)
def sort_values(
    x: np.ndarray, dim: int, descending: bool, values: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    return _sorted(x, dim, descending, None, values, indices)


@kernel("aten::sort.values_stable", dtypes=REAL_DTYPES)
def sort_values_stable(
    x: np.ndarray, stable: bool | None, dim: int, descending: bool, values: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    return _sorted(x, dim, descending, None, values, indices)


@kernel("aten::topk.values", dtypes=REAL_DTYPES)
def topk_values(
    x: np.ndarray, k: int, dim: int, largest: bool, sorted: bool, values: np.ndarray, indices: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The k largest (or smallest) along dim, always in sorted order."""
    extent = x.shape[wrap_dim(dim, x.ndim)] if x.ndim else 1
    if not 0 <= k <= extent:
        raise KernelError(f"topk: k={k} is out of range for dim {dim} of {list(x.shape)}")
    return _sorted(x, dim, largest, k, values, indices)
