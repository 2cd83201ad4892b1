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
from etbuild.backends.xnnpack.format.graph import XNNDatatype as DT
from etbuild.backends.xnnpack.runtime import loops as compiled_loops
from etbuild.backends.xnnpack.runtime.ops.base import Context, Op, Shape, builds, fail, scratch, then
from etbuild.backends.xnnpack.runtime.ops.elementwise import Binary
from etbuild.backends.xnnpack.runtime.values import Value
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
        return _compiled(x, o, None) or _unshifted(x, o, total.reshape(-1), shifted)


def _compiled(x: np.ndarray, o: np.ndarray, scale: np.ndarray | None) -> Step | None:
    """softmax(x · scale) over contiguous, disjoint float32 x and o by numba's row loop
    (`compiled.softmax_rows`, shifted by the largest of all inputs, found by numpy in one vectorized pass),
    scale a one-element array read at each call (None: 1); None without numba's loops."""
    loops = compiled_loops.compiled()
    if loops is None or x.dtype != np.float32 or o.dtype != np.float32:
        return None
    n = x.shape[-1]
    rows, rows_o, flat = x.reshape(-1, n), o.reshape(-1, n), x.reshape(-1)
    largest, smallest, softmax_rows = np.maximum.reduce, np.minimum.reduce, loops.softmax_rows
    if scale is None:
        one = np.float32(1)
        return lambda: softmax_rows(rows, one, largest(flat), rows_o)
    factor = scale.reshape(-1)

    def scaled_softmax() -> None:
        s = factor[0]
        softmax_rows(rows, s, largest(flat) if s >= 0 else smallest(flat), rows_o)

    return scaled_softmax


class ScaledSoftmax(Op):
    """A Multiply by a one-element value and the Softmax that alone reads its product, as one step."""

    special = True

    def __init__(self, multiply: Binary, softmax: Softmax, x: int, scale: int) -> None:
        super().__init__(multiply.inputs, softmax.outputs)
        self.name = f"{multiply.name} + {softmax.name}"
        self.multiply, self.softmax, self.x_first = multiply, softmax, multiply.inputs[0] == x

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        return self.softmax.infer(self.multiply.infer(shapes))

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        x, scale = ins if self.x_first else ins[::-1]
        o = outs[0]
        if x.shape == o.shape and scale.size == 1 and x.flags.c_contiguous and o.flags.c_contiguous \
                and x.size and not np.may_share_memory(x, o):
            step = _compiled(x, o, scale)
            if step is not None:
                return step
        mid = scratch(self.multiply.infer([a.shape for a in ins])[0])  # the two steps, the product in a buffer
        return then(self.multiply.bind(ins, [mid]), self.softmax.bind([mid], outs))


def fuse_scale(op: Op, follower: Op, values: dict[int, Value]) -> Op | None:
    """A float32 Multiply by a one-element value and the Softmax reading its product, as a ScaledSoftmax (the
    caller checks that the softmax alone reads the product and that neither output is rounded); else None."""
    if not (isinstance(op, Binary) and op.fn is np.multiply and isinstance(follower, Softmax)) \
            or compiled_loops.compiled() is None:
        return None
    a, b = op.inputs
    mid = op.outputs[0]
    scale = b if math.prod(values[b].dims) == 1 else a if math.prod(values[a].dims) == 1 else None
    if scale is None or follower.inputs != (mid,):
        return None
    x = a if scale == b else b
    if any(values[v].datatype != DT.FP32 for v in (x, scale, mid, *follower.outputs)):
        return None
    return ScaledSoftmax(op, follower, x, scale)


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
