"""Pooling: avg_pool1d/2d, max_pool2d_with_indices, adaptive_avg_pool2d.

Output sizes follow torch, including ceil_mode's rule that the last window must start inside
the input or its left padding. Windows are strided views of the padded input (no im2col copy
for average pooling).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.numerics.window import sliding
from etbuild.kernels.portable.common import cast, opmath, pad_spatial, per_dim, store
from etbuild.runtime.kernel_registry import FLOAT_DTYPES, NonNegativeInts, PositiveInts, kernel
from etbuild.runtime.tensor import resize


def pooled_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """Output extent of one spatial dim."""
    if 2 * p > k:
        raise KernelError(f"pooling: padding {p} must be at most half the kernel size {k}")
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    if out <= 0:
        raise KernelError(f"pooling: kernel {k} with padding {p} leaves no output of size {size}")
    return out


class Geometry:
    """Kernel, stride, padding and dilation of an N-d pool, and its padded window view."""

    def __init__(
        self,
        x: np.ndarray,
        nsp: int,
        kernel: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        ceil_mode: bool,
    ) -> None:
        if x.ndim not in (nsp + 1, nsp + 2):
            raise KernelError(f"pooling: expected a {nsp + 1}-d or {nsp + 2}-d input, got {list(x.shape)}")
        self.k = per_dim(kernel, nsp, "kernel_size")
        self.s = per_dim(stride or kernel, nsp, "stride")
        self.p = per_dim(padding, nsp, "padding")
        self.d = per_dim(dilation, nsp, "dilation")
        self.size = x.shape[-nsp:]
        self.out = [pooled_size(*a, ceil_mode) for a in zip(self.size, self.k, self.s, self.p, self.d)]

    def view(self, x: np.ndarray, fill: float) -> np.ndarray:
        """(*lead, *out, *kernel) windows of x padded with `fill` as far as the windows reach."""
        reach = [(o - 1) * s + d * (k - 1) + 1 for o, s, d, k in zip(self.out, self.s, self.d, self.k)]
        pads = [(p, max(r - n - p, 0)) for p, r, n in zip(self.p, reach, self.size)]
        padded = pad_spatial(x, pads, fill)
        return sliding(padded, padded.ndim - len(self.k), self.k, self.s, self.d)


def _divisor(g: Geometry, count_include_pad: bool) -> np.ndarray:
    """Per-output divisors of average pooling, as torch counts them."""
    factors = []
    for o, k, s, p, n in zip(g.out, g.k, g.s, g.p, g.size):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        if not count_include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, n)
        factors.append(end - start)
    return functools.reduce(np.multiply, np.ix_(*factors))


def _avg_pool(
    x: np.ndarray,
    nsp: int,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> np.ndarray:
    g = Geometry(x, nsp, kernel, stride, padding, [1] * nsp, ceil_mode)
    v = cast(x, opmath(x.dtype))
    sums = g.view(v, 0).sum(axis=tuple(range(-nsp, 0)))
    divisor = divisor_override if divisor_override else _divisor(g, count_include_pad)
    return sums / np.asarray(divisor, dtype=v.dtype)


def _check_avg_pool2d(
    x: np.ndarray, kernel_size: list[int], stride: list[int], padding: list[int], ceil_mode: bool, *_: object
) -> None:
    """The load-time check of avg_pool2d's arguments (see etbuild.runtime.kernel_registry.kernel)."""
    Geometry(x, 2, kernel_size, stride, padding, [1, 1], ceil_mode)


def _check_avg_pool1d(
    x: np.ndarray, kernel_size: list[int], stride: list[int], padding: list[int], ceil_mode: bool, *_: object
) -> None:
    Geometry(x, 1, kernel_size, stride, padding, [1], ceil_mode)


def _check_max_pool2d(
    x: np.ndarray, kernel_size: list[int], stride: list[int], padding: list[int], dilation: list[int],
    ceil_mode: bool, *_: object,
) -> None:
    Geometry(x, 2, kernel_size, stride, padding, dilation, ceil_mode)


@kernel("aten::avg_pool2d.out", dtypes=FLOAT_DTYPES, check=_check_avg_pool2d)
def avg_pool2d_out(
    x: np.ndarray,
    kernel_size: PositiveInts,
    stride: PositiveInts,
    padding: NonNegativeInts,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
    out: np.ndarray,
) -> np.ndarray:
    return store(out, _avg_pool(x, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override))


@kernel("aten::avg_pool1d.out", dtypes=FLOAT_DTYPES, check=_check_avg_pool1d)
def avg_pool1d_out(
    x: np.ndarray,
    kernel_size: PositiveInts,
    stride: PositiveInts,
    padding: NonNegativeInts,
    ceil_mode: bool,
    count_include_pad: bool,
    out: np.ndarray,
) -> np.ndarray:
    return store(out, _avg_pool(x, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None))


