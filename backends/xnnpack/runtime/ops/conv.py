"""Conv2d, DepthwiseConv2d and ConvTranspose2d on NHWC tensors, filters packed at init.

- Conv2d (filter [G·Cout_g, KH, KW, Cin_g]): a 1×1 stride-1 unpadded kernel is one matmul of
  the input rows; otherwise the windows of the padded input are gathered into an im2col
  buffer [N·OH·OW, KH·KW·Cin] in one strided copy and multiplied by the filter packed as
  [KH·KW·Cin, Cout] (per group: a batched matmul).
- DepthwiseConv2d (filter [1, KH, KW, C·M], M outputs per input channel): a multiply-add of
  one strided view of the padded input per kernel tap.
- ConvTranspose2d (filter [G·Cout_g, KH, KW, Cin_g]): each input pixel times the filter
  (one matmul into [N·H·W, KH·KW·Cout] columns), scattered into the output by one strided
  add per tap, then cropped by the padding.
Filters and biases must be constants (as XNNPACK requires); quantized ones arrive dequantized, and
between int8 grids Conv2d and DepthwiseConv2d run the same kernels on integer codes (ops/requant.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from types import ModuleType

import numpy as np
from numpy.lib.stride_tricks import as_strided

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.graph import XNNDatatype as DT
from etbuild.backends.xnnpack.runtime import loops as compiled_loops
from etbuild.backends.xnnpack.runtime.grids import Grid
from etbuild.backends.xnnpack.runtime.ops.base import Context, Op, Shape, builds, fail, flat2d, reshaped, scratch
from etbuild.backends.xnnpack.runtime.ops.pixel import pixel_step, pixel_tiles
from etbuild.backends.xnnpack.runtime.ops.requant import Requantization, integer_form
from etbuild.backends.xnnpack.runtime.ops.window import Window, pad_buffer
from etbuild.backends.xnnpack.runtime.values import Value
from etbuild.kernels.numerics.blas import bound_product
from etbuild.kernels.numerics.im2col import row_view
from etbuild.kernels.numerics.ufuncs import bias_rows, matmul_add
from etbuild.runtime.steps import Step


def _window(node: g.Convolution, ctx: Context) -> Window:
    return Window(
        node.padding_top, node.padding_right, node.padding_bottom, node.padding_left, node.kernel_height,
        node.kernel_width, node.subsampling_height, node.subsampling_width, node.dilation_height, node.dilation_width,
    ).check(ctx.where)


def _constants(
    node: g.Convolution, ctx: Context, filter_dims: tuple[int, ...], cout: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """The constant filter (checked against filter_dims) and bias [cout] (None when absent)."""
    w = ctx.value(node.filter_id, "filter")
    b = ctx.optional(node.bias_id, "bias")
    if not w.is_constant or (b is not None and not b.is_constant):
        raise ctx.fail("filter and bias must be constants")
    if w.dims != filter_dims:
        raise ctx.fail(f"filter dims {list(w.dims)}, expected {list(filter_dims)} from the node's parameters")
    if b is not None and b.dims != (cout,):
        raise ctx.fail(f"bias dims {list(b.dims)} do not match the output channels")
    return w.constant, None if b is None else np.ascontiguousarray(b.constant, dtype=np.float32)


def _integer(node: g.Convolution, ctx: Context, cout: int, axis: int) -> tuple[np.ndarray, Requantization] | None:
    """The filter's integer codes and the requantization when the node runs between int8 grids (see requant);
    `axis`: the filter's output-channel dim."""
    return integer_form(ctx.value(node.input1_id), ctx.value(node.filter_id, "filter"),
                        ctx.optional(node.bias_id, "bias"), ctx.value(node.output_id, "output"), cout, axis)


