"""Softmax over the last dimension: exp(x − max) / Σ exp(x − max)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.runtime.ops.base import Context, Op, Shape, Step, builds, fail, scratch


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

        def softmax() -> None:
            np.max(x, axis=-1, keepdims=True, out=peak)
            np.subtract(x, peak, out=o)
            np.exp(o, out=o)
            np.add.reduce(o, axis=-1, keepdims=True, out=total)
            np.divide(o, total, out=o)

        return softmax
