"""The 2-D window of a convolution or pooling node (NHWC): its parameters, checked, and its buffers.

The geometry itself (extents, window and tap views) is etbuild.kernels.numerics.window's, shared
with the portable kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from etbuild.backends.xnnpack.runtime.ops.base import scratch
from etbuild.errors import InvalidProgram
from etbuild.kernels.numerics import window as geometry

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
    def pads(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(before, after) padding of H and W."""
        return (self.top, self.bottom), (self.left, self.right)

    @property
    def span(self) -> tuple[int, int]:
        """The dilated kernel's extent."""
        return geometry.span(self.kh, self.dh), geometry.span(self.kw, self.dw)

    def out_size(self, h: int, w: int) -> tuple[int, int]:
        """The output extent of the window over an h×w input padded by its padding; below 1 where none fits."""
        (top, bottom), (left, right) = self.pads
        return (geometry.out_extent(h + top + bottom, self.kh, self.sh, self.dh),
                geometry.out_extent(w + left + right, self.kw, self.sw, self.dw))

    def sliding(self) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        """(kernel, stride, dilation) as numerics.window takes them."""
        return (self.kh, self.kw), (self.sh, self.sw), (self.dh, self.dw)


def pad_buffer(x_shape: Sequence[int], win: Window, fill: float) -> tuple[np.ndarray, np.ndarray]:
    """A float32 buffer of the padded input, borders already `fill`, and the view of its interior."""
    buf = scratch(geometry.padded_shape(x_shape, 1, win.pads), fill)
    return buf, geometry.interior(buf, 1, win.pads, x_shape)


def taps(src: np.ndarray, win: Window) -> list[np.ndarray]:
    """One strided [N, OH, OW, C] view of the (padded) input per kernel tap, row-major over the kernel."""
    return geometry.taps(src, 1, *win.sliding())
