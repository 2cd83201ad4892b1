"""Softmax over the last dimension: exp(x − max) / Σ exp(x − max).

Where no exp can overflow (the largest input at most SAFE_EXP − ln(row length)), exp(x) / Σ exp(x)
is the same quotient without the row maxima: numpy finds the largest of all inputs in one
vectorized pass, where row maxima along the contiguous axis take a pass per row, and BLAS sums
the rows (a product with ones). Each exp(x) is then as accurate as exp(x − max) (no rounded
subtraction). Rows whose sum falls below TINY_SUM, where exps may have underflowed, and inputs
with nan or ±inf take the shifted path, as every non-contiguous call does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.runtime.ops.base import Context, Op, Shape, builds, fail, scratch
from etbuild.runtime.steps import Step


@builds("Softmax")
class Softmax(Op):
    name = "Softmax"
    special = True  # infinite inputs give nan

    def __init__(self, node: g.UnaryNode, ctx: Context) -> None:
        ctx.check_flags(node.flags)
        super().__init__([ctx.value(node.input_id).id], [ctx.value(node.output_id, "output").id])

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        if not shapes[0]:
            raise fail(self, "input has no dims")
        return [shapes[0]]

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        x, o = ins[0], outs[0]
        peak = scratch((*x.shape[:-1], 1))
        total = scratch(peak.shape)

        def shifted() -> None:
            np.maximum.reduce(x, axis=-1, keepdims=True, out=peak)
            np.subtract(x, peak, out=o)
            np.exp(o, out=o)
            np.add.reduce(o, axis=-1, keepdims=True, out=total)
            np.divide(1.0, total, out=total)  # one reciprocal per row, then a multiply
            np.multiply(o, total, out=o)

        if x.size == 0 or not (x.flags.c_contiguous and o.flags.c_contiguous) or np.may_share_memory(x, o):
            return shifted
        return _unshifted(x, o, total.reshape(-1), shifted)


SAFE_EXP = 87.0  # inputs ≤ 87 − ln(n): a row's n exps sum to at most e^87 ≈ 6.1e37 < 3.4e38, float32's largest
TINY_SUM = np.float32(1e-10)  # an exp that underflowed (< 1.2e-38) is then < 1.2e-28 of its row's sum


def _unshifted(x: np.ndarray, o: np.ndarray, total: np.ndarray, shifted: Callable[[], None]) -> Step:
    """exp(x) / Σ exp(x) on contiguous x and o (not sharing memory), `shifted` where that could over- or underflow."""
    n = x.shape[-1]
    rows_o, flat_x = o.reshape(-1, n), x.reshape(-1)
    ones, scale = np.ones(n, np.float32), total.reshape(-1, 1)
    limit = np.float32(SAFE_EXP - math.log(n))
    largest, exp, dot, divide, multiply = np.maximum.reduce, np.exp, np.dot, np.divide, np.multiply

    def softmax() -> None:
        if largest(flat_x) <= limit:  # false for nan too
            exp(x, o)
            dot(rows_o, ones, total)
            if total.min() >= TINY_SUM:
                divide(1.0, total, total)
                multiply(rows_o, scale, rows_o)
                return
        shifted()

    return softmax
