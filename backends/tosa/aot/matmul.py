"""Batched matrix products and multiplies by a constant scalar (attention's QKᵀ, AV and its 1/√d), TOSA-1.0+INT.

`bmm` of two int8 values → MATMUL with both zero points, into an int32 accumulator at the product of
their scales (the quantize that reads it RESCALEs it). A multiply by a positive scalar only changes the
real value of a step: the same int8 codes at scale × c.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from torch.fx import Node

from etbuild.backends.tosa.aot import compute
from etbuild.backends.tosa.aot.quant import QParams
from etbuild.backends.tosa.aot.values import TORCH, Context, Value, in_layout


def bmm(lw: Context, node: Node) -> Value:
    """bmm(a, b) of int8 [N, H, C] and [N, C, W] values → MATMUL, int32 [N, H, W]."""
    b = lw.b
    a, c = (in_layout(b, lw.value(n), TORCH) for n in node.args[:2])
    shape = tuple(node.meta["val"].shape)
    inputs = [a.tensor, c.tensor, b.zero_point(a.params.zero_point, np.int8),
              b.zero_point(c.params.zero_point, np.int8)]
    acc = b.op("MATMUL", inputs, shape, np.int32, "MatMulAttribute")
    return Value(acc, shape, TORCH, scales=np.array([a.params.scale * c.params.scale]))


def scalar(node: Node) -> float | None:
    """The scalar of a multiply by a number (None: a multiply of two values)."""
    other = node.args[1]
    return None if isinstance(other, Node) else float(other)


def mul(lw: Context, node: Node) -> Value:
    """mul.Tensor: of two int8 values (compute.mul), or of one by a positive scalar: no operator, the same codes
    with a step worth `factor` times more (its quantize RESCALEs them once, or not at all when the observer
    saw exactly the scaled range, as attention's 1/√d usually gives)."""
    factor = scalar(node)
    if factor is None:
        return compute.mul(lw, node)
    x = lw.value(node.args[0])
    if x.scales is not None:
        bounds = None if x.clamp is None else (x.clamp[0] * factor, x.clamp[1] * factor)
        return replace(x, scales=x.scales * factor, clamp=bounds)
    return replace(x, params=QParams(x.params.scale * factor, x.params.zero_point))