class _MaxPlan:
    """max_pool2d_with_indices for one input and out shape: the taps, start offsets and work arrays
    made once; `run` is the kernel's computation (see max_pool2d_with_indices_out)."""

    def __init__(self, x: np.ndarray, g: Geometry, out_shape: tuple[int, ...]) -> None:
        self.g = g
        starts = [np.arange(o) * s - p for o, s, p in zip(g.out, g.s, g.p)]
        skip = [-(-np.maximum(-st, 0) // d) for st, d in zip(starts, g.d)]  # taps before the input
        self.first_tap = skip[0][:, None] * g.k[1] + skip[1]
        self.shifts = np.array([i * g.d[0] * g.size[1] + j * g.d[1] for i in range(g.k[0]) for j in range(g.k[1])])
        self.base = starts[0][:, None] * g.size[1] + starts[1]
        self.tap = np.empty(out_shape, np.int64)
        self.take = np.empty(out_shape, bool)
        self.isnan = np.empty(out_shape, bool)

    def run(self, win: np.ndarray, best: np.ndarray) -> np.ndarray:
        """best = the window maxima (best has the out shape); returns their flat input indices."""
        g, tap, take = self.g, self.tap, self.take
        best.fill(-np.inf)
        tap[...] = self.first_tap
        for k in range(g.k[0] * g.k[1]):
            v = win[..., k // g.k[1], k % g.k[1]]
            np.greater(v, best, out=take)
            take |= np.isnan(v, out=self.isnan)
            np.maximum(best, v, out=best)  # NaN-propagating: the same values as the rule above
            np.putmask(tap, take, k)
        where = self.shifts.take(tap)
        where += self.base
        return where


def _max_pool_fast(
    x: np.ndarray, kernel_size: list[int], stride: list[int], padding: list[int], dilation: list[int],
    ceil_mode: bool, out: np.ndarray, indices: np.ndarray,
) -> Callable[[], None] | None:
    """The kernel with its geometry, window view and work arrays made at load, for an unpadded
    pool whose out already has the result's shape and x's dtype."""
    g = Geometry(x, 2, kernel_size, stride, padding, dilation, ceil_mode)
    win = g.view(x, -np.inf)
    if not np.may_share_memory(win, x) or out.shape != win.shape[:-2] or out.dtype != x.dtype:
        return None  # padded (a copy made now would go stale), or out needs a resize or a cast
    if np.may_share_memory(out, x) or indices.shape != out.shape:
        return None
    plan = _MaxPlan(x, g, out.shape)
    return lambda: np.copyto(indices, plan.run(win, out), casting="unsafe")


@kernel("aten::max_pool2d_with_indices.out", dtypes=FLOAT_DTYPES, check=_check_max_pool2d, fast=_max_pool_fast)
def max_pool2d_with_indices_out(
    x: np.ndarray,
    kernel_size: PositiveInts,
    stride: PositiveInts,
    padding: NonNegativeInts,
    dilation: PositiveInts,
    ceil_mode: bool,
    out: np.ndarray,
    indices: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Max over each window and its flat index into the input's H·W plane, as torch computes
    them: a running max over the kernel taps that a later tap replaces only when it is greater
    (the first max wins) or NaN, starting from −inf at the window's first in-bounds element."""
    g = Geometry(x, 2, kernel_size, stride, padding, dilation, ceil_mode)
    win = g.view(x, -np.inf)  # (*lead, *out, *kernel)
    out = resize(out, win.shape[:-2])
    best = out if out.dtype == x.dtype and not np.may_share_memory(out, x) else np.empty(out.shape, x.dtype)
    where = _MaxPlan(x, g, out.shape).run(win, best)
    return (out if best is out else store(out, best)), store(indices, where)


def _adaptive_mean(v: np.ndarray, axis: int, size: int) -> np.ndarray:
    """Mean over torch's adaptive bins [floor(i·n/size), ceil((i+1)·n/size)) along axis."""
    n = v.shape[axis]
    bins = [np.mean(v.take(range(i * n // size, -(-(i + 1) * n // size)), axis=axis), axis=axis) for i in range(size)]
    return np.stack(bins, axis=axis)


def _adaptive_avg_pool2d(x: np.ndarray, output_size: list[int], out: np.ndarray) -> np.ndarray:
    if x.ndim not in (3, 4) or len(output_size) != 2:
        raise KernelError(f"adaptive_avg_pool2d: input {list(x.shape)}, output size {output_size}")
    v = cast(x, opmath(x.dtype))
    v = _adaptive_mean(v, -2, output_size[0])
    return store(out, _adaptive_mean(v, -1, output_size[1]))


@kernel("aten::adaptive_avg_pool2d.out", dtypes=FLOAT_DTYPES)
def adaptive_avg_pool2d_out(x: np.ndarray, output_size: NonNegativeInts, out: np.ndarray) -> np.ndarray:
    return _adaptive_avg_pool2d(x, output_size, out)


@kernel("aten::_adaptive_avg_pool2d.out", dtypes=FLOAT_DTYPES)
def _adaptive_avg_pool2d_out(x: np.ndarray, output_size: NonNegativeInts, out: np.ndarray) -> np.ndarray:
    return _adaptive_avg_pool2d(x, output_size, out)
