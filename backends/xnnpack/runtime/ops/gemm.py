"""FullyConnected and BatchMatrixMultiply: one float32 matmul each, weights packed at init.

FullyConnected: input [..., K], filter [N, K] ([K, N] with XNN_FLAG_TRANSPOSE_WEIGHTS),
optional bias [N]; output [..., N] (with XNN_FLAG_TENSORFLOW_RESHAPE_2D the input is first
flattened to rows of K). A constant filter, dequantized when it is quantized (per channel
or per block), is packed once as a contiguous [K, N] matrix so each call is one matmul of
the input rows into the output rows plus the bias. A filter or bias computed at run time
(ExecuTorch lowers `mm` of two activations this way) is read live. With numba's loops (etbuild.kernels.native),
a qdint8 input through an int4 block filter (qbint4) takes XNNPACK's own integer product on the input's codes and
the weights packed two to a byte, with its bits, at any number of rows (qd8.py; one row of 512 × 1536 in 38 µs,
BLAS on the float32 matrix 112, benchmarks/matvec_forms.py at load 3): the op then holds only that packed form,
and the float32 filter (8× the int4 bytes) is made only for a binding whose input carries no codes. A one-row call
through another int8 or int4 filter reads the float input times the int8 codes.
A delegate whose calls all take static shapes (`runtime.delegates.fixed_shapes`) and more than one input row
holds a float filter only in the layout its BLAS multiplies faster (kernels/numerics/filter_layout.py: [K, N] or
[N, K], measured once a shape; the same bits). In a program whose input is one row (a decode step), a float
filter is packed at init as tiles of 128 outputs (compiled.tiled_matvec): XNNPACK's sequence of FMAs, its bits,
at the speed memory delivers the filter (one thread: a one-row product is bound by memory, and a second core adds
no bandwidth; docs/runtime-speed.md).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from etbuild.backends.xnnpack.format import graph as g
from etbuild.backends.xnnpack.format.graph import XNNDatatype as DT
from etbuild.backends.xnnpack.format.nodes import RESHAPE_2D, TRANSPOSE_WEIGHTS
from etbuild.backends.xnnpack.runtime import loops, qd8
from etbuild.backends.xnnpack.runtime.grids import RowCodes
from etbuild.backends.xnnpack.runtime.ops.base import (
    Context,
    Op,
    Shape,
    broadcast,
    builds,
    fail,
    flat2d,
    reshaped,
    scratch,
)
from etbuild.backends.xnnpack.runtime.ops.requant import Requantization, integer_form
from etbuild.backends.xnnpack.runtime.values import Value
from etbuild.kernels.numerics.blas import bound_product
from etbuild.kernels.numerics.filter_layout import kn_faster
from etbuild.kernels.numerics.ufuncs import matmul_add
from etbuild.runtime import threads
from etbuild.runtime.delegates import fixed_shapes
from etbuild.runtime.hugepages import place
from etbuild.runtime.steps import Step

FEW_OUTPUTS = 64  # a float filter of up to this many outputs keeps [K, N]: one row takes XNNPACK's FMA loop on it


@builds("FullyConnected")
class FullyConnected(Op):
    name = "FullyConnected"

    def __init__(self, node: g.FullyConnected, ctx: Context) -> None:
        ctx.check_flags(node.flags, TRANSPOSE_WEIGHTS | RESHAPE_2D)
        x, w = ctx.value(node.input1_id), ctx.value(node.filter_id, "filter")
        b = ctx.optional(node.bias_id, "bias")
        if len(w.dims) != 2:
            raise ctx.fail(f"filter dims {list(w.dims)} are not 2-D")
        self.transposed = bool(node.flags & TRANSPOSE_WEIGHTS)
        self.k, self.n = w.dims[::-1] if not self.transposed else w.dims
        if b is not None and b.dims != (self.n,):
            raise ctx.fail(f"bias dims {list(b.dims)} do not match {self.n} output channels")
        self.flatten = bool(node.flags & RESHAPE_2D)
        self.bias = None if b is None or not b.is_constant else np.ascontiguousarray(b.constant, dtype=np.float32)
        out = ctx.value(node.output_id, "output")
        integer = integer_form(x, w, b, out, self.n, 1 if self.transposed else 0) \
            if w.is_constant and (b is None or b.is_constant) else None
        self.requant: Requantization | None = None
        self.packed: np.ndarray | None = None
        along_rows = w.weight is not None and not self.transposed and integer is None  # int codes and scales
        self.int4 = qd8.int4_filter(w.weight, tiled=True) if along_rows and w.datatype == DT.QBINT4 \
            and x.grid.datatype == DT.QDINT8 and loops.compiled() is not None else None  # type: ignore[arg-type]
        self.weight = w if self.int4 is not None else None  # its float form is made only if a binding needs it
        self.rows = w.rows if along_rows and self.int4 is None else None
        self.codes: RowCodes | None = None
        if integer is not None:  # int8 in and out: integer sums, XNNPACK's requantization (ops/requant.py)
            codes, self.requant = integer
            self.packed = place(np.ascontiguousarray(codes if self.transposed else codes.T))
            self.bias, self.rows = None, None
        elif self.int4 is not None:  # qd8 × int4 on the input's codes, any number of rows (_int4_rows)
            self.codes_input, self.codes_length = x.id, self.k
        elif w.is_constant:
            self.packed = _float_filter(w, self.transposed)
        self.tiles = self.by_output = None  # the filter's forms for one row (see _one_row)
        fused = loops.compiled()
        float_filter = self.packed is not None and self.requant is None and self.rows is None
        input_rows = int(np.prod(x.dims)) // max(self.k, 1) if self.flatten or not x.dims \
            else int(np.prod(x.dims[:-1]))
        if float_filter and input_rows > 1 and fixed_shapes():  # never one row: the layout BLAS reads faster, alone
            self._hold_for_blas(input_rows, default_kn=fused is None or self.n <= FEW_OUTPUTS)
        elif fused is not None and float_filter and (b is None or b.is_constant):
            if int(np.prod(x.dims)) == self.k:  # the program's input is one row: XNNPACK's bits, as fast
                self.tiles, self.packed = place(fused.pack_tiles(self.packed)), None
            elif self.n > FEW_OUTPUTS:  # one row or many: [N, K], and its transpose for BLAS (the same memory)
                self.by_output = place(np.ascontiguousarray(self.packed.T))
                self.packed = self.by_output.T
        runtime = [v.id for v in (w, b) if v is not None and not v.is_constant]
        super().__init__([x.id, *runtime], [ctx.value(node.output_id, "output").id])
        self.live_filter, self.live_bias = not w.is_constant, b is not None and not b.is_constant

    def _hold_for_blas(self, rows: int, default_kn: bool) -> None:
        """Hold the packed [K, N] filter only in the layout BLAS multiplies `rows` rows by faster (measured once a
        shape: kernels/numerics/filter_layout.py), in the arena of huge pages."""
        assert self.packed is not None
        if kn_faster(rows, self.k, self.n, default=default_kn):
            self.packed = place(self.packed)
        else:
            self.packed = place(np.ascontiguousarray(self.packed.T)).T

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        x = shapes[0]
        if not x or x[-1] != self.k:
            raise fail(self, f"input shape {list(x)} does not end in the filter's {self.k} input channels")
        rows = x[:-1] if not self.flatten else (int(np.prod(x)) // self.k,)
        return [(*rows, self.n)]

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        o = flat2d(outs[0], self.n)
        x = flat2d(ins[0], self.k) if self.k else reshaped(ins[0], (o.shape[0], 0))  # no inputs: rows from out
        live = list(ins[1:])
        if self.int4 is not None:
            rows = self._int4_rows(x, o)
            if rows is not None:
                return rows
            if self.packed is None:  # codes this binding cannot read: the float product, its filter made once
                self.packed = _float_filter(self.weight, self.transposed)  # type: ignore[arg-type]
        w = self.packed if not self.live_filter else _filter_view(live.pop(0), self.transposed)
        if w is None and self.tiles is not None:  # tiles the compiled loop cannot take here: [K, N] again
            w = self.tiles.transpose(1, 0, 2).reshape(self.k, self.tiles.shape[0] * self.tiles.shape[2])[:, :self.n]
        bias = self.bias if not self.live_bias else live.pop(0)
        if self.requant is not None:
            codes = scratch(x.shape)
            product = matmul_add(np.matmul, codes, w, None, o, constant_bias=True)
            return self.requant.around(product, x, codes, o)
        one_row = self._one_row(x, o)
        if one_row is not None:
            return one_row
        # np.dot takes 2-D operands straight to BLAS, a third cheaper than np.matmul on one row;
        # it needs a C-contiguous out.
        return matmul_add(np.dot if o.flags.c_contiguous else np.matmul, x, w, bias, o,
                          constant_bias=not self.live_bias)

    @property
    def plain_filter(self) -> bool:
        """Whether bind computes a float product through the packed constant filter and adds a constant bias (or
        none): not the integer form, nor a filter or bias read at run time."""
        return self.requant is None and not self.live_filter and not self.live_bias

    def plain_product(self, ins: Sequence[np.ndarray], out: np.ndarray) -> tuple[Step, np.ndarray | None] | None:
        """The bias-free product step into out and the constant bias, as bind's float form computes them (the same
        bits), for an op with a plain filter and more than one input row into a C-contiguous out; else None."""
        x, o = flat2d(ins[0], self.k), flat2d(out, self.n)
        if not self.plain_filter or self.packed is None or x.shape[0] < 2 or not o.flags.c_contiguous \
                or out.dtype != np.float32:
            return None
        return bound_product(np.dot, x, self.packed, o), self.bias

    def take_codes(self, codes: RowCodes) -> None:
        self.codes = codes

    def _one_row(self, x: np.ndarray, o: np.ndarray) -> Step | None:
        """A compiled loop per input row when numba's loops are on: through a float filter kept as tiles, XNNPACK's
        sequence of FMAs at the speed memory delivers the filter (its bits; BLAS sums in another order); for one
        row through a float filter of few outputs the same FMAs on [K, N]; through one kept as [N, K], dot products
        streamed from memory (reassociated sums); through a quantized filter, XNNPACK's qd8 × int4 product when the
        input's rounding keeps its codes (qd8.py), else float × int8 codes."""
        few = self.packed is not None and self.rows is None and self.requant is None and self.n <= FEW_OUTPUTS
        forms = self.rows is not None or self.tiles is not None or self.by_output is not None or few
        fused = loops.compiled() if forms and not self.live_bias and not self.live_filter else None
        if fused is None or not (x.flags.c_contiguous and o.flags.c_contiguous):
            return None
        if x.dtype != np.float32 or np.may_share_memory(x, o):  # the loop writes out before it has read x
            return None
        bias = self.bias if self.bias is not None else np.zeros(self.n, np.float32)
        if self.tiles is not None:
            rows = [functools.partial(fused.tiled_matvec, self.tiles, x[r], bias, o[r]) for r in range(x.shape[0])]
            return rows[0] if len(rows) == 1 else _each(rows)
        if x.shape[0] != 1:
            return None
        if self.by_output is not None:
            return functools.partial(fused.row_dots, self.by_output, x[0], bias, o[0])
        if few:
            return functools.partial(fused.fma_matvec, self.packed, x[0], bias, o[0])
        acc = np.empty(self.n, np.float32)
        return functools.partial(fused.grouped_matvec, self.rows.codes, self.rows.scales, x[0], bias, acc, o[0])

    def _int4_rows(self, x: np.ndarray, o: np.ndarray) -> Step | None:
        """XNNPACK's qd8 × int4 product of every input row, on the codes the input's rounding keeps (qd8.py): on
        AVX512-VNNI the tiled loop, each pass of weights serving every row; elsewhere the portable loop row by row.
        None when the codes are not there (a binding whose input was not rounded by a node of this graph) or an
        array is not contiguous float32."""
        fused = loops.compiled()
        if self.codes is None or fused is None or self.live_bias or not (x.flags.c_contiguous and o.flags.c_contiguous):
            return None
        if x.dtype != np.float32 or o.dtype != np.float32:
            return None
        w, m, source = self.int4, x.shape[0], self.codes
        assert w is not None
        bias = self.bias if self.bias is not None else np.zeros(self.n, np.float32)
        if m == 0:
            return lambda: None
        count = threads.current().thread_count
        run = threads.pool(count).run if count > 1 else None
        if w.tiles is not None and m == 1:  # a decode step: the codes' fixed row, one compiled call
            return qd8.tiled_rows(w, *source.rows(1), bias, o, count, run)
        if w.tiles is not None:  # several rows: their codes fetched from the bank at each call
            return lambda: qd8.tiled_rows(w, *source.rows(m), bias, o, count, run)()
        scratch = np.empty(self.n, np.int32), np.empty(self.n, np.int16), np.empty(self.n, np.int16)
        if m == 1:
            return functools.partial(fused.qd8_qb4w_matvec, w.nibbles, w.scales, w.ksum, source.codes, source.params,
                                     bias, *scratch, o[0])

        def each_row() -> None:
            codes, params = source.rows(m)
            for r in range(m):
                fused.qd8_qb4w_matvec(w.nibbles, w.scales, w.ksum, codes[r], params[r], bias, *scratch, o[r])

        return each_row


