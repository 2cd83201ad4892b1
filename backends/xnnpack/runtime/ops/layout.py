"""Nodes that move numbers: transpose, reshape, slice, constant pad, concatenate, bilinear resize.

StaticReshape is a view: the planner gives its output the input's storage and runs no step
(`view = True`). The others copy with one numpy assignment from a strided view. Their
quantized forms need input and output on the same grid (XNNPACK requires equal
quantization parameters), except Concatenate and ResizeBilinear, whose output is rounded.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.nodes import ALIGN_CORNERS, TENSORFLOW_LEGACY
from etbuild.backends.xnnpack.runtime.ops.base import Context, Op, Shape, builds, fail, reshaped, scratch
from etbuild.kernels.numerics.blas import bound_product
from etbuild.runtime.steps import Step


class _Move(Op):
    same_grid = True

    def __init__(self, name: str, node: g.StaticTranspose | g.StaticReshape | g.StaticSlice | g.StaticConstantPad,
                 ctx: Context) -> None:
        self.name = name
        ctx.check_flags(node.flags)
        super().__init__([ctx.value(node.input_id).id], [ctx.value(node.output_id, "output").id])

    def _rank(self, x: Shape, n: int) -> None:
        if len(x) != n:
            raise fail(self, f"input shape {list(x)} does not have the node's {n} dims")


@builds("StaticTranspose")
class StaticTranspose(_Move):
    def __init__(self, node: g.StaticTranspose, ctx: Context) -> None:
        super().__init__("StaticTranspose", node, ctx)
        self.perm = tuple(int(p) for p in node.perm)
        if node.num_dims != len(self.perm) or sorted(self.perm) != list(range(len(self.perm))):
            raise ctx.fail(f"perm {list(self.perm)} is not a permutation of {node.num_dims} dims")

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        self._rank(shapes[0], len(self.perm))
        return [tuple(shapes[0][p] for p in self.perm)]

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        return permuted_copy(outs[0], ins[0].transpose(self.perm))


SHORT_LAST = 8  # a last dim this short is copied one index at a time when the source is strided along it


def permuted_copy(out: np.ndarray, src: np.ndarray) -> Step:
    """out[...] = src (a permuted view), bound once. When out's last dim is short (NCHW → NHWC of a 3-channel
    image) and src is strided along it, numpy's copy runs an inner loop of that few elements per pixel; one copy
    per index of the last dim runs along src's contiguous rows instead (3-4x faster at [1, 3, 96, 96])."""
    short = out.ndim > 1 and out.shape[-1] <= SHORT_LAST and src.strides[-1] != src.itemsize
    if not short or out.size < 64 * out.shape[-1]:
        return functools.partial(np.copyto, out, src)
    pairs = [(out[..., k], src[..., k]) for k in range(out.shape[-1])]

    def by_last_index() -> None:
        for dst, part in pairs:
            np.copyto(dst, part)

    return by_last_index


