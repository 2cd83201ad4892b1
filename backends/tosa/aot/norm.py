"""Layer norm of an int8 value over its last dim as TOSA-1.0+INT operators (mean and variance in int32,
the reciprocal square root from one int16 TABLE), and a mean over any dims (REDUCE_SUM, then RESCALE).

ExecuTorch's Arm flow decomposes layer norm into int8 steps, each with its own observed scale: the mean
(REDUCE_SUM, RESCALE), x − mean, its square, the variance (REDUCE_SUM, RESCALE), an int8 rsqrt TABLE and
two MULs. Here the steps before the table are exact integers, and the table is TOSA's int16 one
(513 entries, interpolated to 7 more bits), so only the table and the final rescale round:

    x: the int8 codes (d and the variance do not depend on the zero point)
    S₁ = Σ x, S₂ = Σ x² (each x² ≤ 2¹⁴, exact as int16);  d = C·x − S₁ = C·(x − mean)/s  (|d| ≤ 255·C)
    v = C·(C·S₂ − S₁²) >> k = Σ d² >> k = C³·var/s²/2ᵏ  (k keeps it within 2³⁰)
    r = TABLE_rsqrt(v as int16 over var ∈ [0, (255·s/2)²], the largest variance an int8 row can have)
    y = (d·r >> k₂)·f + β/σ: an int32 accumulator, one scale σ per channel: σ = |γ|·unit and f = sign(γ),
        or σ = |β|/2³⁰ and f = γ·unit/σ (a 16-bit fraction) where β/(|γ|·unit) would overflow int32
        (a γ near zero beside its β; γ = 0 too).

The two tables (_rsqrt) resolve a row's variance down to about 2⁻¹⁷ of that largest one; a row flatter
than that (a standard deviation under about 0.35 input steps) is normalised with a coarser reciprocal.

SRAM (Vela's allocation): every use of x reads it through a RESCALE of its own, which Vela folds into the
operator reading it, and d is computed again for the product, so the only values of x's shape held beside
x are x² (int16, before its sum) and the product (int32, before the quantize's per-channel RESCALE).
Per-row values are flat ([1, .., rows]): Vela's NHCWB16 format would pad a [.., 1] value sixteen-fold.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from torch.fx import Node

from etbuild.backends.tosa.aot import compute
from etbuild.backends.tosa.aot.compute import rescale
from etbuild.backends.tosa.aot.quant import QParams
from etbuild.backends.tosa.aot.tables import widen16
from etbuild.backends.tosa.aot.values import TORCH, Context, Value, in_layout, reshaped

INT16_ENTRIES, HEADROOM, ZOOM = 513, 2**30, 256
FACTOR_BITS = 16
"""The fraction bits of a per-channel factor that scales y down where β needs the room."""


def _mul(lw: Context, a: str, c: str, shape: tuple[int, ...], shift: int = 0) -> str:
    return lw.b.op("MUL", [a, c, lw.b.const(np.array([shift], dtype=np.int8), "shift")], shape, np.int32,
                   "MulAttribute")


def _q(lw: Context, x: Value) -> str:
    """x − zp as int32: a RESCALE of its own for each use, which Vela folds into the operator reading it
    (one shared copy would be an int32 [.., C] value held in SRAM)."""
    return rescale(lw, x, np.array([1.0]), 0, np.int32)


def _sum(lw: Context, tensor: str, row: tuple[int, ...], axis: int) -> str:
    return lw.b.op("REDUCE_SUM", [tensor], row, np.int32, "ReduceSumAttribute", axis)


def _row_const(values: np.ndarray, rank: int, dtype: type = np.int32) -> np.ndarray:
    """A constant that broadcasts along the last dim of a rank-`rank` value."""
    return np.asarray(values, dtype=dtype).reshape([1] * (rank - 1) + [-1])


def _bits(value: float) -> int:
    """The right shift that brings `value` within HEADROOM."""
    return max(0, math.ceil(math.log2(value / HEADROOM))) if value > HEADROOM else 0


def _constant(lw: Context, node: object, size: int, default: float) -> np.ndarray:
    if node is None:
        return np.full(size, default, dtype=np.float64)
    return lw.constants[node].detach().double().numpy().reshape(-1)


def layer_norm(lw: Context, node: Node) -> Value:
    """native_layer_norm(x, [C], γ, β, eps) of an int8 value → an int32 accumulator (see the module)."""
    b = lw.b
    x = in_layout(b, lw.value(node.args[0]), TORCH)
    shape, rank = x.shape, len(x.shape)
    c, axis, row = shape[-1], rank - 1, (*shape[:-1], 1)
    flat = (*[1] * (rank - 1), int(np.prod(row)))
    gamma, beta = _constant(lw, node.args[2], c, 1.0), _constant(lw, node.args[3], c, 0.0)
    eps = float(node.args[4])
    raw = replace(x, params=QParams(x.params.scale, 0))  # the codes: d and the variance ignore a shift
    total = _sum(lw, _q(lw, raw), row, axis)  # Σx
    squared = _mul(lw, _q(lw, raw), _q(lw, raw), shape)  # x² ≤ 2¹⁴: exact as int16
    squared = widen16(lw, rescale(lw, Value(squared, shape, scales=np.array([1.0])), np.array([1.0]), 0, np.int16),
                      shape)
    sums = [reshaped(b, t, row, flat, np.int32) for t in (total, _sum(lw, squared, row, axis))]  # Σx, Σx²
    k = _bits(float(c) * (255.0 * c) ** 2)
    j = _bits(255.0 * c * c)  # keeps C·Σx within int32
    spread = _mul(lw, _mul(lw, sums[0], b.const(_row_const([c], rank)), flat, j), sums[0], flat, k - j)
    v = b.op("SUB", [_mul(lw, sums[1], b.const(_row_const([c * c], rank)), flat, k), spread], flat, np.int32,
             "SubAttribute")  # Σd² = C·(C·Σx² − (Σx)²), over 2ᵏ
    r, r_unit = _rsqrt(lw, Value(v, flat, TORCH, scales=np.array([1.0])), c, k, x.params.scale, eps)
    k2 = _bits(255.0 * c * 32767 * 128 * math.sqrt(ZOOM))
    width = _width(lw, c, rank)
    d = b.op("SUB", [_mul(lw, _q(lw, raw), width, shape), total], shape, np.int32,
             "SubAttribute")  # d = C·x − Σx, again from x: no int32 [.., C] value is held meanwhile
    y = _mul(lw, d, reshaped(b, r, flat, row, np.int32), shape, k2)
    unit = x.params.scale / c * r_unit / 128 * 2**k2  # the real value of one step of y, before γ
    return _affine(lw, y, shape, gamma, beta, unit)


def _affine(lw: Context, y: str, shape: tuple[int, ...], gamma: np.ndarray, beta: np.ndarray, unit: float) -> Value:
    """γ·y + β as an int32 accumulator with one scale per channel: |γ|·unit, so γ costs no operator but its
    sign; larger where β would lie beyond HEADROOM steps of it (a γ near zero beside β, which a clip would
    put several output steps off), y then scaled down by a per-channel multiply."""
    b, rank = lw.b, len(shape)
    scales = np.maximum(np.abs(gamma) * unit, np.abs(beta) / HEADROOM)
    scales = np.where(scales > 0, scales, unit)  # γ = β = 0: any scale, the channel is zero
    factors = np.sign(gamma) * np.abs(gamma) * unit / scales  # in [−1, 1]; ±1 but where β needs room
    if (np.abs(factors) != 1).any():
        y = _mul(lw, y, b.const(_row_const(np.round(factors * 2**FACTOR_BITS), rank)), shape, FACTOR_BITS)
    elif (factors < 0).any():
        y = _mul(lw, y, b.const(_row_const(factors, rank)), shape)
    offsets = np.round(beta / scales)  # within ±HEADROOM by the choice of scales
    offsets = offsets if offsets.any() else offsets[:1]  # a zero β: one zero, not a row to broadcast
    y = b.op("ADD", [y, b.const(_row_const(offsets, rank))], shape, np.int32, "AddAttribute")
    return Value(y, shape, TORCH, scales=scales)


def _width(lw: Context, c: int, rank: int) -> str:
    """C as int32 for the MUL by x: from an int8 constant when it fits (both of the MUL's operands are then
    int8 RESCALEs, which Vela folds into it; with one int16 operand it runs x's RESCALE on its own), else int16."""
    if c <= 127:
        held = Value(lw.b.const(_row_const([c], rank, np.int8)), (1,) * rank, params=QParams(1.0, 0))
        return rescale(lw, held, np.array([1.0]), 0, np.int32)
    return widen16(lw, lw.b.const(_row_const([c], rank, np.int16)), (1,) * rank)  # Vela multiplies x as int8


def _rsqrt(lw: Context, v: Value, c: int, k: int, scale: float, eps: float) -> tuple[str, float]:
    """1/√(var + eps) of each row, as int32 in steps of r_unit/128; and r_unit. Two int16 TABLEs: a coarse
    one over var ∈ [0, largest] and a fine one over [0, largest/ZOOM], the fine one taken below that."""
    b = lw.b
    largest = (255.0 * scale / 2) ** 2
    to_code = 2.0**k * scale**2 / c**3 / largest * 65535 * ZOOM  # v → var as a code over [0, 65535·ZOOM]
    code = rescale(lw, v, np.array([to_code]), 0, np.int32)
    fine_in = _int16_code(lw, code, v.shape, 32768, 1.0)
    coarse_in = _int16_code(lw, code, v.shape, 32768 * ZOOM, 1.0 / ZOOM)
    r_unit = 1 / math.sqrt(largest * 128 / 65535) / 32767  # the coarse table's step; the fine one's is ×√ZOOM
    coarse = _table(lw, coarse_in, v.shape, largest, eps, r_unit)
    fine = _table(lw, fine_in, v.shape, largest / ZOOM, eps, r_unit * math.sqrt(ZOOM))
    fine = _mul(lw, fine, b.const(np.full([1] * len(v.shape), round(math.sqrt(ZOOM)), dtype=np.int32)), v.shape)
    beyond = b.op("SUB", [code, b.const(np.full([1] * len(v.shape), 65535, dtype=np.int32))], v.shape, np.int32,
                  "SubAttribute")
    bounds = [b.const(np.full([1] * len(v.shape), bound, dtype=np.int32)) for bound in (0, 1)]
    beyond = b.op("MAXIMUM", [beyond, bounds[0]], v.shape, np.int32, "MaximumAttribute",
                  b.ts.NanPropagationMode.PROPAGATE)
    choose = b.op("MINIMUM", [beyond, bounds[1]], v.shape, np.int32, "MinimumAttribute",
                  b.ts.NanPropagationMode.PROPAGATE)  # 1 where the row's variance is past the fine table
    gap = b.op("SUB", [coarse, fine], v.shape, np.int32, "SubAttribute")
    return b.op("ADD", [fine, _mul(lw, choose, gap, v.shape)], v.shape, np.int32, "AddAttribute"), r_unit


def _int16_code(lw: Context, code: str, shape: tuple[int, ...], offset: int, factor: float) -> str:
    """(code − offset) × factor as int16 (saturated): a TABLE's input."""
    b = lw.b
    moved = b.op("SUB", [code, b.const(np.full([1] * len(shape), offset, dtype=np.int32))], shape, np.int32,
                 "SubAttribute")
    return rescale(lw, Value(moved, shape, scales=np.array([1.0])), np.array([factor]), 0, np.int16)


def _table(lw: Context, code: str, shape: tuple[int, ...], top: float, eps: float, unit: float) -> str:
    """An int16 TABLE of 1/√(var + eps) over var ∈ [0, top], in steps of `unit` (before its 7 fraction bits);
    the first entry, whose interval it cannot resolve, is clamped to the second's reach."""
    variances = np.arange(INT16_ENTRIES, dtype=np.float64) * 128 / 65535 * top
    entries = np.clip(np.round(1 / np.sqrt(variances + eps) / unit), -32768, 32767).astype(np.int16)
    return lw.b.op("TABLE", [code, lw.b.const(entries, "table")], shape, np.int32, "TableAttribute")


def mean(lw: Context, node: Node) -> Value:
    """mean over any dims of an int8 value, whose output shares its parameters: REDUCE_SUM per dim in
    PyTorch's order (int32), then one RESCALE by 1/N."""
    b = lw.b
    x = in_layout(b, lw.value(node.args[0]), TORCH)
    rank = len(x.shape)
    dims = sorted({d % rank for d in node.args[1]})
    shape, count = list(x.shape), 1
    tensor = rescale(lw, x, np.array([1.0]), 0, np.int32)
    for d in dims:
        count *= shape[d]
        shape[d] = 1
        tensor = b.op("REDUCE_SUM", [tensor], tuple(shape), np.int32, "ReduceSumAttribute", d)
    total = Value(tensor, tuple(shape), TORCH, scales=np.array([1.0]))
    out = rescale(lw, total, np.array([1.0 / count]), x.params.zero_point, np.int8)
    result = tuple(node.meta["val"].shape)
    if result != tuple(shape):
        out = b.op("RESHAPE", [out, b.shape(result)], result, np.int8, "ReshapeAttribute")
    return Value(out, result, TORCH, x.params)


def spatial(node: Node) -> bool:
    """Whether a mean is over the spatial dims of a 3-D or 4-D value (one AVG_POOL2D, compute.mean)."""
    rank = node.args[0].meta["val"].dim()
    return rank in (3, 4) and sorted(d % rank for d in node.args[1]) == list(range(2, rank))


def any_mean(lw: Context, node: Node) -> Value:
    """mean.dim: over the spatial dims one AVG_POOL2D, over others REDUCE_SUMs."""
    return compute.mean(lw, node) if spatial(node) else mean(lw, node)