class _Conv(Op):
    """Common parts: input/output ids, window, channel counts; `requant` set when the node computes
    in integers as XNNPACK does (int8 grids: etbuild.backends.xnnpack.runtime.ops.requant)."""

    requant: Requantization | None = None

    def __init__(self, node: g.Convolution, ctx: Context, cin: int, cout: int) -> None:
        self.name = type(node).__name__
        ctx.check_flags(node.flags)
        x: Value = ctx.value(node.input1_id)
        super().__init__([x.id], [ctx.value(node.output_id, "output").id])
        self.win, self.cin, self.cout = _window(node, ctx), cin, cout
        if min(cin, cout) < 1:
            raise ctx.fail(f"{cin} input and {cout} output channels")

    def _input(self, x: Shape) -> tuple[int, int, int]:
        if len(x) != 4 or x[3] != self.cin:
            raise fail(self, f"input shape {list(x)} is not NHWC with {self.cin} channels")
        return x[0], x[1], x[2]

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        n, h, w = self._input(shapes[0])
        oh, ow = self.win.out_size(h, w)
        if oh < 1 or ow < 1:
            raise fail(self, f"the {self.win.kh}x{self.win.kw} window does not fit the input {list(shapes[0])}")
        return [(n, oh, ow, self.cout)]


@builds("Conv2d")
class Conv2d(_Conv):
    def __init__(self, node: g.Convolution, ctx: Context) -> None:
        groups, gin, gout = node.groups, node.group_input_channels, node.group_output_channels
        super().__init__(node, ctx, groups * gin, groups * gout)
        w, self.bias = _constants(node, ctx, (groups * gout, node.kernel_height, node.kernel_width, gin), self.cout)
        integer = _integer(node, ctx, self.cout, 0)
        if integer is not None:
            (w, self.requant), self.bias = integer, None
        k = node.kernel_height * node.kernel_width * gin
        # [G, KH·KW·Cin_g, Cout_g]: the im2col rows of one group times this give its outputs
        self.packed = np.ascontiguousarray(w.reshape(groups, gout, k).transpose(0, 2, 1), dtype=np.float32)
        self.groups = groups
        self.tiles = pixel_tiles(self.packed, self.win, self.requant is not None, ctx.value(node.input1_id))

    clamp: tuple[float, float] = (-math.inf, math.inf)

    def fuse_clamp(self, lo: float, hi: float) -> bool:
        self.clamp = (lo, hi)
        return True

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        if self.requant is not None:
            codes = scratch(ins[0].shape)
            return self.requant.around(self._bind(codes, outs[0])[0], ins[0], codes, outs[0])
        step, clamped = self._bind(ins[0], outs[0])
        clamp = None if clamped else Grid(DT.FP32).snapper(*self.clamp)
        if clamp is None:
            return step
        o = outs[0]

        def conv_clamped() -> None:
            step()
            clamp(o)

        return conv_clamped

    def _bind(self, x: np.ndarray, o: np.ndarray) -> tuple[Step, bool]:
        """The convolution's step, and whether it clamps its output itself."""
        win = self.win
        if self.groups == 1 and (win.kh, win.kw, win.sh, win.sw) == (1, 1, 1, 1) and not win.padded:
            return self._product(flat2d(x, self.cin), flat2d(o, self.cout))
        gather, cols = _im2col(x, win, o.shape[1], o.shape[2])
        if self.groups == 1:
            product, clamped = self._product(cols.reshape(-1, cols.shape[-1]), flat2d(o, self.cout))
        else:
            product, clamped = self._grouped(cols, o), False

        def conv() -> None:
            gather()
            product()

        return conv, clamped

    def _product(self, rows: np.ndarray, out: np.ndarray) -> tuple[Step, bool]:
        """out = rows @ filter (+ bias): with the compiled loops and a C-contiguous float32 out, the product
        (etbuild.kernels.numerics.blas) then one pass adding the bias and clamping (`compiled.bias_clamp_rows`:
        numpy's add and clip, the same bits, one pass instead of two and no Python clip call); else matmul_add (the
        clamp after it). The step, and whether it clamps."""
        loops = compiled_loops.compiled()
        if loops is None or out.dtype != np.float32 or not out.flags.c_contiguous:
            return matmul_add(np.matmul, rows, self.packed[0], self.bias, out, constant_bias=True), False
        _warm(loops)
        lo, hi = (np.float32(b) for b in self.clamp)
        if self.tiles is not None and rows.shape[0] == 1 and rows.flags.c_contiguous \
                and not np.may_share_memory(rows, out):
            return pixel_step(loops, self.tiles, rows[0], self.bias, out[0], self.clamp), True
        blocks = _column_blocks(*rows.shape, self.cout)
        if blocks > 1:
            return self._blocked(rows, out, blocks, loops), True
        product = bound_product(np.matmul, rows, self.packed[0], out)
        if self.bias is not None:
            epilogue = functools.partial(loops.bias_clamp_rows, out, self.bias, lo, hi)
        elif self.clamp != (-math.inf, math.inf):
            epilogue = functools.partial(loops.clamp, out.reshape(-1), lo, hi)
        else:
            return product, True

        def matmul_bias_clamp() -> None:
            product()
            epilogue()

        return matmul_bias_clamp, True

    def _blocked(self, rows: np.ndarray, out: np.ndarray, blocks: int, loops: ModuleType) -> Step:
        """out = clamp(rows @ filter + bias) with the filter split into `blocks` column blocks: one batched matmul
        into a [blocks, R, N/blocks] buffer, then one compiled pass adding the bias, clamping and placing the
        columns (`compiled.bias_clamp_blocks`)."""
        k, n = self.packed.shape[1:]
        packed = np.ascontiguousarray(self.packed[0].reshape(k, blocks, n // blocks).transpose(1, 0, 2))
        parts = scratch((blocks, rows.shape[0], n // blocks))
        bias = self.bias if self.bias is not None else np.zeros(n, np.float32)
        product = bound_product(np.matmul, rows, packed, parts)
        epilogue = functools.partial(loops.bias_clamp_blocks, parts, bias, *(np.float32(b) for b in self.clamp), out)

        def blocked_matmul() -> None:
            product()
            epilogue()

        return blocked_matmul

    def _grouped(self, cols: np.ndarray, o: np.ndarray) -> Step:
        """Per group: its im2col columns times its filter, into its slice of the output channels."""
        g_, k, gout = self.packed.shape
        gin = self.cin // g_
        rows = cols.shape[0] * cols.shape[1] * cols.shape[2]
        grouped = cols.reshape(rows, -1, g_, gin).transpose(2, 0, 1, 3)  # [G, P, KH·KW, Cin_g] (strided)
        buf = scratch((g_, rows, k))
        res = scratch((g_, rows, gout))
        out = reshaped(o, (rows, g_, gout)).transpose(1, 0, 2)
        bias = None if self.bias is None else self.bias.reshape(g_, 1, gout)
        product = bound_product(np.matmul, buf, self.packed, res)

        def step() -> None:
            np.copyto(reshaped(buf, (g_, rows, k // gin, gin)), grouped)
            product()
            if bias is not None:
                np.add(res, bias, out=res)
            np.copyto(out, res)

        return step


SERIAL_PRODUCT = 65536 * 4  # multiply-adds up to which OpenBLAS runs a product on one thread (its default)
FEW_ROWS = 64


def _column_blocks(rows: int, k: int, n: int) -> int:
    """How many column blocks to compute a product of few rows and many columns in (1: as one product).

    OpenBLAS runs a product of more than SERIAL_PRODUCT multiply-adds on its threads; with a handful of rows
    (MobileNet's last 1×1 convolution: [9, 160] @ [160, 1280]) that is slow at one thread (85 µs) and
    pathological at two when the other core is busy (15 ms: the threads wait for each other). In column
    blocks of at most SERIAL_PRODUCT multiply-adds it takes 44 µs at either thread count."""
    if rows >= FEW_ROWS or rows * k * n <= SERIAL_PRODUCT:
        return 1
    return next((b for b in range(2, n + 1) if n % b == 0 and rows * k * (n // b) <= SERIAL_PRODUCT), 1)


@functools.cache
def _warm(loops: ModuleType) -> None:
    """Compile the convolutions' loops once per process (or load them from numba's disk cache) when the first
    node binds them, so that the first call of the program does not pay it."""
    compiled_loops.warm_convolution(loops)


def _im2col(x: np.ndarray, win: Window, oh: int, ow: int) -> tuple[Step, np.ndarray]:
    """The step filling an [N, OH, OW, KH·KW·C] column buffer from x, and the buffer."""
    n, _, _, c = x.shape
    cols = scratch((n, oh, ow, win.kh * win.kw * c))
    cols6 = reshaped(cols, (n, oh, ow, win.kh, win.kw, c))
    if not win.padded:
        windows = row_view(x, *win.sliding())
        return lambda: np.copyto(cols6, windows), cols
    buf, interior = pad_buffer(x.shape, win, 0.0)
    windows = row_view(buf, *win.sliding())

    def gather() -> None:
        np.copyto(interior, x)
        np.copyto(cols6, windows)

    return gather, cols


DIRECT_CHANNELS, DIRECT_PIXELS = 64, 64  # DepthwiseConv2d.direct: at least this many channels, strided or small


@builds("DepthwiseConv2d")
class DepthwiseConv2d(_Conv):
    """Σ over taps of a shifted view of the input times that tap's per-channel weights.

    The padded input is split into stride phases (one contiguous [N·Hq, Wq·C] grid per phase;
    with stride 1 the padded input itself). The taps that read one phase form a regular grid
    of whole-pixel shifts, so a phase's contribution is one `einsum` over a strided view
    [taps_y, taps_x, N·Hq, Wq·C] (no copies) with the per-channel weights tiled along a grid
    row; numpy then runs long contiguous inner loops without temporaries. The accumulator
    covers the whole grid and the output is its top-left OH×OW corner. With a depth
    multiplier M, each input channel is repeated M times as it is loaded. Many channels on a
    strided or small grid take `direct` instead (no ring, no phases; a short inner loop).
    """

    def __init__(self, node: g.Convolution, ctx: Context) -> None:
        gin, gout = node.group_input_channels, node.group_output_channels
        if gin < 1 or gout % gin:
            raise ctx.fail(f"group output channels {gout} are not a multiple of group input channels {gin}")
        self.mult = gout // gin
        super().__init__(node, ctx, node.groups, node.groups * self.mult)
        w, self.bias = _constants(node, ctx, (1, node.kernel_height, node.kernel_width, self.cout), self.cout)
        integer = _integer(node, ctx, self.cout, 3)
        if integer is not None:
            (w, self.requant), self.bias = integer, None
        self.weights = np.ascontiguousarray(w.reshape(node.kernel_height, node.kernel_width, self.cout),
                                            dtype=np.float32)

    def _phase_taps(self, wq: int) -> list[tuple[int, int, tuple[int, int, int, int], np.ndarray]]:
        """Per stride phase that taps read: (phase, first shift, (taps_y, taps_x, step_y, step_x), tiled weights)."""
        win, cc = self.win, self.cout
        found = []
        for a in range(win.sh):
            rows = [i for i in range(win.kh) if i * win.dh % win.sh == a]
            for b in range(win.sw):
                cols = [j for j in range(win.kw) if j * win.dw % win.sw == b]
                if not rows or not cols:
                    continue
                qi, qj = [i * win.dh // win.sh for i in rows], [j * win.dw // win.sw for j in cols]
                steps = (qi[1] - qi[0] if len(qi) > 1 else 0, qj[1] - qj[0] if len(qj) > 1 else 0)
                weights = np.tile(self.weights[np.ix_(rows, cols)], (1, 1, wq))  # [taps_y, taps_x, Wq·C]
                found.append((a * win.sw + b, (qi[0] * wq + qj[0]) * cc, (len(rows), len(cols), *steps), weights))
        return found

    clamp: tuple[float, float] = (-math.inf, math.inf)

    def fuse_clamp(self, lo: float, hi: float) -> bool:
        self.clamp = (lo, hi)
        return True

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        if self.requant is not None:
            codes = scratch(ins[0].shape)
            return self.requant.around(self._bind(codes, outs[0]), ins[0], codes, outs[0])
        return self._bind(ins[0], outs[0])

    def _bind(self, x: np.ndarray, o: np.ndarray) -> Step:
        loops = compiled_loops.compiled()
        if loops is not None and all(a.dtype == np.float32 and a.flags.c_contiguous for a in (x, o)):
            return self.fused(x, o, loops)
        step = self.numpy_form(x, o)
        clamp = Grid(DT.FP32).snapper(*self.clamp)
        if clamp is None:
            return step

        def depthwise_clamped() -> None:
            step()
            clamp(o)

        return depthwise_clamped

    def numpy_form(self, x: np.ndarray, o: np.ndarray) -> Step:
        """Without the compiled loop: `direct` for many channels on a strided or small grid, else `phased`."""
        strided = self.win.sh > 1 or self.win.sw > 1
        if self.cout >= DIRECT_CHANNELS and (strided or o.shape[1] * o.shape[2] <= DIRECT_PIXELS):
            return self.direct(x, o)
        return self.phased(x, o)

    def fused(self, x: np.ndarray, o: np.ndarray, loops: ModuleType) -> Step:
        """The compiled loop (`compiled.depthwise_nhwc`): bias, taps and clamp in one pass per output row,
        the filter and bias tiled along an output row at bind and the loop compiled (or loaded) here, not on
        the first call. The sums run in another order than the numpy forms' (within float32 rounding)."""
        win, ow = self.win, o.shape[2]
        taps = np.ascontiguousarray(np.tile(self.weights, (1, 1, ow)))
        bias = np.tile(self.bias if self.bias is not None else np.zeros(self.cout, np.float32), ow)
        lo, hi = (np.float32(b) for b in self.clamp)
        _warm(loops)
        return functools.partial(loops.depthwise_nhwc, x, taps, bias, o, (win.sh, win.sw), (win.dh, win.dw),
                                 (win.top, win.left), self.mult, lo, hi)

    def direct(self, x: np.ndarray, o: np.ndarray) -> Step:
        """One einsum over the [KH, KW, N, OH, OW, C·M] window view of the zero-padded input, straight into o.

        Its inner loop is one pixel's channels, not a grid row, but it computes no padding ring and copies
        no stride phases: the faster form for many channels on small or strided grids (MobileNet's
        6×6×192 taps: 27 → 21 µs; a stride-2 24×24×96 one: 81 → 55 µs).
        """
        n, h, w, c = x.shape
        win = self.win
        padded = scratch((n, h + win.top + win.bottom, w + win.left + win.right, c, self.mult), 0.0)
        interior = padded[:, win.top : win.top + h, win.left : win.left + w]
        s = padded.strides
        view = as_strided(padded, (win.kh, win.kw, n, o.shape[1], o.shape[2], self.cout),
                          (s[1] * win.dh, s[2] * win.dw, s[0], s[1] * win.sh, s[2] * win.sw, s[4]), writeable=False)
        src, weights = x[..., None], self.weights
        rows, bias = bias_rows(self.bias, o) if self.bias is not None else (o, None)

        def depthwise() -> None:
            np.copyto(interior, src)
            np.einsum("ijnhwc,ijc->nhwc", view, weights, out=o)
            if bias is not None:
                np.add(rows, bias, rows)

        return depthwise

    def phased(self, x: np.ndarray, o: np.ndarray) -> Step:
        """Per stride phase, one einsum over shifted views of its contiguous grid rows (the class's form)."""
        n, h, w, _ = x.shape
        win, cc = self.win, self.cout
        hq, wq = -(-(h + win.top + win.bottom) // win.sh), -(-(w + win.left + win.right) // win.sw)
        row = wq * cc
        phase_taps = self._phase_taps(wq)
        size = n * hq * row
        reach = max(shift + ((ty - 1) * sy * wq + (tx - 1) * sx) * cc for _, shift, (ty, tx, sy, sx), _ in phase_taps)
        phases = scratch((win.sh * win.sw, size + reach), 0.0)
        load = self._loader(x, phases, hq, wq, {p for p, *_ in phase_taps})
        item = phases.itemsize
        terms = [(as_strided(phases[p, shift:], (ty, tx, n * hq, row), (sy * row * item, sx * cc * item, row * item,
                                                                        item), writeable=False), weights)
                 for p, shift, (ty, tx, sy, sx), weights in phase_taps]
        acc, tmp = scratch((n * hq, row)), scratch((n * hq, row))
        corner = acc.reshape(n, hq, wq, cc)[:, : o.shape[1], : o.shape[2], :]
        bias = self.bias

        def depthwise() -> None:
            load()
            np.einsum("ijre,ije->re", *terms[0], out=acc)
            for view, weights in terms[1:]:
                np.einsum("ijre,ije->re", view, weights, out=tmp)
                np.add(acc, tmp, out=acc)
            if bias is None:
                np.copyto(o, corner)
            else:
                np.add(corner, bias, out=o)

        return depthwise

    def _loader(self, x: np.ndarray, phases: np.ndarray, hq: int, wq: int, used: set[int]) -> Step:
        """The step copying x into the zero-padded phase grids that taps read (channels repeated M times)."""
        n, h, w, c = x.shape
        win = self.win
        grid = n * hq * wq * self.cout
        if win.sh == win.sw == 1:
            padded = phases[0, :grid].reshape(n, hq, wq, c, self.mult)
        else:
            padded = scratch((n, hq * win.sh, wq * win.sw, c, self.mult), 0.0)
        interior = padded[:, win.top : win.top + h, win.left : win.left + w]
        src = x[..., None]
        if win.sh == win.sw == 1:
            return lambda: np.copyto(interior, src)
        copies = [(phases[a * win.sw + b, :grid].reshape(n, hq, wq, c, self.mult), padded[:, a :: win.sh, b :: win.sw])
                  for a in range(win.sh) for b in range(win.sw) if a * win.sw + b in used]

        def load() -> None:
            np.copyto(interior, src)
            for dest, phase in copies:
                np.copyto(dest, phase)

        return load


@builds("ConvTranspose2d")
class ConvTranspose2d(_Conv):
    def __init__(self, node: g.Convolution, ctx: Context) -> None:
        groups, gin, gout = node.groups, node.group_input_channels, node.group_output_channels
        super().__init__(node, ctx, groups * gin, groups * gout)
        kh, kw = node.kernel_height, node.kernel_width
        w, self.bias = _constants(node, ctx, (groups * gout, kh, kw, gin), self.cout)
        self.adjust = (node.adjustment_height, node.adjustment_width)
        if self.adjust[0] >= self.win.sh or self.adjust[1] >= self.win.sw:
            raise ctx.fail(f"adjustment {list(self.adjust)} must be below the stride")
        # [G, Cin_g, KH·KW·Cout_g]: one input pixel of a group times this gives all its taps
        self.packed = np.ascontiguousarray(
            w.reshape(groups, gout, kh * kw, gin).transpose(0, 3, 2, 1).reshape(groups, gin, kh * kw * gout),
            dtype=np.float32,
        )
        self.groups = groups

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        n, h, w = self._input(shapes[0])
        win = self.win
        eh, ew = win.span
        oh = win.sh * (h - 1) + self.adjust[0] + eh - win.top - win.bottom
        ow = win.sw * (w - 1) + self.adjust[1] + ew - win.left - win.right
        if oh < 1 or ow < 1:
            raise fail(self, f"the padding crops the whole output of input {list(shapes[0])}")
        return [(n, oh, ow, self.cout)]

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        x, o = ins[0], outs[0]
        n, h, w, _ = x.shape
        win, g_ = self.win, self.groups
        gin, gout = self.cin // g_, self.cout // g_
        eh, ew = win.span
        fh = max(win.sh * (h - 1) + eh, win.top + o.shape[1])
        fw = max(win.sw * (w - 1) + ew, win.left + o.shape[2])
        full = scratch((n, fh, fw, g_, gout))
        xg = reshaped(x, (n * h * w, g_, gin)).transpose(1, 0, 2)  # [G, P, Cin_g]
        cols = scratch((g_, n * h * w, win.kh * win.kw * gout))
        cols7 = reshaped(cols, (g_, n, h, w, win.kh, win.kw, gout)).transpose(1, 2, 3, 4, 5, 0, 6)
        scatter = [
            (full[:, i * win.dh : i * win.dh + win.sh * (h - 1) + 1 : win.sh,
                  j * win.dw : j * win.dw + win.sw * (w - 1) + 1 : win.sw], cols7[:, :, :, i, j])
            for i in range(win.kh) for j in range(win.kw)
        ]
        crop = full[:, win.top : win.top + o.shape[1], win.left : win.left + o.shape[2]]
        out = reshaped(o, (n, o.shape[1], o.shape[2], g_, gout))
        bias = None if self.bias is None else self.bias.reshape(g_, gout)
        product = bound_product(np.matmul, xg, self.packed, cols)

        def deconv() -> None:
            product()
            full.fill(0.0)
            for dest, part in scatter:
                np.add(dest, part, out=dest)
            if bias is None:
                np.copyto(out, crop)
            else:
                np.add(crop, bias, out=out)

        return deconv
