"""The im2col views of a convolution's input: every window's elements as the columns of a matrix.

A convolution is then one matmul of its filter by these columns. The views are strided (no copy); a
caller copies one into a buffer where the matrix must be contiguous (`reshape` copies when it has to).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from etbuild.kernels.numerics.window import sliding


def column_view(
    x: np.ndarray, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int], groups: int
) -> tuple[np.ndarray, tuple[int, ...]]:
    """The im2col elements of channels-first x (N, C, *S) as a strided view, and the (N, G, C/g·K, P)
    shape of their matrix per sample and group (K and P flattened).

    A 1×1 kernel reads x itself (strided), a copy only when the stride skips elements.
    """
    n, c = x.shape[:2]
    nsp = x.ndim - 2
    if all(k == 1 for k in kernel):
        picked = x[(slice(None), slice(None), *(slice(None, None, st) for st in stride))]
        return picked, (n, groups, c // groups, math.prod(picked.shape[2:]))
    win = sliding(x, 2, kernel, stride, dilation)  # (N, C, *P, *K)
    out_sp = win.shape[2 : 2 + nsp]
    order = (0, 1, 2, *range(3 + nsp, 3 + 2 * nsp), *range(3, 3 + nsp))
    cols = win.reshape(n, groups, c // groups, *out_sp, *kernel).transpose(order)  # (N, G, C/g, *K, *P)
    return cols, (n, groups, c // groups * math.prod(kernel), math.prod(out_sp))


def columns(
    x: np.ndarray, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int], groups: int
) -> np.ndarray:
    """The im2col matrix of channels-first x per sample and group: (N, G, C/g·K, P), see column_view."""
    view, shape = column_view(x, kernel, stride, dilation, groups)
    return view.reshape(shape)


def row_view(x: np.ndarray, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> np.ndarray:
    """The im2col elements of NHWC x as the read-only view [N, OH, OW, KH, KW, C]: row p of the matrix
    [N·OH·OW, KH·KW·C] holds window p's elements."""
    return sliding(x, 1, kernel, stride, dilation)
