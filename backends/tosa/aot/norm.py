"""Layer norm of an int8 value over its last dim as TOSA-1.0+INT operators (mean and variance in int32,
the reciprocal square root from one int16 TABLE), and a mean over any dims (REDUCE_SUM, then RESCALE).

ExecuTorch's Arm flow decomposes layer norm into int8 steps, each with its own observed scale: the mean
(REDUCE_SUM, RESCALE), x − mean, its square, the variance (REDUCE_SUM, RESCALE), an int8 rsqrt TABLE and
two MULs. Here the steps before the table are exact integers, and the table is TOSA's int16 one
(513 entries, interpolated to 7 more bits), so only the table and the final rescale round:

    x: the int8 codes (d and the variance do not depend on the zero point)
    S₁ = Σ x, S₂ = Σ x² (each x² ≤ 2¹⁴, exact as int16);  d = C·x − S₁ = C·(x − mean)/s  (|d| ≤ 255·C)
    v = C·(C·S₂ − S₁²) >> k = Σ d² >> k = C³·var/s²/2ᵏ  (k keeps it within 2³⁰)
    q = (var + eps) as a code in [1, 2³⁰) of the largest variance an int8 row can have, (255·s/2)², + eps
    r = TABLE_rsqrt(q·2²ʰ, the int16 index of its top range [2²⁸, 2³⁰); 2h from CLZ(q)) >> 8 << h
    y = (d·r >> k₂)·f + β/σ: an int32 accumulator, one scale σ per channel: σ = |γ|·unit and f = sign(γ),
        or σ = |β|/2³⁰ and f = γ·unit/σ (a 16-bit fraction) where β/(|γ|·unit) would overflow int32
        (a γ near zero beside its β; γ = 0 too).

The table's top range takes every row's variance, however flat, to the same 14 bits; on U55 an int16
TABLE runs as three LUT passes (about 2,200 cycles each however few rows), so one table, not two.

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

INT16_ENTRIES, HEADROOM = 513, 2**30
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
    k2 = _bits(255.0 * c * 2**28)  # |d| ≤ 255·C, r < 2²⁸
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
    """1/√(var + eps) of each row, as int32 in steps of r_unit/128 (at most 2²⁸); and r_unit. One int16 TABLE:
    q = (var + eps) as a code in [1, 2³⁰), shifted up by an even 2h bits (CLZ) into [2²⁸, 2³⁰), where the
    table holds 1/√ to 15 bits (7 more interpolated); the result shifted back by h. Every row's variance,
    however flat, is resolved alike (two tables over fixed ranges cost 3 LUT passes each on U55)."""
    b = lw.b
    top = ((255.0 * scale / 2) ** 2 + eps) * (1 + 2**-20)  # the largest variance of an int8 row, + eps
    to_code = 2.0**k * scale**2 / c**3 / top * 2**30  # v → var as a code over [0, 2³⁰): CLZ ≥ 2
    q = rescale(lw, v, np.array([to_code]), 0, np.int32)
    eps_code = round(eps / top * 2**30)
    if eps_code:  # q ≥ 1
        q = b.op("ADD", [q, _scalar(lw, eps_code, v.shape)], v.shape, np.int32, "AddAttribute")
    else:  # a zero variance (a constant row, d = 0) takes the reciprocal of the smallest code
        q = b.op("MAXIMUM", [q, _scalar(lw, 1, v.shape)], v.shape, np.int32, "MaximumAttribute",
                 b.ts.NanPropagationMode.PROPAGATE)
    zeros = b.op("CLZ", [q], v.shape, np.int32, "ClzAttribute")  # 2..31
    less = b.op("SUB", [zeros, _scalar(lw, 3, v.shape)], v.shape, np.int32, "SubAttribute")
    h = _shift(lw, "ARITHMETIC_RIGHT_SHIFT", less, _scalar(lw, 1, v.shape), v.shape)  # ⌊(CLZ − 2)/2⌋ ∈ [0, 14]
    two_h = b.op("ADD", [h, h], v.shape, np.int32, "AddAttribute")
    moved = _shift(lw, "LOGICAL_LEFT_SHIFT", q, two_h, v.shape)  # q·2²ʰ ∈ [2²⁸, 2³⁰)
    code = _int16_code(lw, moved, v.shape, 2**29, 2.0**-14)  # (q·2²ʰ)/2¹⁴ − 32768: the table's input
    half = 32767 / 2
    j = np.maximum(np.arange(INT16_ENTRIES, dtype=np.float64), 128)  # entry j at q·2²ʰ = j·2²¹ (j ≥ 128 used)
    entries = np.round(half * np.sqrt(512 / j)).astype(np.int16)  # 2¹⁴·√(2³⁰/(q·2²ʰ)) ≤ 32767
    t = b.op("TABLE", [code, b.const(entries, "table")], v.shape, np.int32, "TableAttribute")  # < 2²²
    t = _shift(lw, "ARITHMETIC_RIGHT_SHIFT", t, _scalar(lw, 8, v.shape), v.shape)  # < 2¹⁴
    r = _shift(lw, "LOGICAL_LEFT_SHIFT", t, h, v.shape)  # (half/2)·√(2³⁰/q) = (half/2)·√(top/(var + eps))
    return r, 256 / (half * math.sqrt(top))


def _scalar(lw: Context, value: int, shape: tuple[int, ...]) -> str:
    return lw.b.const(np.full([1] * len(shape), value, dtype=np.int32))


def _shift(lw: Context, op: str, x: str, amount: str, shape: tuple[int, ...]) -> str:
    """An int32 shift (Vela on U55 takes only the rounding arithmetic right shift)."""
    if op == "ARITHMETIC_RIGHT_SHIFT":
        return lw.b.op(op, [x, amount], shape, np.int32, "ArithmeticRightShiftAttribute", True)
    return lw.b.op(op, [x, amount], shape, np.int32, "LogicalLeftShiftAttribute")


def _int16_code(lw: Context, code: str, shape: tuple[int, ...], offset: int, factor: float) -> str:
    """(code − offset) × factor as int16 (saturated): a TABLE's input."""
    b = lw.b
    moved = b.op("SUB", [code, _scalar(lw, offset, shape)], shape, np.int32, "SubAttribute")
    return rescale(lw, Value(moved, shape, scales=np.array([1.0])), np.array([factor]), 0, np.int16)


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
