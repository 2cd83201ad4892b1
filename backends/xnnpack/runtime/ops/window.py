"""2-D window geometry shared by convolutions and poolings (NHWC): sizes, padding, taps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from etbuild.backends.xnnpack.runtime.ops.base import scratch
from etbuild.errors import InvalidProgram

MAX_WINDOW = 1 << 16


@dataclass(frozen=True)
class Window:
    """Padding (top, right, bottom, left), kernel, stride and dilation of a 2-D window."""

    top: int
    right: int
    bottom: int
    left: int
    kh: int
    kw: int
    sh: int = 1
    sw: int = 1
    dh: int = 1
    dw: int = 1

    def check(self, where: str) -> Window:
        """Itself, after checking every extent is positive and bounded; InvalidProgram otherwise."""
        extents = (self.kh, self.kw, self.sh, self.sw, self.dh, self.dw)
        if min(extents) < 1 or max(*extents, self.top, self.right, self.bottom, self.left) > MAX_WINDOW:
            raise InvalidProgram(f"{where}: window {self} has an extent below 1 or above {MAX_WINDOW}")
        return self

    @property
    def padded(self) -> bool:
        return bool(self.top or self.right or self.bottom or self.left)

    @property
    def span(self) -> tuple[int, int]:
        """The dilated kernel's extent."""
        return self.dh * (self.kh - 1) + 1, self.dw * (self.kw - 1) + 1

    def out_size(self, h: int, w: int) -> tuple[int, int]:
        """The output extent of a sliding window over an h×w input (after padding); -1 if it does not fit."""
        ph, pw = h + self.top + self.bottom, w + self.left + self.right
        eh, ew = self.span
        if ph < eh or pw < ew:
            return -1, -1
        return (ph - eh) // self.sh + 1, (pw - ew) // self.sw + 1


def pad_buffer(x_shape: Sequence[int], win: Window, fill: float) -> tuple[np.ndarray, np.ndarray]:
    """A float32 buffer of the padded input, borders already `fill`, and the view of its interior."""
    n, h, w, c = x_shape
    buf = scratch((n, h + win.top + win.bottom, w + win.left + win.right, c), fill)
    return buf, buf[:, win.top : win.top + h, win.left : win.left + w, :]


def taps(src: np.ndarray, win: Window, oh: int, ow: int) -> list[np.ndarray]:
    """One strided [N, OH, OW, C] view of the (padded) input per kernel tap, row-major over the kernel."""
    views = []
    for i in range(win.kh):
        for j in range(win.kw):
            y, x = i * win.dh, j * win.dw
            views.append(src[:, y : y + (oh - 1) * win.sh + 1 : win.sh, x : x + (ow - 1) * win.sw + 1 : win.sw, :])
    return views


def patches(src: np.ndarray, win: Window, oh: int, ow: int) -> np.ndarray:
    """The read-only [N, OH, OW, KH, KW, C] view of every window of a (padded) input."""
    sn, sy, sx, sc = src.strides
    shape = (src.shape[0], oh, ow, win.kh, win.kw, src.shape[3])
    strides = (sn, sy * win.sh, sx * win.sw, sy * win.dh, sx * win.dw, sc)
    return as_strided(src, shape, strides, writeable=False)
