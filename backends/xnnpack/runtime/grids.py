"""Number formats of delegate values: what "rounding onto the value's datatype" means.

Inside the delegate every fp32, fp16, bf16 and quantized value is held as float32 holding the
value's real numbers: a qint8 tensor holds (q − zero_point)·scale, an fp16 tensor holds
float16-representable floats. A node computes in float32, then its output grid snaps the
result onto the output's datatype, clamping to the node's fused `output_min_max` first, as
XNNPACK does: for quantized outputs the clamp bounds are quantized like the values, so a
fused ReLU keeps exactly the zero point. The result equals XNNPACK's integer arithmetic
within one quantization step (XNNPACK accumulates in int32 and requantizes with a float
scale; here the same products are summed in float32). int32 values are held as int32.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from etbuild.backends.xnnpack.format.graph import XNNDatatype as DT
from etbuild.backends.xnnpack.runtime import loops

Snap = Callable[[np.ndarray], None]


def _clip_ufunc() -> Callable[..., np.ndarray]:
    """numpy's clip ufunc, which np.clip reaches through three Python frames (2–3 µs a call, per clamped node);
    np.clip itself where a numpy does not expose it."""
    try:
        from numpy._core import umath
    except ImportError:  # numpy 1.x
        from numpy.core import umath
    clip = getattr(umath, "clip", None)
    return clip if isinstance(clip, np.ufunc) else np.clip


CLIP = _clip_ufunc()

QUANT_RANGES = {DT.QINT8: (-128, 127), DT.QUINT8: (0, 255), DT.QDINT8: (-128, 127), DT.QINT32: (-(2**31), 2**31 - 1)}


class CodesBank:
    """Storage for the codes of many rows, shared by values whose codes are never needed at the same time (their
    producers and readers do not interleave): it grows to the largest request and is read through `views` at
    each call, so a view is never kept across a regrowth."""

    def __init__(self) -> None:
        self.codes = np.zeros(0, np.int32)
        self.params = np.zeros(0, np.float32)

    def views(self, rows: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """codes (rows, k) int32 and params (rows, 2) float32 at the front of the storage."""
        if self.codes.size < rows * k or self.params.size < 2 * rows:
            self.codes = np.zeros(max(rows * k, self.codes.size), np.int32)
            self.params = np.zeros(max(2 * rows, self.params.size), np.float32)
        return self.codes[: rows * k].reshape(rows, k), self.params[: 2 * rows].reshape(rows, 2)


@dataclass(frozen=True)
class RowCodes:
    """What rounding rows of K numbers onto a qdint8 grid keeps for XNNPACK's integer products that read them
    (backends/xnnpack/runtime/qd8.py), unsigned as its x86 kernels take them: per row the codes + 128 as int32
    (K,), and float32 (zero point + 128, scale). One row (a decode step) in `codes` and `params`, fixed; several
    in a bank shared with other values, fetched with `rows` at each call."""

    codes: np.ndarray
    params: np.ndarray
    bank: CodesBank

    @classmethod
    def of_length(cls, k: int, bank: CodesBank | None = None) -> RowCodes:
        return cls(np.zeros(k, np.int32), np.array([0, 1], np.float32), bank or CodesBank())

    def rows(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Where the codes (count, K) and params (count, 2) of `count` rows are: the fixed ones for one row."""
        if count == 1:
            return self.codes.reshape(1, -1), self.params.reshape(1, 2)
        return self.bank.views(count, self.codes.shape[0])


@dataclass(frozen=True)
class Grid:
    """How one value's numbers are rounded: a datatype and, per tensor, a scale and zero point."""

    datatype: int
    scale: float = 1.0
    zero_point: int = 0
    row_dims: int = 1  # qdint8: how many trailing dims form one row

    @property
    def quantized(self) -> bool:
        return self.datatype in QUANT_RANGES

    def snapper(self, lo: float = -math.inf, hi: float = math.inf, codes: RowCodes | None = None) -> Snap | None:
        """An in-place function rounding a float32 array onto this grid within [lo, hi]; None if identity.
        A qdint8 grid given `codes` also keeps a single row's codes there (see RowCodes)."""
        if self.datatype == DT.QDINT8:
            return dynamic_snapper(self.row_dims, codes)
        if self.quantized:
            return _quantized_snapper(self, lo, hi)
        clamp = _clamp(lo, hi)
        rounding = {DT.FP16: _to_fp16, DT.BF16: _to_bf16}.get(self.datatype)
        if rounding is None or clamp is None:
            return rounding or clamp
        return _chain(clamp, rounding)


def _chain(first: Snap, second: Snap) -> Snap:
    def both(a: np.ndarray) -> None:
        first(a)
        second(a)

    return both


def _clamp(lo: float, hi: float) -> Snap | None:
    if lo == -math.inf and hi == math.inf:
        return None
    low, high, clip = np.float32(lo), np.float32(hi), CLIP
    if hi == math.inf:
        return lambda a: np.maximum(a, low, out=a)
    if lo == -math.inf:
        return lambda a: np.minimum(a, high, out=a)
    return lambda a: clip(a, low, high, out=a)


