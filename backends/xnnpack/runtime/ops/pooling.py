"""Poolings on NHWC tensors: average (padding not counted), max, global average, argmax.

AvgPooling2d and MaxPooling2d fold one strided view of the padded input per window tap
into the output (a running sum or maximum); the average then multiplies by the reciprocal
of each output pixel's count of real (unpadded) input pixels, computed once per shape.
GlobalAvgPooling2d averages over H and W ([N, 1, 1, C] with XNN_FLAG_KEEP_DIMS, else [N, C]).
ArgMaxPooling2d's windows tile the input (stride = window): it gives each window's maximum
and the position of the first maximum inside the window (row-major), as int32.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.graph import XNNDatatype as DT
from etbuild.backends.xnnpack.format.nodes import KEEP_DIMS
from etbuild.backends.xnnpack.runtime.grids import Grid
from etbuild.backends.xnnpack.runtime.ops.base import Context, Op, Shape, builds, fail, reshaped, scratch
from etbuild.backends.xnnpack.runtime.ops.requant import Requantization
from etbuild.backends.xnnpack.runtime.ops.window import Window, pad_buffer, taps
from etbuild.runtime.steps import Step


def _nhwc(op: Op, x: Shape) -> Shape:
    if len(x) != 4:
        raise fail(op, f"input shape {list(x)} is not 4-D (NHWC)")
    return x


@builds("AvgPooling2d", "MaxPooling2d")
class Pooling(Op):
    """Avg or max pooling with a sliding window."""

    def __init__(self, node: g.Pooling2d, ctx: Context) -> None:
        self.name = type(node).__name__
        ctx.check_flags(node.flags, KEEP_DIMS)
        self.max = self.name == "MaxPooling2d"
        dil = (node.dilation_height, node.dilation_width) if self.max else (1, 1)  # avg pooling has none
        self.win = Window(
            node.padding_top, node.padding_right, node.padding_bottom, node.padding_left, node.pooling_height,
            node.pooling_width, node.stride_height, node.stride_width, *dil,
        ).check(ctx.where)
        super().__init__([ctx.value(node.input_id).id], [ctx.value(node.output_id, "output").id])

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        n, h, w, c = _nhwc(self, shapes[0])
        oh, ow = self.win.out_size(h, w)
        if oh < 1 or ow < 1:
            raise fail(self, f"the {self.win.kh}x{self.win.kw} window does not fit the input {list(shapes[0])}")
        return [(n, oh, ow, c)]

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        x, o = ins[0], outs[0]
        fill = -np.inf if self.max else 0.0
        load = None
        if self.win.padded:
            src, interior = pad_buffer(x.shape, self.win, fill)
            load = (interior, x)
        else:
            src = x
        views = taps(src, self.win)
        fold = np.maximum if self.max else np.add
        scale = None if self.max else self._reciprocal_counts(x.shape[1:3])

        def pool() -> None:
            if load is not None:
                np.copyto(*load)
            if len(views) == 1:
                np.copyto(o, views[0])
            else:
                fold(views[0], views[1], out=o)
            for view in views[2:]:
                fold(o, view, out=o)
            if scale is not None:
                np.multiply(o, scale, out=o)

        return pool

    def _reciprocal_counts(self, in_hw: Sequence[int]) -> np.ndarray:
        """[1, OH, OW, 1]: 1 / the number of real input pixels under each window."""
        ones = np.ones((1, *in_hw, 1), np.float32)
        if self.win.padded:
            buf, interior = pad_buffer(ones.shape, self.win, 0.0)
            interior[...] = ones
            ones = buf
        count = sum(taps(ones, self.win))
        return (1.0 / np.maximum(count, 1.0)).astype(np.float32)



@builds("GlobalAvgPooling2d")
class GlobalAvgPooling2d(Op):
    """The mean over H and W. Between int8 grids it is computed as XNNPACK does, in integers: the
    exact sum of the input's steps, times in_scale / (out_scale · H·W) in float32, rounded half to
    even (ops/requant.py's epilogue). Summing the float values instead would move exact ties (equal
    scales, H·W a power of two: a sum ending in .5 steps) off their tie, and round them the other way."""

    name = "GlobalAvgPooling2d"

    def __init__(self, node: g.UnaryNode, ctx: Context) -> None:
        ctx.check_flags(node.flags, KEEP_DIMS)
        self.keep = bool(node.flags & KEEP_DIMS)
        x, out = ctx.value(node.input_id), ctx.value(node.output_id, "output")
        int8 = {x.grid.datatype, out.grid.datatype} <= {DT.QINT8, DT.QUINT8}
        self.grids = (x.grid, out.grid) if int8 else None
        super().__init__([x.id], [out.id])

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        n, _, _, c = _nhwc(self, shapes[0])
        return [(n, 1, 1, c) if self.keep else (n, c)]

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        n, h, w, c = ins[0].shape
        x = reshaped(ins[0], (n, h * w, c))
        o = reshaped(outs[0], (n, c))
        if self.grids is not None and h * w:
            return _integer_mean(x, o, *self.grids)
        scale = np.float32(1.0 / (h * w)) if h * w else np.float32(np.nan)

        def gap() -> None:
            np.add.reduce(x, axis=1, out=o)
            np.multiply(o, scale, out=o)

        return gap


def _integer_mean(x: np.ndarray, o: np.ndarray, grid_in: Grid, grid_out: Grid) -> Step:
    """o = the int8 mean over axis 1 of x, both held as multiples of their grid's scale: the sum of the
    input's codes (exact in float32 below 2^24: up to 65,793 values of 255) requantized by one factor."""
    factor = np.float32(grid_in.scale) / (np.float32(grid_out.scale) * np.float32(x.shape[1]))
    requant = Requantization(np.float32(1.0 / np.float32(grid_in.scale)), None, np.float32(factor),
                             np.float32(grid_out.scale))
    codes = scratch(x.shape)
    return requant.around(functools.partial(np.add.reduce, codes, axis=1, out=o), x, codes, o)


@builds("ArgMaxPooling2d")
class ArgMaxPooling2d(Op):
    name = "ArgMaxPooling2d"

    def __init__(self, node: g.ArgMaxPooling2d, ctx: Context) -> None:
        ctx.check_flags(node.flags)
        ph, pw = node.pooling_height, node.pooling_width
        self.win = Window(node.padding_top, node.padding_right, node.padding_bottom, node.padding_left,
                          ph, pw, ph, pw).check(ctx.where)
        outs = [ctx.value(node.output_value_id, "output").id, ctx.value(node.output_index_id, "output").id]
        super().__init__([ctx.value(node.input_id).id], outs)

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        n, h, w, c = _nhwc(self, shapes[0])
        oh, ow = self.win.out_size(h, w)
        if oh < 1 or ow < 1:
            raise fail(self, f"the pooling window does not fit the input {list(shapes[0])}")
        return [(n, oh, ow, c)] * 2

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        x, values, index = ins[0], outs[0], outs[1]
        n, oh, ow, c = values.shape
        win = self.win
        src, interior = pad_buffer(x.shape, win, -np.inf)
        tiles = src[:, : oh * win.kh, : ow * win.kw].reshape(n, oh, win.kh, ow, win.kw, c)
        grid = scratch((n, oh, ow, win.kh, win.kw, c))
        flat = reshaped(grid, (n, oh, ow, win.kh * win.kw, c))

        def argmax() -> None:
            np.copyto(interior, x)
            np.copyto(grid, tiles.transpose(0, 1, 3, 2, 4, 5))
            np.copyto(index, flat.argmax(axis=3), casting="unsafe")
            np.max(flat, axis=3, out=values)

        return argmax