@builds("StaticReshape")
class StaticReshape(_Move):
    view = True

    def __init__(self, node: g.StaticReshape, ctx: Context) -> None:
        super().__init__("StaticReshape", node, ctx)
        self.shape = tuple(int(d) for d in node.new_shape)
        if node.num_dims != len(self.shape) or self.shape.count(0) > 1:
            raise ctx.fail(f"new_shape {list(self.shape)} (num_dims {node.num_dims}) has more than one inferred dim")

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        count = math.prod(shapes[0])
        known = math.prod(d for d in self.shape if d)
        if 0 in self.shape:
            if not known or count % known:
                raise fail(self, f"cannot infer a dim of {list(self.shape)} from input {list(shapes[0])}")
            return [tuple(d or count // known for d in self.shape)]
        if known != count:
            raise fail(self, f"new shape {list(self.shape)} does not hold the {count} elements of {list(shapes[0])}")
        return [self.shape]

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        return functools.partial(np.copyto, outs[0], reshaped(ins[0], outs[0].shape))


@builds("StaticSlice")
class StaticSlice(_Move):
    def __init__(self, node: g.StaticSlice, ctx: Context) -> None:
        super().__init__("StaticSlice", node, ctx)
        self.offsets, self.sizes = tuple(node.offsets), tuple(node.sizes)
        if not node.num_dims == len(self.offsets) == len(self.sizes):
            raise ctx.fail(f"offsets {list(self.offsets)} and sizes {list(self.sizes)} for {node.num_dims} dims")

    def _bounds(self, x: Shape) -> list[tuple[int, int]]:
        """[start, stop) per dim for input shape x, as XNNPACK's reshape computes them: the end is offset
        + size, one <= 0 (offset and size 0) counts from the input's end, so the whole dim, whatever its
        size at run time; then the offset and the size are clamped to the input."""
        self._rank(x, len(self.offsets))
        bounds = []
        for dim, offset, size in zip(x, self.offsets, self.sizes):
            start = min(offset, dim)
            length = dim if offset + size == 0 else size
            bounds.append((start, start + min(length, dim - start)))
        return bounds

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        return [tuple(b - a for a, b in self._bounds(shapes[0]))]

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        return functools.partial(np.copyto, outs[0], ins[0][tuple(slice(a, b) for a, b in self._bounds(ins[0].shape))])


@builds("StaticConstantPad")
class StaticConstantPad(_Move):
    def __init__(self, node: g.StaticConstantPad, ctx: Context) -> None:
        super().__init__("StaticConstantPad", node, ctx)
        self.pre, self.post = tuple(node.pre_paddings), tuple(node.post_paddings)
        if len(self.pre) != len(self.post) or max((*self.pre, *self.post), default=0) > 1 << 24:
            raise ctx.fail(f"paddings {list(self.pre)} / {list(self.post)} differ in length or are too large")
        fill = np.array([node.padding_value], np.float32)
        snap = ctx.value(node.output_id, "output").grid.snapper()
        if snap is not None:
            snap(fill)
        self.fill = fill[0]

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        self._rank(shapes[0], len(self.pre))
        return [tuple(d + a + b for d, a, b in zip(shapes[0], self.pre, self.post))]

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        x, o, fill = ins[0], outs[0], self.fill
        inner = o[tuple(slice(a, a + d) for a, d in zip(self.pre, x.shape))]

        def pad() -> None:
            o.fill(fill)
            np.copyto(inner, x)

        return pad


@builds("Concatenate2", "Concatenate3", "Concatenate4", "Concatenate5")
class Concatenate(Op):
    same_grid = True

    def __init__(self, node: g.Concatenate, ctx: Context) -> None:
        self.name = type(node).__name__
        ctx.check_flags(node.flags)
        count = int(self.name[-1])
        ids = [node.input1_id, node.input2_id, node.input3_id, node.input4_id, node.input5_id][:count]
        super().__init__([ctx.value(i).id for i in ids], [ctx.value(node.output_id, "output").id])
        self.axis = node.axis

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        first = shapes[0]
        if self.axis >= len(first):
            raise fail(self, f"axis {self.axis} is not a dim of {list(first)}")
        for s in shapes[1:]:
            if len(s) != len(first) or any(a != b for k, (a, b) in enumerate(zip(s, first)) if k != self.axis):
                raise fail(self, f"inputs {[list(s) for s in shapes]} differ outside axis {self.axis}")
        total = sum(s[self.axis] for s in shapes)
        return [(*first[: self.axis], total, *first[self.axis + 1 :])]

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        return functools.partial(np.concatenate, tuple(ins), axis=self.axis, out=outs[0])


@builds("StaticResizeBilinear2D")
class ResizeBilinear(Op):
    """Bilinear resize of [N, H, W, C] to [N, new_h, new_w, C]: two matmuls by interpolation matrices."""

    name = "StaticResizeBilinear2D"

    def __init__(self, node: g.StaticResizeBilinear2D, ctx: Context) -> None:
        ctx.check_flags(node.flags, ALIGN_CORNERS | TENSORFLOW_LEGACY)
        if not 0 < node.new_height < 1 << 24 or not 0 < node.new_width < 1 << 24:
            raise ctx.fail(f"output size {node.new_height}x{node.new_width} is out of range")
        self.size, self.flags = (node.new_height, node.new_width), node.flags
        super().__init__([ctx.value(node.input_id).id], [ctx.value(node.output_id, "output").id])

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        x = shapes[0]
        if len(x) != 4 or not x[1] or not x[2]:
            raise fail(self, f"input shape {list(x)} is not a non-empty NHWC tensor")
        return [(x[0], *self.size, x[3])]

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        x, o = ins[0], outs[0]
        n, h, w, c = x.shape
        oh, ow = self.size
        rows = interpolation(h, oh, self.flags)
        cols = interpolation(w, ow, self.flags)
        tmp = scratch((n, oh, w * c))
        src = reshaped(x, (n, h, w * c))
        tmp3, out3 = reshaped(tmp, (n * oh, w, c)), reshaped(o, (n * oh, ow, c))
        by_rows, by_cols = bound_product(np.matmul, rows, src, tmp), bound_product(np.matmul, cols, tmp3, out3)

        def resize() -> None:
            by_rows()
            by_cols()

        return resize


def interpolation(size: int, out: int, flags: int) -> np.ndarray:
    """[out, size]: the weights of the two input pixels each output pixel blends, as XNNPACK computes them."""
    f = np.float32
    adjust = 1 if flags & ALIGN_CORNERS and out != 1 else 0
    scale = f(size - adjust) / f(out - adjust)
    pos = np.arange(out, dtype=f) * scale
    if not flags & (ALIGN_CORNERS | TENSORFLOW_LEGACY):
        pos = np.clip(pos + (f(0.5) * scale - f(0.5)), f(0), f(size - 1))
    low = pos.astype(np.int64)
    high = np.minimum(low + 1, size - 1)
    alpha = pos - low.astype(f)
    matrix = np.zeros((out, size), f)
    np.add.at(matrix, (np.arange(out), low), f(1) - alpha)
    np.add.at(matrix, (np.arange(out), high), alpha)
    return matrix
