"""aten::convolution.out: N-d (1-D, 2-D, 3-D) convolution, grouped and transposed.

A forward convolution takes one of two paths, both writing straight into `out` when it is
a contiguous array of the compute dtype:
- depthwise (one input channel per group): a loop over the kernel taps, each a multiply-add
  of a shifted view of the padded input by a per-channel weight;
- otherwise im2col: the strided window view of the padded input copied to (C/groups·K, P)
  columns per group, then one matmul per sample and group (a 1×1 kernel needs no copy).
A transposed convolution is the forward convolution of the input dilated by `stride`, padded
by `dilation·(k−1) − padding` (negative pads crop), with the kernel flipped and its in/out
channels swapped within each group.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.numerics.blas import bound_product, matmul
from etbuild.kernels.numerics.im2col import column_view, columns
from etbuild.kernels.numerics.window import interior, out_extent, padded_shape
from etbuild.kernels.portable.common import cast, opmath, pad_spatial, per_dim, result_dtype
from etbuild.runtime.kernel_registry import FLOAT_DTYPES, NonNegativeInts, PositiveInt, PositiveInts, kernel
from etbuild.runtime.tensor import BoundedArray, resize


def _out_spatial(padded: list[int], kernel: tuple[int, ...], stride: list[int], dilation: list[int]) -> list[int]:
    """The output extent of each spatial dim, from the padded input extents."""
    sizes = [out_extent(s, k, st, d) for s, k, st, d in zip(padded, kernel, stride, dilation)]
    if min(sizes) < 0:
        raise KernelError(f"convolution: kernel {list(kernel)} (dilation {dilation}) exceeds padded input {padded}")
    return sizes


def _im2col(x: np.ndarray, w: np.ndarray, stride: list[int], dilation: list[int], groups: int, res: np.ndarray) -> None:
    """res (N, O, *P) = w (O, C/g, *K) applied to each group's columns (C/g·K, P) of x."""
    cols = columns(x, w.shape[2:], stride, dilation, groups)
    wmat = w.reshape(groups, w.shape[0] // groups, cols.shape[2])
    matmul(wmat, cols, res.reshape(*cols.shape[:2], wmat.shape[1], cols.shape[3]))


@dataclass(frozen=True)
class _TapGrid:
    """Where the taps of a depthwise convolution read, in x padded and split by stride phase.

    Phase ph of a padded spatial dim holds its elements at indices ≡ ph (mod stride), so every
    tap reads one phase at unit stride. A phase plane has extents `q`; tap k reads phase
    `phases[k]` from `shifts[k]` positions on. Whole planes are computed, so a tap is one
    contiguous run of the grid: the positions past the output's extents read neighbouring
    cells (or the `tail` of zeros after the last plane) and are dropped.
    """

    q: tuple[int, ...]
    phases: tuple[int, ...]
    shifts: tuple[int, ...]
    tail: int

    @property
    def plane(self) -> int:
        return math.prod(self.q)


@functools.lru_cache(maxsize=256)
def _tap_grid(
    size: tuple[int, ...],
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
) -> _TapGrid:
    """The tap grid of a depthwise convolution of inputs of spatial `size`; cached, as a
    program calls each convolution with the same geometry every time."""
    q = tuple(-(-(e + 2 * p) // st) for e, p, st in zip(size, padding, stride))
    pitch = [math.prod(q[i + 1 :]) for i in range(len(q))]
    phase_pitch = [math.prod(stride[i + 1 :]) for i in range(len(stride))]
    taps = list(itertools.product(*(range(k) for k in kernel)))
    phases = tuple(sum(t * d % st * pp for t, d, st, pp in zip(tap, dilation, stride, phase_pitch)) for tap in taps)
    shifts = tuple(sum(t * d // st * p for t, d, st, p in zip(tap, dilation, stride, pitch)) for tap in taps)
    return _TapGrid(q, phases, shifts, max(shifts))


def _phase_grid(x: np.ndarray, padding: list[int], stride: list[int], g: _TapGrid, channels_last: bool) -> np.ndarray:
    """x zero-padded and split into stride phases: a flat buffer (*stride, N, *q, C) when
    channels_last, else (*stride, N, C, *q), followed by zeros for the reads past the end."""
    n, c, *size = x.shape
    cells = (n, *g.q, c) if channels_last else (n, c, *g.q)
    total = math.prod(stride) * math.prod(cells)
    buf = np.zeros(total + g.tail * (c if channels_last else 1), x.dtype)
    grid = buf[:total].reshape(*stride, *cells)
    src_x = np.moveaxis(x, 1, -1) if channels_last else x
    lead, trail = ((slice(None),), (slice(None),)) if channels_last else ((slice(None), slice(None)), ())
    for ph in itertools.product(*(range(st) for st in stride)):
        firsts = [(f - p) % st for f, p, st in zip(ph, padding, stride)]
        src = tuple(slice(f, None, st) for f, st in zip(firsts, stride))
        dst = tuple(
            slice((f + p) // st, (f + p) // st + len(range(f, e, st)))
            for f, p, st, e in zip(firsts, padding, stride, size)
        )
        grid[ph][(*lead, *dst, *trail)] = src_x[(*lead, *src, *trail)]
    return buf


def _sum_taps(views: Iterable[np.ndarray], weights: np.ndarray, acc: np.ndarray) -> None:
    """acc = Σₖ views[k]·weights[k], with one spare array for the products."""
    tmp = np.empty_like(acc)
    for k, view in enumerate(views):
        if k == 0:
            np.multiply(view, weights[0], out=acc)
        else:
            acc += np.multiply(view, weights[k], out=tmp)


def _depthwise(
    x: np.ndarray, w: np.ndarray, stride: list[int], padding: list[int], dilation: list[int], res: np.ndarray
) -> None:
    """res (N, C·m, *P) from one input channel per group: Σ over taps of shifted x · weight.

    Each tap is one multiply-add of a contiguous run of the phase grid by per-channel weights.
    The grid is channels-last when there are more channels than positions per plane, so that
    numpy's inner loops run along the longer of the two.
    """
    n, c = x.shape[:2]
    kernel, out_sp = w.shape[2:], res.shape[2:]
    mult = w.shape[0] // c
    g = _tap_grid(x.shape[2:], kernel, tuple(stride), tuple(padding), tuple(dilation))
    crop = tuple(slice(o) for o in out_sp)
    run = n * c * g.plane
    if mult == 1 and c > g.plane:
        buf = _phase_grid(x, padding, stride, g, channels_last=True)
        starts = [ph * run + sh * c for ph, sh in zip(g.phases, g.shifts)]
        views = (buf[s : s + run].reshape(n, g.plane, c) for s in starts)
        acc = np.empty((n, g.plane, c), res.dtype)
        _sum_taps(views, w.reshape(c, -1).T.copy(), acc)
        res[...] = np.moveaxis(acc.reshape(n, *g.q, c)[(slice(None), *crop)], -1, 1)
    else:
        buf = _phase_grid(x, padding, stride, g, channels_last=False)
        starts = [ph * run + sh for ph, sh in zip(g.phases, g.shifts)]
        views = (buf[s : s + run].reshape(n, c, 1, g.plane) for s in starts)
        acc = np.empty((n, c, mult, g.plane), res.dtype)
        _sum_taps(views, np.moveaxis(w.reshape(c, mult, -1), 2, 0)[:, None, :, :, None].copy(), acc)
        res[...] = acc.reshape(n, c * mult, *g.q)[(slice(None), slice(None), *crop)]


def _forward(
    x: np.ndarray,
    w: np.ndarray,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    res: np.ndarray,
) -> None:
    """The forward convolution of x (padded by `padding`) into res."""
    if w.shape[1] == 1 and groups == x.shape[1] and res.size:
        _depthwise(x, w, stride, padding, dilation, res)
    else:
        _im2col(pad_spatial(x, [(p, p) for p in padding]), w, stride, dilation, groups, res)


def _transposed_as_forward(
    x: np.ndarray,
    w: np.ndarray,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    output_padding: list[int],
    groups: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The (input, weight) of the forward convolution equal to a transposed one."""
    nsp = x.ndim - 2
    kernel = w.shape[2:]
    spatial = x.shape[2:]
    dilated = np.zeros((*x.shape[:2], *((s - 1) * st + 1 if s else 0 for s, st in zip(spatial, stride))), x.dtype)
    dilated[(slice(None), slice(None), *(slice(None, None, st) for st in stride))] = x
    pads = [(d * (k - 1) - p, d * (k - 1) - p + op) for k, p, d, op in zip(kernel, padding, dilation, output_padding)]
    cin, og = w.shape[:2]
    wf = w.reshape(groups, cin // groups, og, *kernel).swapaxes(1, 2).reshape(groups * og, cin // groups, *kernel)
    wf = np.flip(wf, axis=tuple(range(2, 2 + nsp)))
    return pad_spatial(dilated, pads), wf


def _check_convolution(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, stride: list[int], padding: list[int],
    dilation: list[int], transposed: bool, output_padding: list[int], groups: int, out: np.ndarray,
) -> None:
    """The load-time check of convolution's arguments (see etbuild.runtime.kernel_registry.kernel): ranks,
    per-dim lists, and the weight's channels against the groups (and the input's, when static)."""
    nsp = _spatial_dims(x, weight)
    lists = {"stride": stride, "padding": padding, "dilation": dilation, "output_padding": output_padding}
    for what, v in lists.items():
        per_dim(v, nsp, what)
    channels = weight.shape[0] if transposed else weight.shape[1] * groups  # of the input
    static = not isinstance(x, BoundedArray)  # a dynamic input is planned at its bound: only its rank is known
    if weight.shape[0] % groups or (static and x.shape[1] != channels):
        raise KernelError(
            f"convolution: weight {list(weight.shape)} does not fit {x.shape[1]} channels in {groups} groups"
        )


def _spatial_dims(x: np.ndarray, weight: np.ndarray) -> int:
    if x.ndim < 3 or weight.ndim != x.ndim:
        raise KernelError(f"convolution: input {list(x.shape)} and weight {list(weight.shape)} do not match")
    return x.ndim - 2


SCRATCH_LIMIT = 64 << 20  # bytes of load-time buffers one convolution's fast path may keep


class _Im2colPlan:
    """A forward im2col convolution whose padded input and column buffers are made once at load:
    per call, x is copied into the padded buffer's interior, the window view into the columns,
    then one matmul and the bias add, the same numpy calls as the kernel's im2col path."""

    def __init__(self, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: list[int],
                 padding: list[int], dilation: list[int], groups: int, out: np.ndarray) -> None:
        self.copies: list[tuple[np.ndarray, np.ndarray]] = []
        src = x
        if any(padding):
            pads = [(p, p) for p in padding]
            src = np.zeros(padded_shape(x.shape, 2, pads), x.dtype)
            self.copies.append((interior(src, 2, pads, x.shape), x))
        view, shape = column_view(src, w.shape[2:], stride, dilation, groups)
        self.cols = view.reshape(shape)
        if not np.may_share_memory(self.cols, src):  # the reshape copied: copy into a buffer per call
            self.cols = np.empty(shape, x.dtype)
            self.copies.append((self.cols.reshape(view.shape), view))
        self.wmat = w.reshape(groups, w.shape[0] // groups, shape[2])
        self.res = out.reshape(*shape[:2], self.wmat.shape[1], shape[3])
        self.product = bound_product(np.matmul, self.wmat, self.cols, self.res)
        self.out = out
        self.bias = None if bias is None else bias.reshape(1, -1, *([1] * (x.ndim - 2)))

    def __call__(self) -> None:
        for dst, src in self.copies:
            np.copyto(dst, src)
        self.product()
        if self.bias is not None:
            np.add(self.out, self.bias, out=self.out)


def _convolution_fast(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, stride: list[int], padding: list[int],
    dilation: list[int], transposed: bool, output_padding: list[int], groups: int, out: np.ndarray,
) -> _Im2colPlan | None:
    """The im2col path with its buffers made at load, for a forward, not depthwise convolution whose
    tensors all have out's float32/float64 dtype and whose out is contiguous at the result's shape."""
    if transposed or out.dtype not in (np.float32, np.float64) or not out.flags.c_contiguous:
        return None
    if x.dtype != out.dtype or weight.dtype != out.dtype or (bias is not None and bias.dtype != out.dtype):
        return None
    nsp = _spatial_dims(x, weight)
    stride, padding, dilation = (per_dim(v, nsp, "") for v in (stride, padding, dilation))
    if weight.shape[1] == 1 and groups == x.shape[1] or x.shape[1] != weight.shape[1] * groups:
        return None  # depthwise: its own path
    out_sp = _out_spatial([s + 2 * p for s, p in zip(x.shape[2:], padding)], weight.shape[2:], stride, dilation)
    if out.shape != (x.shape[0], weight.shape[0], *out_sp) or out.size == 0:
        return None
    cols = x.shape[0] * x.shape[1] * math.prod(weight.shape[2:]) * math.prod(out_sp) * x.itemsize
    if cols + x.nbytes * 2 > SCRATCH_LIMIT:
        return None
    return _Im2colPlan(x, weight, bias, stride, padding, dilation, groups, out)


@kernel("aten::convolution.out", dtypes=FLOAT_DTYPES, check=_check_convolution, fast=_convolution_fast)
def convolution_out(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    stride: PositiveInts,
    padding: NonNegativeInts,
    dilation: PositiveInts,
    transposed: bool,
    output_padding: NonNegativeInts,
    groups: PositiveInt,
    out: np.ndarray,
) -> np.ndarray:
    """Input (N, C, *S), weight (O, C/groups, *K) — or (C, O/groups, *K) when transposed."""
    nsp = _spatial_dims(x, weight)
    stride, padding, dilation = (
        per_dim(v, nsp, s) for v, s in ((stride, "stride"), (padding, "padding"), (dilation, "dilation"))
    )
    ct = opmath(result_dtype(x, weight))
    xc, wc = cast(x, ct), cast(weight, ct)
    if transposed:
        xc, wc = _transposed_as_forward(
            xc, wc, stride, padding, dilation, per_dim(output_padding, nsp, "output_padding"), groups
        )
        stride, padding = [1] * nsp, [0] * nsp
    c, o, cg = xc.shape[1], wc.shape[0], wc.shape[1]
    if c != cg * groups or o % groups:
        raise KernelError(f"convolution: weight {list(weight.shape)} does not fit {c} channels in {groups} groups")
    out_sp = _out_spatial([s + 2 * p for s, p in zip(xc.shape[2:], padding)], wc.shape[2:], stride, dilation)
    out = resize(out, (xc.shape[0], o, *out_sp))
    direct = out.dtype == ct and out.flags.c_contiguous
    res = out if direct else np.empty(out.shape, ct)
    _forward(xc, wc, stride, padding, dilation, groups, res)
    if bias is not None:
        res += cast(bias, ct).reshape(1, -1, *([1] * nsp))
    if not direct:
        np.copyto(out, res, casting="unsafe")
    return out
