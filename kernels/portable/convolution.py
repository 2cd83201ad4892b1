"""aten::convolution.out: N-d (1-D, 2-D, 3-D) convolution, grouped and transposed.

A forward convolution is im2col on a strided window view of the (padded) input, then one
matmul batched over groups. A transposed convolution is the forward convolution of the
input dilated by `stride`, padded by `dilation·(k−1) − padding` (negative pads crop), with
the kernel flipped and its in/out channels swapped within each group.
"""

from __future__ import annotations

import math

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.portable.common import cast, opmath, pad_spatial, per_dim, result_dtype, store, windows
from etbuild.kernels.registry import FLOAT_DTYPES, kernel


def _conv(x: np.ndarray, w: np.ndarray, stride: list[int], dilation: list[int], groups: int) -> np.ndarray:
    """Forward convolution of an already padded x: (N, C, *S) * (O, C/groups, *K)."""
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    nsp = x.ndim - 2
    if c != cg * groups or o % groups:
        raise KernelError(f"convolution: weight {list(w.shape)} does not fit {c} channels in {groups} groups")
    win = windows(x, w.shape[2:], stride, dilation)  # (N, C, *P, *K)
    out_sp = win.shape[2 : 2 + nsp]
    p, k = math.prod(out_sp), math.prod(w.shape[2:])
    win = win.reshape(n, groups, cg, *out_sp, *w.shape[2:])
    order = (1, 0, *range(3, 3 + nsp), 2, *range(3 + nsp, 3 + 2 * nsp))
    cols = win.transpose(order).reshape(groups, n * p, cg * k)
    wmat = w.reshape(groups, o // groups, cg * k).transpose(0, 2, 1)
    res = np.matmul(cols, wmat).reshape(groups, n, *out_sp, o // groups)
    res = res.transpose(1, 0, 2 + nsp, *range(2, 2 + nsp))
    return res.reshape(n, o, *out_sp)


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
        value = _conv(xc, wc, [1] * nsp, dilation, groups)
    else:
        value = _conv(pad_spatial(xc, [(p, p) for p in padding]), wc, stride, dilation, groups)
    if bias is not None:
        value += cast(bias, ct).reshape(1, -1, *([1] * nsp))
    return store(out, value)
