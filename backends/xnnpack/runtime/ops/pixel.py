"""A 1×1 convolution of one pixel (a network's last convolution after global pooling) as a one-row product.

MobileNetV4's 960 → 1280 1×1 convolution after its global pooling reads a 4.9 MB filter for 1.2 M multiply-adds:
bound by the filter's bytes, not the arithmetic. Packed at init as `compiled.tiled_matvec`'s tiles of 128 outputs
(in huge-page memory, etbuild.runtime.hugepages), each tile streams once while its sums stay in registers:
XNNPACK's order of fused multiply-adds, so ExecuTorch's bits, 2-3x faster than BLAS's product on this shape
(on one thread, filter out of cache: 195 against 556 µs; in cache 74 against 119).
"""

from __future__ import annotations

import functools
import math
from types import ModuleType

import numpy as np

from etbuild.backends.xnnpack.runtime import loops as compiled_loops
from etbuild.backends.xnnpack.runtime.ops.window import Window
from etbuild.backends.xnnpack.runtime.values import Value
from etbuild.runtime.hugepages import place
from etbuild.runtime.steps import Step


def pixel_tiles(packed: np.ndarray, win: Window, integer: bool, x: Value) -> np.ndarray | None:
    """The filter `packed` ([1, K, N] float32) as tiles, for a float 1×1 stride-1 unpadded convolution of one group
    whose input (at the blob's dims) is one pixel and that has at least two tiles of outputs; else None."""
    loops = compiled_loops.compiled()
    groups, k, n = packed.shape
    one_by_one = (win.kh, win.kw, win.sh, win.sw) == (1, 1, 1, 1) and not win.padded
    if loops is None or integer or groups != 1 or not one_by_one or math.prod(x.dims) != k or n < 2 * loops.TILE:
        return None
    return place(loops.pack_tiles(packed[0]))


def pixel_step(loops: ModuleType, filter_tiles: np.ndarray, x: np.ndarray, bias: np.ndarray | None, out: np.ndarray,
         clamp: tuple[float, float]) -> Step:
    """out = clamp(bias + x @ filter) for one pixel x (K,) into out (N,), C-contiguous and disjoint."""
    bias = bias if bias is not None else np.zeros(out.shape[0], np.float32)
    product = functools.partial(loops.tiled_matvec, filter_tiles, x, bias, out)
    if clamp == (-math.inf, math.inf):
        return product
    clamped = functools.partial(loops.clamp, out, *(np.float32(b) for b in clamp))

    def matvec_clamp() -> None:
        product()
        clamped()

    return matvec_clamp
