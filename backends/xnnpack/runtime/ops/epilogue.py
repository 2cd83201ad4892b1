"""A FullyConnected and the node that alone reads its output, as one step: the product, then one compiled pass.

After a float product, its bias add and the next node's own pass each read and write the whole output again
(a transformer's 128 × 1024 GELU input: the product, a bias pass, a GELU pass). `fuse` joins a FullyConnected with
the node right after it when that node is the only reader of the product and the product is plain float32 from a
constant filter (no rounding of either output, no integer or one-row form):

- FullyConnected → Gelu: `compiled.bias_gelu_rows`, gelu(product + bias);
- FullyConnected → Add of a value of the product's shape (a residual): `compiled.bias_add_rows`.

The product then has no storage of its own: it is written into the follower's output and finished there in place.
Same bits as the two nodes' steps (the same product, numpy's adds, the same GELU loop). Compiled only when numba's
loops are on; a binding the fused pass cannot take (one row, other layouts) runs the two steps through a buffer.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from etbuild.backends.xnnpack.format.graph import XNNDatatype as DT
from etbuild.backends.xnnpack.runtime import loops as compiled_loops
from etbuild.backends.xnnpack.runtime.ops.base import Op, Shape, flat2d, scratch, then
from etbuild.backends.xnnpack.runtime.ops.elementwise import UNARY, Binary, Unary
from etbuild.backends.xnnpack.runtime.ops.gemm import FullyConnected
from etbuild.backends.xnnpack.runtime.values import Value
from etbuild.runtime.steps import Step


class Epilogue(Op):
    """FullyConnected `fc` and its only reader `follower` (Gelu, or Add with `other`) in one step."""

    def __init__(self, fc: FullyConnected, follower: Op, other: int | None) -> None:
        extra = () if other is None else (other,)
        super().__init__((*fc.inputs, *extra), follower.outputs)
        self.name = f"{fc.name} + {follower.name}"
        self.fc, self.follower, self.other = fc, follower, other
        self.special = fc.special or follower.special
        self.product_first = follower.inputs[0] == fc.outputs[0]

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        n = len(self.fc.inputs)
        mid = self.fc.infer(shapes[:n])[0]
        return self.follower.infer(self._follower_ins(mid, shapes[n] if self.other is not None else None))

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        n = len(self.fc.inputs)
        other = ins[n] if self.other is not None else None
        fused = self._fused(ins[:n], outs[0], other)
        if fused is not None:
            return fused
        mid = scratch(self.fc.infer([a.shape for a in ins[:n]])[0])  # the two steps, the product in a buffer
        return then(self.fc.bind(ins[:n], [mid]), self.follower.bind(self._follower_ins(mid, other), outs))

    def _follower_ins(self, mid: Any, other: Any) -> list[Any]:
        """The follower's inputs in its own order: the product, and the other operand of an Add."""
        if other is None:
            return [mid]
        return [mid, other] if self.product_first else [other, mid]

    def _fused(self, fc_ins: Sequence[np.ndarray], out: np.ndarray, other: np.ndarray | None) -> Step | None:
        """The product into out, then bias and follower in one compiled pass; None where that does not apply."""
        loops = compiled_loops.compiled()
        plain = self.fc.plain_product(fc_ins, out)
        if loops is None or plain is None:
            return None
        product, bias = plain
        rows = flat2d(out, self.fc.n)
        bias = bias if bias is not None else np.zeros(self.fc.n, np.float32)
        if other is None:
            return then(product, functools.partial(loops.bias_gelu_rows, rows, bias))
        if other.shape != out.shape or other.dtype != np.float32 or not other.flags.c_contiguous \
                or np.may_share_memory(other, out):
            return None
        return then(product, functools.partial(loops.bias_add_rows, rows, bias, flat2d(other, self.fc.n)))


def fuse(op: Op, follower: Op, values: dict[int, Value]) -> Op | None:
    """op and follower as one Epilogue when op is a float FullyConnected whose product only follower reads and
    follower is a Gelu or an Add of a value of the product's shape, all float32 (the caller checks that follower
    alone reads the product and that neither output is rounded); else None."""
    if not isinstance(op, FullyConnected) or not op.plain_filter or compiled_loops.compiled() is None:
        return None
    mid = op.outputs[0]
    if any(values[v].datatype != DT.FP32 for v in (mid, *follower.outputs)):
        return None
    if isinstance(follower, Unary) and follower.fn is UNARY["Gelu"] and follower.inputs == (mid,):
        return Epilogue(op, follower, None)
    if isinstance(follower, Binary) and follower.fn is np.add and mid in follower.inputs:
        other = follower.inputs[1] if follower.inputs[0] == mid else follower.inputs[0]
        if other != mid and values[other].datatype == DT.FP32 and values[other].dims == values[mid].dims:
            return Epilogue(op, follower, other)
    return None
