"""Copies: _to_dim_order_copy, _clone_dim_order, _to_copy, copy_ (in place), copy, detach/lift/device.

`out` is already a view in its planned dim order, so a layout change is just a copy into
it; a dtype change casts like torch (floats truncate toward zero into integers, non-zero
is True). The requested dim_order is checked to be a permutation of out's dims.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.portable.common import named, quiet, store
from etbuild.runtime.kernel_registry import ALL_DTYPES, kernel


def _check_dim_order(dim_order: list[int] | None, ndim: int) -> None:
    if dim_order is not None and sorted(dim_order) != list(range(ndim)):
        raise KernelError(f"dim_order {dim_order} is not a permutation of {ndim} dims")


@kernel("dim_order_ops::_to_dim_order_copy.out", dtypes=ALL_DTYPES)
@quiet
def to_dim_order_copy_out(
    x: np.ndarray, non_blocking: bool, dim_order: list[int] | None, out: np.ndarray
) -> np.ndarray:
    """x cast to out's dtype and laid out in dim_order (out's own layout)."""
    _check_dim_order(dim_order, x.ndim)
    return store(out, x)


@kernel("dim_order_ops::_clone_dim_order.out", dtypes=ALL_DTYPES)
def clone_dim_order_out(x: np.ndarray, non_blocking: bool, dim_order: list[int] | None, out: np.ndarray) -> np.ndarray:
    _check_dim_order(dim_order, x.ndim)
    return store(out, x)


@kernel("aten::_to_copy.out", dtypes=ALL_DTYPES)
@quiet
def to_copy_out(x: np.ndarray, non_blocking: bool, memory_format: int | None, out: np.ndarray) -> np.ndarray:
    return store(out, x)


@kernel("aten::copy_", dtypes=ALL_DTYPES)
def copy_(dst: np.ndarray, src: np.ndarray, non_blocking: bool) -> np.ndarray:
    """In place: src (broadcast, cast) into dst, which is returned (mutable-buffer write-back)."""
    if isinstance(src, np.ndarray) and src.dtype == dst.dtype:
        np.copyto(dst, src)  # no cast, so nothing to quiet
        return dst
    return _copy_cast(dst, src)


@quiet
def _copy_cast(dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    np.copyto(dst, src, casting="unsafe")
    return dst


@kernel("aten::copy.out", dtypes=ALL_DTYPES)
@quiet
def copy_out(x: np.ndarray, src: np.ndarray, non_blocking: bool, out: np.ndarray) -> np.ndarray:
    """x's shape (and out's dtype) filled from src, broadcast."""
    return store(out, np.broadcast_to(src, x.shape))


# Plain copies: a tensor into out, unchanged (device copies are no-ops on one host).
PLAIN_COPIES = (
    "aten::detach_copy.out",
    "aten::lift_fresh_copy.out",
    "et_copy::_h2d_copy.out",
    "et_copy::_d2h_copy.out",
)


def _plain_copy() -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def plain_copy(x: np.ndarray, out: np.ndarray) -> np.ndarray:
        return store(out, x)

    return plain_copy


for _name in PLAIN_COPIES:
    kernel(_name, dtypes=ALL_DTYPES)(named(_plain_copy(), _name, __name__))
