"""Sliding-window geometry shared by convolutions and poolings, in any layout.

A window slides over `len(kernel)` consecutive spatial axes of an array starting at `axis`; the axes
before them (batch, channels) and after them (NHWC's channels) ride along. Every view here is a
strided view of its input: no copy, and the numbers a caller reads through it are the input's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from etbuild.errors import KernelError

Pads = Sequence[tuple[int, int]]  # (before, after) per spatial axis


def span(kernel: int, dilation: int = 1) -> int:
    """The extent of a dilated kernel."""
    return dilation * (kernel - 1) + 1


def out_extent(size: int, kernel: int, stride: int = 1, dilation: int = 1) -> int:
    """How many windows fit along an axis of `size` (already padded); at most 0 when none does."""
    return (size - span(kernel, dilation)) // stride + 1


def sliding(
    x: np.ndarray, axis: int, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]
) -> np.ndarray:
    """The read-only view of every window of x: its spatial axes [axis, axis + len(kernel)) become the
    output extents, followed by the kernel extents, then x's trailing axes (N, C, H, W at axis 2 gives
    (N, C, OH, OW, KH, KW); N, H, W, C at axis 1 gives (N, OH, OW, KH, KW, C)). KernelError when a window
    does not fit."""
    end = axis + len(kernel)
    spatial = x.shape[axis:end]
    out = [out_extent(s, k, st, d) for s, k, st, d in zip(spatial, kernel, stride, dilation)]
    if min(out, default=1) < 0:
        raise KernelError(f"window {list(kernel)} (dilation {list(dilation)}) exceeds input {list(spatial)}")
    sp_strides = x.strides[axis:end]
    shape = (*x.shape[:axis], *out, *kernel, *x.shape[end:])
    strides = (
        *x.strides[:axis],
        *(st * s for st, s in zip(stride, sp_strides)),
        *(d * s for d, s in zip(dilation, sp_strides)),
        *x.strides[end:],
    )
    return as_strided(x, shape, strides, writeable=False)


def taps(
    x: np.ndarray, axis: int, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]
) -> list[np.ndarray]:
    """One read-only view per kernel tap (row-major over the kernel) of what that tap reads in every
    window: x's shape with the spatial axes at the output extents."""
    view = sliding(x, axis, kernel, stride, dilation)
    lead = (slice(None),) * (axis + len(kernel))
    return [view[(*lead, *tap)] for tap in np.ndindex(*kernel)]


def padded_shape(shape: Sequence[int], axis: int, pads: Pads) -> tuple[int, ...]:
    """shape with the spatial axes from `axis` on grown by their (before, after) pads."""
    grown = (n + lo + hi for n, (lo, hi) in zip(shape[axis:], pads))
    return (*shape[:axis], *grown, *shape[axis + len(pads) :])


def interior(buf: np.ndarray, axis: int, pads: Pads, shape: Sequence[int]) -> np.ndarray:
    """The view of a padded buffer (see padded_shape) where the unpadded array of `shape` sits."""
    inner = (slice(lo, lo + n) for n, (lo, _) in zip(shape[axis:], pads))
    return buf[(*(slice(None),) * axis, *inner)]
