"""The compiled loop of a run of elementwise nodes (chains.py), imported only where `loops.exact()` is on (numba and
an AVX512F CPU: its rsqrt and sigmoid are exact.py's, XNNPACK's bits).

`run(code, addresses, table, scratch)` executes the rows of `code` in order, each one node: its kind, its output
and inputs as float32 arrays named by index into `addresses` (the arrays' data addresses, fixed when the step is
bound; the step holds the arrays), lengths and broadcast modes. Each node is the operation numpy's ufunc (or
exact.py's loop) computes, element by element in float32, written to its output before the next row runs: the same
numbers as the nodes run one by one, for one call instead of one per node.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from etbuild.backends.xnnpack.runtime import compiled, exact

jit = numba.njit(cache=True, nogil=True, error_model="numpy")

ADD, SUBTRACT, MULTIPLY, DIVIDE, RSQRT, SIGMOID, SQUARE, NEGATE, SIN, COS, CONVERT_QD8, COPY = range(12)
FULL, SCALAR, PERIODIC = range(3)  # an input read at the output's index, at 0, or at the index modulo its length
# code row: kind, out, n, a, a mode, a length, b, b mode, b length, period (b: unused by unary kinds; a Convert
# onto a qdint8 row: b its int32 codes, b mode its float32 params, as compiled.snap_row_qdint8_codes keeps them);
# a COPY (a slice, one input of a concatenation, a reshape's copy): kind, out, n, a, source offset, a length, width,
# count, source stride, out offset, out stride — out[out offset + i·out stride + j] = a[source offset + i·source
# stride + j] for i < count, j < width. Rows are WIDTH long, the unused places 0.
WIDTH = 11


@intrinsic
def _floats(typingctx, address):  # noqa: ANN001, ANN201, ARG001  (numba's intrinsic signature)
    """The float32 pointer at an integer address."""
    sig = types.CPointer(types.float32)(types.int64)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        return builder.inttoptr(args[0], ir.FloatType().as_pointer())

    return sig, codegen


@intrinsic
def _ints(typingctx, address):  # noqa: ANN001, ANN201, ARG001  (numba's intrinsic signature)
    """The int32 pointer at an integer address."""
    sig = types.CPointer(types.int32)(types.int64)

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202, ARG001
        return builder.inttoptr(args[0], ir.IntType(32).as_pointer())

    return sig, codegen


@jit
def _pairs(kind: int, o: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
    if kind == ADD:
        for j in range(o.shape[0]):
            o[j] = x[j] + y[j]
    elif kind == SUBTRACT:
        for j in range(o.shape[0]):
            o[j] = x[j] - y[j]
    elif kind == MULTIPLY:
        for j in range(o.shape[0]):
            o[j] = x[j] * y[j]
    else:
        for j in range(o.shape[0]):
            o[j] = x[j] / y[j]


@jit
def _with_second(kind: int, o: np.ndarray, x: np.ndarray, s: np.float32) -> None:
    if kind == ADD:
        for j in range(o.shape[0]):
            o[j] = x[j] + s
    elif kind == SUBTRACT:
        for j in range(o.shape[0]):
            o[j] = x[j] - s
    elif kind == MULTIPLY:
        for j in range(o.shape[0]):
            o[j] = x[j] * s
    else:
        for j in range(o.shape[0]):
            o[j] = x[j] / s


@jit
def _with_first(kind: int, o: np.ndarray, s: np.float32, y: np.ndarray) -> None:
    if kind == ADD:
        for j in range(o.shape[0]):
            o[j] = s + y[j]
    elif kind == SUBTRACT:
        for j in range(o.shape[0]):
            o[j] = s - y[j]
    elif kind == MULTIPLY:
        for j in range(o.shape[0]):
            o[j] = s * y[j]
    else:
        for j in range(o.shape[0]):
            o[j] = s / y[j]


@jit
def _binary(kind: int, o: np.ndarray, a: np.ndarray, a_mode: int, b: np.ndarray, b_mode: int, period: int) -> None:
    """o = a (kind) b over rows of `period` outputs; each input whole, one number, or one row repeated."""
    for start in range(0, o.shape[0], period):
        row = o[start : start + period]
        x = a[start : start + period] if a_mode == FULL else a
        y = b[start : start + period] if b_mode == FULL else b
        if b_mode == SCALAR:
            _with_second(kind, row, x, b[0])
        elif a_mode == SCALAR:
            _with_first(kind, row, a[0], y)
        else:
            _pairs(kind, row, x, y)


@jit
def _copy(o: np.ndarray, a: np.ndarray, row: np.ndarray) -> None:
    """A COPY row (see WIDTH): `count` runs of `width` numbers from a into o, each at its own stride."""
    source, width, count, stride, target, step = row[4], row[6], row[7], row[8], row[9], row[10]
    for i in range(count):
        o[target + i * step : target + i * step + width] = a[source + i * stride : source + i * stride + width]


@jit
def _unary(kind: int, o: np.ndarray, a: np.ndarray, table: np.ndarray, scratch: np.ndarray) -> None:
    if kind == RSQRT:
        exact.rsqrt(a, o)
    elif kind == SIGMOID:
        exact.sigmoid(a, o, table, scratch[: o.shape[0]])
    elif kind == SIN:
        exact.sin(a, o)
    elif kind == COS:
        exact.cos(a, o)
    elif kind == SQUARE:
        for j in range(o.shape[0]):
            o[j] = a[j] * a[j]
    else:  # NEGATE
        for j in range(o.shape[0]):
            o[j] = -a[j]


@jit
def run(code: np.ndarray, addresses: np.ndarray, table: np.ndarray, scratch: np.ndarray) -> None:
    """Each row of code in order (see the module docstring); table: exact.EXP2_TABLE, scratch: float32 of at
    least the longest sigmoid's length."""
    for r in range(code.shape[0]):
        kind, n = code[r, 0], code[r, 2]
        o = numba.carray(_floats(addresses[code[r, 1]]), n)
        a = numba.carray(_floats(addresses[code[r, 3]]), code[r, 5])
        if kind in (RSQRT, SIGMOID, SIN, COS, SQUARE, NEGATE):
            _unary(kind, o, a, table, scratch)
        elif kind == COPY:
            _copy(o, a, code[r])
        elif kind == CONVERT_QD8:  # the Convert's copy, then its rounding keeping the row's codes
            if addresses[code[r, 3]] != addresses[code[r, 1]]:
                o[:] = a
            params = numba.carray(_floats(addresses[code[r, 7]]), 2)
            compiled.snap_row_qdint8_codes(o, numba.carray(_ints(addresses[code[r, 6]]), n), params)
        else:
            b = numba.carray(_floats(addresses[code[r, 6]]), code[r, 8])
            _binary(kind, o, a, code[r, 4], b, code[r, 7], code[r, 9])


def warm() -> None:
    """Compile (or load from numba's cache) the loop."""
    x = np.ones(4, np.float32)
    code = np.array([[MULTIPLY, 0, 4, 0, FULL, 4, 0, FULL, 4, 4, 0]], np.int64)
    run(code, np.array([x.ctypes.data], np.int64), exact.EXP2_TABLE, np.empty(4, np.float32))
