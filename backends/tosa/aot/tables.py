"""Element-wise functions of one int8 value as TOSA TABLE operators, and softmax over one dim (TOSA-1.0+INT).

An int8 input takes 256 values, so any function of it is a 256-entry int8 table: each input code is
dequantized with the input's parameters, the PyTorch operator itself computes the float32 result (the
quantized torch model's own arithmetic), and the result is quantized with the parameters of the one
int8 quantize that reads it (support.py requires that quantize). `sigmoid`, `tanh`, `hardswish`,
`hardsigmoid`, `gelu`, `silu`, `exp`, `elu` and the like all lower this way.

`softmax` and `log_softmax` over dim d use int32 arithmetic and small tables (ExecuTorch's Arm flow
decomposes them into int8 steps with observed scales; here each step's scale follows from known ranges):
in PyTorch's dim order: m = REDUCE_MAX(x); x − m in [−255, 0] input steps, as int8 over [−L, 0]
(L = 255·s within [1/16, 16]); c = TABLE_exp (int8 codes); Σ = REDUCE_SUM(c) (+ N·exp(−L) when the codes
hold e − exp(−L)), as an int8 index over [0, N].
log_softmax = s·x − (s·m + log Σ), with log Σ from two tables (a coarse part and its remainder), its codes
e − exp(−L) over [0, 1 − exp(−L)] (every code spent on the range an exponential takes);
softmax = e × 1/Σ, the way ExecuTorch's flow multiplies: the codes are e over [0, 1] (zero point −128, so
the product needs no added exp(−L)); the reciprocal from a table and one Newton step, held as int8 over
[0, the output's largest value] (a row with a larger 1/Σ has its largest output, 1/Σ itself, saturated
anyway); the int8 × int8 product RESCALEd once into the output's parameters. The codes and 1/Σ each add
at most half an output step of error.

SRAM (Vela's allocation): softmax's product is one int8 MUL of the codes and the per-row int8 reciprocal,
so only int8 values of x's shape are held (the codes, then the output) beside one byte per row. Per-row
values are flat ([1, .., rows]), not [.., 1] (padded 16x in NHCWB16).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch.fx import Node

from etbuild.backends.tosa.aot.compute import rescale
from etbuild.backends.tosa.aot.quant import QParams, activation_params
from etbuild.backends.tosa.aot.values import TORCH, Context, Value, in_layout, reshaped
from etbuild.backends.tosa.rescale import multipliers_shifts

aten = torch.ops.aten
TABLE_OPS = frozenset({
    aten.sigmoid.default, aten.tanh.default, aten.hardswish.default, aten.hardsigmoid.default, aten.gelu.default,
    aten.silu.default, aten.exp.default, aten.elu.default, aten.log.default, aten.reciprocal.default,
    aten.rsqrt.default, aten.sqrt.default, aten.erf.default,
})
SOFTMAX_OPS = frozenset({aten._softmax.default, aten._log_softmax.default})
EXP_RANGE, MIN_RANGE = 16.0, 1 / 16
"""How far below a row's maximum softmax resolves (exp(−16) ≈ 1e-7: below every int8 step), and at
least (a finer table than the input's steps would only round them)."""
CODES = np.arange(-128, 128)


def output_params(node: Node) -> QParams | None:
    """The parameters of the one int8 quantize that reads `node` (None: not exactly one such reader)."""
    users = list(node.users)
    return activation_params(users[0]) if len(users) == 1 else None


def lookup(lw: Context, tensor: str, shape: tuple[int, ...], fn: Callable[[np.ndarray], np.ndarray],
           params: QParams, out: QParams) -> str:
    """TABLE: out = quantize(fn(dequantize(code))) for each of the 256 int8 codes."""
    with np.errstate(divide="ignore", invalid="ignore"):
        reals = fn((params.scale * (CODES - params.zero_point)).astype(np.float32))
    reals = np.nan_to_num(np.asarray(reals, dtype=np.float64), nan=0.0, posinf=1e30, neginf=-1e30)
    table = np.array([out.quantize(float(r)) for r in reals], dtype=np.int8)
    return lw.b.op("TABLE", [tensor, lw.b.const(table, "table")], shape, np.int8, "TableAttribute")


def table(lw: Context, node: Node) -> Value:
    """A function of one int8 value (node.target with its other arguments) → one TABLE."""
    x, out = lw.value(node.args[0]), output_params(node)
    assert out is not None, "support.py takes a table operator only when one int8 quantize reads it"

    def fn(reals: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return node.target(torch.from_numpy(reals), *node.args[1:], **node.kwargs).double().numpy()

    return Value(lookup(lw, x.tensor, x.stored, fn, x.params, out), x.shape, x.layout, out)


@dataclass(frozen=True)
class Sums:
    """What softmax and log_softmax share: each row's maximum (int8), the exponentials as the exp table's
    int8 codes (e, or e − exp(−L)), and each row's Σ e (int32, steps of the codes' scale) and as an int8
    index over [0, N]. Σ and the index are flat ([1, .., rows]): one element per row kept as [.., 1]
    would be padded sixteen-fold in Vela's NHCWB16 format."""

    peak: Value
    codes: Value
    total: Value
    index: Value
    row: tuple[int, ...]  # the rows' shape before flattening
    count: int  # N: the values in each row


def softmax(lw: Context, node: Node) -> Value:
    """_softmax / _log_softmax(x, dim, half_to_float) of an int8 value over one dim, in PyTorch's dim order
    (Vela reduces over a channels-last value's last dim slowly)."""
    x, out = in_layout(lw.b, lw.value(node.args[0]), TORCH), output_params(node)
    assert out is not None, "support.py takes softmax only when one int8 quantize reads it"
    dim = node.args[1] % len(x.shape)
    if node.target is aten._log_softmax.default:
        return Value(_log_softmax(lw, x, _sums(lw, x, dim, floor=True), out), x.shape, TORCH, out)
    return Value(_softmax(lw, x, _sums(lw, x, dim, floor=False), out), x.shape, TORCH, out)


def _sums(lw: Context, x: Value, dim: int, floor: bool) -> Sums:
    """`floor`: the codes hold e − exp(−L) over [0, 1 − exp(−L)] (finer, for log Σ alone); else e over
    [0, 1] (zero point −128), which a product can read as it is."""
    b, s = lw.b, x.params.scale
    row = tuple(1 if k == dim else d for k, d in enumerate(x.shape))
    flat = (*[1] * (len(row) - 1), int(np.prod(row)))
    peak = Value(b.op("REDUCE_MAX", [x.tensor], row, np.int8, "ReduceMaxAttribute", dim,
                      b.ts.NanPropagationMode.PROPAGATE), row, TORCH, x.params)
    wide = rescale(lw, x, np.array([1.0]), 0, np.int32)
    top = rescale(lw, peak, np.array([1.0]), 0, np.int32)
    diff = Value(b.op("SUB", [wide, top], x.shape, np.int32, "SubAttribute"), x.shape, TORCH,
                 scales=np.array([s]))  # x − m in [−255, 0] steps of s
    reach = float(np.clip(255 * s, MIN_RANGE, EXP_RANGE))
    step = QParams(reach / 255, 127)  # t = x − m as int8: 0 at code 127
    shifted = rescale(lw, diff, np.array([s / step.scale]), 127, np.int8)
    low = float(np.exp(-reach)) if floor else 0.0
    unit = QParams((1 - low) / 255, -128)  # e − low over [0, 1 − low]
    exp = Value(lookup(lw, shifted, x.shape, lambda t: np.exp(t) - low, step, unit), x.shape, TORCH, unit)
    partial = b.op("REDUCE_SUM", [rescale(lw, exp, np.array([1.0]), 0, np.int32)], row, np.int32,
                   "ReduceSumAttribute", dim)
    partial = reshaped(b, partial, row, flat, np.int32)
    n = x.shape[dim]
    if floor:
        offset = b.const(np.full([1] * len(row), n * round(low / unit.scale), dtype=np.int32), "offset")
        partial = b.op("ADD", [partial, offset], flat, np.int32, "AddAttribute")
    total = Value(partial, flat, TORCH, scales=np.array([unit.scale]))
    index_params = QParams(n / 255, -128)  # Σ e as int8 over [0, N]
    index = rescale(lw, total, np.array([unit.scale / index_params.scale]), -128, np.int8)
    return Sums(peak, exp, total, Value(index, flat, TORCH, index_params), row, n)


def _log_softmax(lw: Context, x: Value, sums: Sums, out: QParams) -> str:
    """s·x − (s·m + log Σ e), log Σ from two tables (a coarse part and its remainder, 16 bits in all)."""
    b, index = lw.b, sums.index
    coarse = QParams(float(np.log(index.params.scale * 255)) / 255, -128)
    fine = QParams(coarse.scale / 255, 0)

    def remainder(r: np.ndarray) -> np.ndarray:
        log = np.log(r)
        return log - coarse.scale * (np.array([coarse.quantize(float(v)) for v in log]) - coarse.zero_point)

    factor = x.params.scale / out.scale * 2**8
    peak = replace(sums.peak, tensor=reshaped(b, sums.peak.tensor, sums.row, index.stored, np.int8),
                   shape=index.shape)
    row = rescale(lw, peak, np.array([factor]), 0, np.int32)
    for params, fn in ((coarse, np.log), (fine, remainder)):
        table = lookup(lw, index.tensor, index.stored, fn, index.params, params)
        part = rescale(lw, replace(index, tensor=table, params=params), np.array([params.scale / out.scale * 2**8]),
                       0, np.int32)
        row = b.op("ADD", [row, part], index.stored, np.int32, "AddAttribute")
    whole = rescale(lw, x, np.array([factor]), 0, np.int32)
    row = reshaped(b, row, index.stored, sums.row, np.int32)
    result = b.op("SUB", [whole, row], x.stored, np.int32, "SubAttribute")
    held = Value(result, x.shape, TORCH, scales=np.array([out.scale / 2**8]))
    return rescale(lw, held, np.array([1 / 2**8]), out.zero_point, np.int8)


def _softmax(lw: Context, x: Value, sums: Sums, out: QParams) -> str:
    """e × (1 / Σ e): the reciprocal from a table, refined by one Newton step r·(2 − Σ·r) in int32 and held
    as int8 over [0, top] (top: the output's largest value, at most 1); then one int8 × int8 MUL of the
    codes and the reciprocal, which Vela runs with its RESCALEs as one operator (only int8 values of x's
    shape are held, and one byte per row)."""
    b, index = lw.b, sums.index
    inverse = QParams(1 / 255, -128)  # 1/Σ ∈ [1/N, 1]
    recip = lookup(lw, index.tensor, index.stored, np.reciprocal, index.params, inverse)
    # the table's codes as int32 by a CAST and + 128, not a RESCALE: read by two int32 MULs, a RESCALE would
    # run as an operator of its own for each (Vela folds one only into an operator whose inputs are all RESCALEs)
    coarse = b.op("CAST", [recip], index.stored, np.int32, "CastAttribute")
    coarse = b.op("ADD", [coarse, b.const(np.full([1] * len(x.shape), 128, dtype=np.int32))], index.stored,
                  np.int32, "AddAttribute")
    shift = b.const(np.array([0], dtype=np.int8), "shift")
    unit = float(sums.total.scales[0])
    near_one = b.op("MUL", [sums.total.tensor, coarse, shift], index.stored, np.int32, "MulAttribute")
    two = b.const(np.full([1] * len(x.shape), round(2 * 255 / unit), dtype=np.int32), "two")
    error = b.op("SUB", [two, near_one], index.stored, np.int32, "SubAttribute")  # 2 − Σ·r, steps unit/255
    fine = b.op("MUL", [coarse, error, shift], index.stored, np.int32, "MulAttribute")  # steps unit/255²
    fine = Value(fine, index.shape, TORCH, scales=np.array([1.0]))
    top = float(np.clip(out.scale * (127 - out.zero_point), 1 / sums.count, 1.0))
    held = QParams(top / 255, -128)  # 1/Σ over [0, top]: past it, the row's largest output saturates anyway
    r8 = rescale(lw, fine, np.array([unit / 255**2 / held.scale]), held.zero_point, np.int8)
    r8 = Value(reshaped(b, r8, index.stored, sums.row, np.int8), sums.row, TORCH, held)
    wide = [rescale(lw, value, np.array([1.0]), 0, np.int32) for value in (sums.codes, r8)]
    product = b.op("MUL", [*wide, shift], x.shape, np.int32, "MulAttribute")
    scale = sums.codes.params.scale * held.scale
    return rescale(lw, Value(product, x.shape, TORCH, scales=np.array([scale])), np.array([scale / out.scale]),
                   out.zero_point, np.int8)


def widen16(lw: Context, tensor: str, shape: tuple[int, ...]) -> str:
    """An int16 tensor as int32 (a RESCALE by one, which Vela folds into the operator reading it)."""
    b = lw.b
    multipliers, shifts = multipliers_shifts(np.array([1.0]))
    inputs = [tensor, b.const(multipliers, "multiplier"), b.const(shifts, "shift"), b.zero_point(0, np.int16),
              b.zero_point(0, np.int32)]
    return b.op("RESCALE", inputs, shape, np.int32, "RescaleAttribute", True, b.ts.RoundingMode.SINGLE_ROUND,
                False, False, False)
