"""Int8 convolutions and fully connected nodes computed as XNNPACK computes them, bit for bit.

XNNPACK runs a convolution between int8 grids in integers: acc = bias + Σ (x − x_zp) · w, exact in
int32, then out = round_half_even(float32(acc) · s_c) + out_zp, clamped, with one float32 factor per
output channel s_c = (x_scale · w_scale_c) / out_scale (a fully connected node alike). Computed in
float32 on the real values, the sums round differently, and an output near a rounding tie lands
one step away from XNNPACK's (on a RegNet, from the first convolution on). So the same kernels
(im2col matmul, depthwise loops, BLAS) run on the integer codes held as float32 instead, which is exact while no
partial sum exceeds 2^24 in magnitude (an int8 output then saturates anyway unless its factor is
below 2^-17), and the epilogue applies the bias and XNNPACK's factor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from etbuild.backends.xnnpack.format.graph import XNNDatatype as DT
from etbuild.backends.xnnpack.runtime.values import Value
from etbuild.runtime.steps import Step

INT8_GRIDS = frozenset({DT.QINT8, DT.QUINT8})
EXACT = 2.0**24  # float32 holds every integer up to this


@dataclass(frozen=True)
class Requantization:
    """What turns integer accumulators back into an int8 output: the input's inverse scale (to read
    its codes), the bias codes and per-channel factors (float32), and the output's scale."""

    inv_in: np.float32
    bias: np.ndarray | None
    factors: np.ndarray
    out_scale: np.float32

    def around(self, product: Step, x: np.ndarray, codes: np.ndarray, o: np.ndarray) -> Step:
        """The step: x's codes into `codes`, `product` (codes → integer sums in o), then requantize o."""
        inv_in, bias, factors, out_scale = self.inv_in, self.bias, self.factors, self.out_scale

        def integer_convolution() -> None:
            np.multiply(x, inv_in, out=codes)
            np.rint(codes, out=codes)
            product()
            if bias is not None:
                np.add(o, bias, out=o)
            np.multiply(o, factors, out=o)
            np.rint(o, out=o)
            np.multiply(o, out_scale, out=o)

        return integer_convolution


def integer_form(x: Value, w: Value, b: Value | None, out: Value, cout: int,
                 axis: int) -> tuple[np.ndarray, Requantization] | None:
    """The filter's integer codes (float32, the filter's dims) and the requantization, when the node
    runs between int8 grids on constant int8 weights (per tensor, or per channel along `axis`, the
    output channels) with an int32 bias (else None: float form)."""
    if x.grid.datatype not in INT8_GRIDS or out.grid.datatype not in INT8_GRIDS or w.codes is None:
        return None
    if w.codes.axis not in (None, axis):
        return None
    if w.datatype not in (DT.QINT8, DT.QCINT8) or (b is not None and b.codes is None):
        return None
    if w.codes.zero_point or (b is not None and np.abs(b.codes.relative()).max(initial=0) >= EXACT):
        return None
    w_scales = np.broadcast_to(w.codes.scales, (cout,)) if w.codes.axis is None else w.codes.scales
    if len(w_scales) != cout:
        return None
    factors = (np.float32(x.grid.scale) * w_scales.astype(np.float32)) / np.float32(out.grid.scale)
    bias = None if b is None else b.codes.relative().astype(np.float32).reshape(cout)
    requant = Requantization(np.float32(1.0 / np.float32(x.grid.scale)), bias, factors.astype(np.float32),
                             np.float32(out.grid.scale))
    return w.codes.relative().astype(np.float32), requant