def quantized_bounds(grid: Grid, lo: float, hi: float) -> tuple[float, float]:
    """The clamp range in steps from the zero point: the datatype's range cut by [lo, hi] quantized."""
    qmin, qmax = QUANT_RANGES[grid.datatype]
    inv = 1.0 / grid.scale
    if lo > -math.inf:
        qmin = max(qmin, min(qmax, _round(lo * inv) + grid.zero_point))
    if hi < math.inf:
        qmax = min(qmax, max(qmin, _round(hi * inv) + grid.zero_point))
    return float(qmin - grid.zero_point), float(qmax - grid.zero_point)


def _round(x: float) -> int:
    """Round half to even, as XNNPACK's lrintf does, saturating far outside any range."""
    return int(np.rint(np.clip(x, -(2.0**40), 2.0**40)))


def _quantized_snapper(grid: Grid, lo: float, hi: float) -> Snap:
    """a ← clamp(rint(a/scale), steps) · scale (values relative to the zero point); one compiled pass
    for contiguous float32 arrays where numba is installed (loops.py), the same bits."""
    inv, scale = np.float32(1.0 / grid.scale), np.float32(grid.scale)
    qlo, qhi = (np.float32(b) for b in quantized_bounds(grid, lo, hi))
    fused = loops.compiled()

    def snap(a: np.ndarray) -> None:
        if fused is not None and a.flags.c_contiguous and a.dtype == np.float32:
            fused.snap_to_grid(a.reshape(-1), inv, scale, qlo, qhi)
            return
        np.multiply(a, inv, out=a)
        np.rint(a, out=a)
        np.clip(a, qlo, qhi, out=a)
        np.multiply(a, scale, out=a)

    return snap


def _to_fp16(a: np.ndarray) -> None:
    a[...] = a.astype(np.float16)


def _to_bf16(a: np.ndarray) -> None:
    """Round to nearest even bfloat16 (the upper 16 bits of a float32)."""
    bits = a.view(np.uint32)
    bits += np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))
    bits &= np.uint32(0xFFFF0000)


def dynamic_snapper(row_dims: int, codes: RowCodes | None = None) -> Snap:
    """Per-row dynamic int8 quantization (qdint8): each row (the last row_dims dims) on its own grid.

    Scale and zero point are XNNPACK's: the row range widened to include 0, spread over 255
    steps, the zero point nudged to the integer that maps the range best. One compiled loop per
    call for contiguous float32 arrays where numba is installed (loops.py), the same bits;
    rows as long as `codes` also leave their codes, zero points and scales there (RowCodes.rows). With `codes` the
    function also has `bind(array)`: that rounding of that very array with its arguments fixed (a decode
    step's Convert then costs one compiled call), or None when the array is not such a row.
    """
    fused = loops.compiled()

    def snap(a: np.ndarray) -> None:
        if not a.size:
            return
        rows = a.reshape(-1, math.prod(a.shape[a.ndim - min(row_dims, a.ndim):]))
        if fused is not None and a.flags.c_contiguous and a.dtype == np.float32:
            if codes is not None and rows.shape == (1, codes.codes.shape[0]):
                fused.snap_row_qdint8_codes(rows[0], codes.codes, codes.params)
            elif codes is not None and rows.shape[1] == codes.codes.shape[0]:
                fused.snap_rows_qdint8_codes(rows, *codes.rows(rows.shape[0]))
            else:
                fused.snap_rows_qdint8(rows)
            return
        scale, zero = row_params(rows)
        np.multiply(rows, scale, out=rows)
        np.rint(rows, out=rows)
        rows += zero
        np.clip(rows, -128.0, 127.0, out=rows)
        rows -= zero
        rows /= scale

    if codes is not None:
        snap.bind = functools.partial(_bound_row, fused, codes)  # type: ignore[attr-defined]
    return snap


def _bound_row(fused: ModuleType | None, codes: RowCodes, a: np.ndarray) -> Callable[[], None] | None:
    """The codes-keeping rounding of `a`, one contiguous float32 row of the codes' length, as a bound call."""
    k = codes.codes.shape[0]
    if fused is None or a.size != k or not a.size or a.shape[-1] != k:
        return None
    if not (a.flags.c_contiguous and a.dtype == np.float32):
        return None
    return functools.partial(fused.snap_row_qdint8_codes, a.reshape(-1), codes.codes, codes.params)


def row_params(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(inverse scale, zero point) per row, both float32 column vectors."""
    rmin = np.minimum(rows.min(axis=1, keepdims=True), np.float32(0))
    rmax = np.maximum(rows.max(axis=1, keepdims=True), np.float32(0))
    span = rmax - rmin
    inv = np.divide(np.float32(255), span, out=np.ones_like(span), where=span > 0)
    low, high = rmin * inv, rmax * inv
    zero = np.where((-128 + low) + (127 + high) > 0, -128 - low, 127 - high)
    return inv, np.rint(np.clip(zero, -128, 127))
