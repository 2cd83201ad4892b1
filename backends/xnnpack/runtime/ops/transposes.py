"""Transposes folded away at compile time: a transpose of a transpose as one, and a batched product written
straight into the layout of the transpose that alone reads it.

ExecuTorch lowers attention with a StaticTranspose on each side of its batched products: the heads' outputs
[H, T, D] are transposed back to [T, H, D] before the output projection (the zoo transformer and the tier's vit,
whose lowering chains three transposes there), and k is transposed twice, [T, H, D] → [H, T, D] → [H, D, T]. Each
transpose is one more strided pass over the tensor. `fold` rewrites the compiled ops:

- StaticTranspose → StaticTranspose, the first's output read only by the second: one transpose by the composed
  permutation;
- BatchMatrixMultiply → StaticReshape* → StaticTranspose, each value between them read only by the next and neither
  external nor rounded: one `TransposedProduct`, whose product writes its heads straight into the transpose's output
  (BLAS given that output's strides, ldc = H·D: `blas.bound_stack`, one sgemm a head, split over the pool at
  more than one thread; numpy's matmul below MKL's size) when the output, viewed back through the transpose and
  the reshapes, is a strided view of it; else (other shapes at bind) the product into a buffer and one copy.

The numbers are the same (tested bit for bit): each head's product is the same sums with another output stride, and
a transpose moves numbers without rounding them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from etbuild.backends.xnnpack.runtime.grids import Snap
from etbuild.backends.xnnpack.runtime.ops.base import Op, Shape, reshaped, scratch, then
from etbuild.backends.xnnpack.runtime.ops.gemm import BatchMatrixMultiply
from etbuild.backends.xnnpack.runtime.ops.layout import StaticReshape, StaticTranspose, permuted_copy
from etbuild.backends.xnnpack.runtime.values import Value
from etbuild.errors import InternalError
from etbuild.kernels.numerics.blas import LIBRARY_MACS, bound_stack
from etbuild.runtime.steps import Step


class Transpose(StaticTranspose):
    """A StaticTranspose made at compile time (two transposes composed)."""

    def __init__(self, x: int, out: int, perm: tuple[int, ...], name: str) -> None:  # noqa: D107
        Op.__init__(self, [x], [out])
        self.name, self.perm = name, perm


class TransposedProduct(Op):
    """A BatchMatrixMultiply, the reshapes after it and the StaticTranspose reading them, as one step."""

    def __init__(self, product: BatchMatrixMultiply, reshapes: list[StaticReshape], transpose: StaticTranspose) -> None:
        super().__init__(product.inputs, transpose.outputs)
        self.name = f"{product.name} + {transpose.name}"
        self.product, self.reshapes, self.transpose = product, reshapes, transpose

    def _chain(self, shapes: Sequence[Shape]) -> list[Shape]:
        """The product's output shape, each reshape's, then the transpose's."""
        chain = [self.product.infer(shapes)[0]]
        for r in self.reshapes:
            chain.append(r.infer([chain[-1]])[0])
        return [*chain, self.transpose.infer([chain[-1]])[0]]

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        return [self._chain(shapes)[-1]]

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        chain, out = self._chain([a.shape for a in ins]), outs[0]
        view = out.transpose(np.argsort(self.transpose.perm))  # the transpose's input, as a view of out
        try:
            for shape in reversed(chain[:-2]):  # back through the reshapes: views, or no fold
                view = reshaped(view, shape)
        except InternalError:
            view = None
        if view is not None and not any(np.may_share_memory(out, a) for a in ins):
            if math.prod(chain[0]) * ins[0].shape[-1] < LIBRARY_MACS:  # numpy's matmul: one call, its loop per matrix
                return self.product.bind(ins, [view])
            b = np.swapaxes(ins[1], -1, -2) if self.product.transpose_b else ins[1]
            return bound_stack(ins[0], b, view)  # one sgemm a head: MKL's batch call refuses interleaved outputs
        mid = scratch(chain[0])
        moved = permuted_copy(out, reshaped(mid, chain[-2]).transpose(self.transpose.perm))
        return then(self.product.bind(ins, [mid]), moved)


def fold(ops: list[Op], snaps: list[list[Snap | None]], values: dict[int, Value]
         ) -> tuple[list[Op], list[list[Snap | None]]]:
    """The ops with transposes composed and batched products written into their transposes' layout (see the
    module docstring); the snaps follow their ops."""
    pairs = list(zip(ops, snaps))
    pairs = _compose(pairs, values)
    pairs = _into_products(pairs, values)
    return [op for op, _ in pairs], [s for _, s in pairs]


Pair = tuple[Op, list["Snap | None"]]


def _inner(pairs: list[Pair], values: dict[int, Value]) -> tuple[dict[int, int], Counter[int]]:
    """Where each value is computed (index into pairs), and how many ops read it."""
    made = {o: k for k, (op, _) in enumerate(pairs) for o in op.outputs}
    return made, Counter(i for op, _ in pairs for i in op.inputs)


def _private(v: int, k: int, pairs: list[Pair], values: dict[int, Value], readers: Counter[int]) -> bool:
    """Whether value v, made by pairs[k], is read once, not external, and not rounded."""
    op, snap = pairs[k]
    return readers[v] == 1 and not values[v].is_output and not values[v].is_input and len(op.outputs) == 1 \
        and snap[0] is None


def _compose(pairs: list[Pair], values: dict[int, Value]) -> list[Pair]:
    made, readers = _inner(pairs, values)
    dropped: set[int] = set()
    for k, (op, snap) in enumerate(pairs):
        if not isinstance(op, StaticTranspose) or snap[0] is not None:
            continue
        j = made.get(op.inputs[0])
        if j is None or j in dropped or not isinstance(pairs[j][0], StaticTranspose) \
                or not _private(op.inputs[0], j, pairs, values, readers):
            continue
        first = pairs[j][0]
        perm = tuple(first.perm[p] for p in op.perm)  # x.transpose(p1).transpose(p2) = x.transpose(p1[p2])
        pairs[k] = (Transpose(first.inputs[0], op.outputs[0], perm, op.name), snap)  # named as the profiler reads
        dropped.add(j)
    return [p for k, p in enumerate(pairs) if k not in dropped]


def _into_products(pairs: list[Pair], values: dict[int, Value]) -> list[Pair]:
    made, readers = _inner(pairs, values)
    dropped: set[int] = set()
    for k, (op, snap) in enumerate(pairs):
        if not isinstance(op, StaticTranspose):
            continue
        reshapes, v = [], op.inputs[0]
        j = made.get(v)
        while j is not None and isinstance(pairs[j][0], StaticReshape) and _private(v, j, pairs, values, readers):
            reshapes.insert(0, pairs[j][0])
            v = pairs[j][0].inputs[0]
            j = made.get(v)
        if j is None or not isinstance(pairs[j][0], BatchMatrixMultiply) \
                or not _private(v, j, pairs, values, readers) or j in dropped:
            continue
        pairs[k] = (TransposedProduct(pairs[j][0], reshapes, op), snap)
        dropped.update([j, *(made[r.outputs[0]] for r in reshapes)])
    return [p for k, p in enumerate(pairs) if k not in dropped]
