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

import itertools
import math

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.portable.common import cast, opmath, pad_spatial, per_dim, result_dtype, windows
from etbuild.kernels.registry import FLOAT_DTYPES, kernel
from etbuild.runtime.tensor import resize


def _out_spatial(padded: list[int], kernel: tuple[int, ...], stride: list[int], dilation: list[int]) -> list[int]:
    """The output extent of each spatial dim, from the padded input extents."""
    sizes = [(s - d * (k - 1) - 1) // st + 1 for s, k, st, d in zip(padded, kernel, stride, dilation)]
    if min(sizes) < 0:
        raise KernelError(f"convolution: kernel {list(kernel)} (dilation {dilation}) exceeds padded input {padded}")
    return sizes


def _im2col(x: np.ndarray, w: np.ndarray, stride: list[int], dilation: list[int], groups: int, res: np.ndarray) -> None:
    """res (N, O, *P) = w (O, C/g, *K) applied to each group's columns (C/g·K, P) of x."""
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    nsp = x.ndim - 2
    kernel = w.shape[2:]
    win = windows(x, kernel, stride, dilation)  # (N, C, *P, *K)
    out_sp = win.shape[2 : 2 + nsp]
    order = (0, 1, 2, *range(3 + nsp, 3 + 2 * nsp), *range(3, 3 + nsp))
    cols = win.reshape(n, groups, cg, *out_sp, *kernel).transpose(order)  # (N, G, C/g, *K, *P)
    cols = cols.reshape(n, groups, cg * math.prod(kernel), math.prod(out_sp))  # copies unless 1×1
    wmat = w.reshape(groups, o // groups, cg * math.prod(kernel))
    np.matmul(wmat, cols, out=res.reshape(n, groups, o // groups, math.prod(out_sp)))


def _phase_grid(x: np.ndarray, padding: list[int], stride: list[int], q: list[int], tail: int) -> np.ndarray:
    """x zero-padded and split into its stride phases, as one flat buffer with `tail` spare zeros.

    Phase ph holds the padded elements at indices ≡ ph (mod stride), so that a tap of a strided
    convolution reads one phase at unit stride. The buffer is laid out (*stride, N, C, *q) with
    q = ceil(padded extent / stride).
    """
    n, c, *size = x.shape
    buf = np.zeros(math.prod(stride) * n * c * math.prod(q) + tail, x.dtype)
    grid = buf[: buf.size - tail].reshape(*stride, n, c, *q)
    for ph in itertools.product(*(range(st) for st in stride)):
        firsts = [(f - p) % st for f, p, st in zip(ph, padding, stride)]
        src = tuple(slice(f, None, st) for f, st in zip(firsts, stride))
        dst = tuple(
            slice((f + p) // st, (f + p) // st + len(range(f, e, st)))
            for f, p, st, e in zip(firsts, padding, stride, size)
        )
        grid[ph][(slice(None), slice(None), *dst)] = x[(slice(None), slice(None), *src)]
    return buf


def _depthwise(
    x: np.ndarray, w: np.ndarray, stride: list[int], padding: list[int], dilation: list[int], res: np.ndarray
) -> None:
    """res (N, C·m, *P) from one input channel per group: Σ over taps of shifted x · weight.

    Each tap multiplies whole rows of the phase grid: one row per (sample, channel) spans
    P[0] rows of its padded plane, so a tap is a unit-stride (N, C, 1, span) view at an
    offset; the columns past each row's output extent are computed and dropped.
    """
    n, c = x.shape[:2]
    kernel, out_sp = w.shape[2:], res.shape[2:]
    mult = w.shape[0] // c
    offsets = [[t * d // st for t in range(k)] for k, d, st in zip(kernel, dilation, stride)]
    q = [-(-(e + 2 * p) // st) for e, p, st in zip(x.shape[2:], padding, stride)]
    pitch = [math.prod(q[i + 1 :]) for i in range(len(q))]
    rows, plane, span = n * c, math.prod(q), out_sp[0] * pitch[0]
    buf = _phase_grid(x, padding, stride, q, sum(off[-1] * p for off, p in zip(offsets, pitch)))
    exact = list(out_sp[1:]) == q[1:]
    acc = res.reshape(n, c, mult, span) if exact else np.empty((n, c, mult, span), res.dtype)
    tmp = np.empty_like(acc)
    taps = np.moveaxis(w.reshape(c, mult, -1), 2, 0)[:, None, :, :, None].copy()  # (K, 1, C, m, 1)
    for k, tap in enumerate(itertools.product(*(range(s) for s in kernel))):
        phase = np.ravel_multi_index([t * d % st for t, d, st in zip(tap, dilation, stride)], stride)
        start = phase * rows * plane + sum(off[t] * p for off, t, p in zip(offsets, tap, pitch))
        view = buf[start : start + rows * plane].reshape(n, c, 1, plane)[..., :span]
        if k == 0:
            np.multiply(view, taps[k], out=acc)
        else:
            acc += np.multiply(view, taps[k], out=tmp)
    if not exact:
        rows = acc.reshape(n, c * mult, out_sp[0], *q[1:])
        res[...] = rows[(..., *(slice(o) for o in out_sp[1:]))]


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


@kernel("aten::convolution.out", dtypes=FLOAT_DTYPES)
def convolution_out(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
    out: np.ndarray,
) -> np.ndarray:
    """Input (N, C, *S), weight (O, C/groups, *K) — or (C, O/groups, *K) when transposed."""
    nsp = x.ndim - 2
    if nsp < 1 or weight.ndim != x.ndim:
        raise KernelError(f"convolution: input {list(x.shape)} and weight {list(weight.shape)} do not match")
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