def _float_filter(w: Value, transposed: bool) -> np.ndarray:
    """A constant filter as the [K, N] float32 matrix of the matmul."""
    constant = w.constant
    assert constant is not None
    return np.ascontiguousarray(constant if transposed else constant.T, dtype=np.float32)


def _each(steps: list[Step]) -> Step:
    """One step running `steps` in order."""
    def run() -> None:
        for step in steps:
            step()
    return run


def _filter_view(w: np.ndarray, transposed: bool) -> np.ndarray:
    """A run-time filter as the [K, N] operand of the matmul."""
    return w if transposed else w.T



@builds("BatchMatrixMultiply")
class BatchMatrixMultiply(Op):
    """out[..., M, N] = a[..., M, K] @ b[..., K, N] (b as [..., N, K] with XNN_FLAG_TRANSPOSE_B), batches broadcast."""

    name = "BatchMatrixMultiply"

    def __init__(self, node: g.BinaryNode, ctx: Context) -> None:
        ctx.check_flags(node.flags, TRANSPOSE_WEIGHTS)
        a, b = ctx.value(node.input1_id), ctx.value(node.input2_id)
        super().__init__([a.id, b.id], [ctx.value(node.output_id, "output").id])
        self.transpose_b = bool(node.flags & TRANSPOSE_WEIGHTS)

    def infer(self, shapes: Sequence[Shape]) -> list[Shape]:
        a, b = shapes
        if len(a) < 2 or len(b) < 2:
            raise fail(self, f"operands {list(a)} and {list(b)} must have at least 2 dims")
        bk, bn = (b[-1], b[-2]) if self.transpose_b else (b[-2], b[-1])
        if a[-1] != bk:
            raise fail(self, f"inner dims of {list(a)} and {list(b)} differ")
        return [(*broadcast(a[:-2], b[:-2], self), a[-2], bn)]

    def bind(self, ins: Sequence[np.ndarray], outs: Sequence[np.ndarray]) -> Step:
        a, b, o = ins[0], ins[1], outs[0]
        if self.transpose_b:
            b = np.swapaxes(b, -1, -2)
        return bound_product(np.matmul, a, b, o)
