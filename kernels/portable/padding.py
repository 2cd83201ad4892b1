"""Padding: constant_pad_nd, reflection_pad{1,2,3}d, replication_pad{1,2,3}d.

A torch pad list runs from the last dim backwards: [last_lo, last_hi, prev_lo, prev_hi, ...].
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from etbuild.errors import KernelError
from etbuild.kernels.portable.common import named, store
from etbuild.runtime.kernel_registry import ALL_DTYPES, REAL_DTYPES, kernel
from etbuild.runtime.tensor import resize


def pad_pairs(pad: list[int], ndim: int, what: str) -> list[tuple[int, int]]:
    """Per-dim (lo, hi) amounts, first dim first, for a torch pad list."""
    if len(pad) % 2 or len(pad) // 2 > ndim:
        raise KernelError(f"{what}: pad {pad} does not fit a {ndim}-d tensor")
    pairs = [(0, 0)] * ndim
    for i in range(len(pad) // 2):
        pairs[ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return pairs


@kernel("aten::constant_pad_nd.out", dtypes=ALL_DTYPES)
def constant_pad_nd_out(x: np.ndarray, pad: list[int], value: float, out: np.ndarray) -> np.ndarray:
    """Pad with `value`; negative amounts crop."""
    pairs = pad_pairs(pad, x.ndim, "constant_pad_nd")
    shape = [n + lo + hi for n, (lo, hi) in zip(x.shape, pairs)]
    if min(shape, default=0) < 0:
        raise KernelError(f"constant_pad_nd: pad {pad} crops {list(x.shape)} below zero")
    out = resize(out, shape)
    out.fill(value)
    src = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for n, (lo, hi) in zip(x.shape, pairs))
    dst = tuple(slice(max(lo, 0), s - max(hi, 0)) for s, (lo, hi) in zip(shape, pairs))
    np.copyto(out[dst], x[src], casting="unsafe")
    return out


# name -> (numpy pad mode, spatial dims)
BORDER_PADS: dict[str, tuple[str, int]] = {
    "aten::reflection_pad1d.out": ("reflect", 1),
    "aten::reflection_pad2d.out": ("reflect", 2),
    "aten::reflection_pad3d.out": ("reflect", 3),
    "aten::replication_pad1d.out": ("edge", 1),
    "aten::replication_pad2d.out": ("edge", 2),
    "aten::replication_pad3d.out": ("edge", 3),
}


def _border_pad(mode: str, nsp: int) -> Callable[[np.ndarray, list[int], np.ndarray], np.ndarray]:
    def pad_out(x: np.ndarray, padding: list[int], out: np.ndarray) -> np.ndarray:
        if x.ndim not in (nsp + 1, nsp + 2) or len(padding) != 2 * nsp or min(padding) < 0:
            raise KernelError(f"{mode} pad: padding {padding} does not fit input {list(x.shape)}")
        pairs = pad_pairs(padding, x.ndim, f"{mode} pad")
        if mode == "reflect" and any(max(p) >= n for p, n in zip(pairs, x.shape)):
            raise KernelError(f"reflection pad: padding {padding} must be smaller than input {list(x.shape)}")
        return store(out, np.pad(x, pairs, mode=mode))

    return pad_out


for _name, (_mode, _nsp) in BORDER_PADS.items():
    kernel(_name, dtypes=REAL_DTYPES)(named(_border_pad(_mode, _nsp), _name, __name__))
