"""Element-wise functions of one int8 value as TOSA TABLE operators, and softmax over one dim (TOSA-1.0+INT).

An int8 input takes 256 values, so any function of it is a 256-entry int8 table: each input code is
dequantized with the input's parameters, the PyTorch operator itself computes the float32 result (the
quantized torch model's own arithmetic), and the result is quantized with the parameters of the one
int8 quantize that reads it (support.py requires that quantize). `sigmoid`, `tanh`, `hardswish`,
`hardsigmoid`, `gelu`, `silu`, `exp`, `elu` and the like all lower this way.

`softmax` and `log_softmax` over dim d are lowered with int32 arithmetic and two tables (as ExecuTorch's
Arm flow decomposes them, here with scales chosen from the known ranges instead of observed ones):
m = REDUCE_MAX(x); t = x − m ∈ [−L, 0] (RESCALE to int8 over L = min(255·s, EXP_RANGE)); e = TABLE_exp(t)
(int8, scale 1/127, e of the maximum is exactly 127); S = REDUCE_SUM(e), as int8 over [0, N];
log_softmax = s·(x − m) − TABLE_log(S) and softmax = e × TABLE_reciprocal(S), each RESCALEd once
into the output's parameters.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch.fx import Node

from etbuild.backends.tosa.aot.compute import rescale
from etbuild.backends.tosa.aot.quant import QParams, activation_params
from etbuild.backends.tosa.aot.shape import stored_axis
from etbuild.backends.tosa.aot.values import Context, Value

aten = torch.ops.aten
TABLE_OPS = frozenset({
    aten.sigmoid.default, aten.tanh.default, aten.hardswish.default, aten.hardsigmoid.default, aten.gelu.default,
    aten.silu.default, aten.exp.default, aten.elu.default, aten.log.default, aten.reciprocal.default,
    aten.rsqrt.default, aten.sqrt.default, aten.erf.default,
})
SOFTMAX_OPS = frozenset({aten._softmax.default, aten._log_softmax.default})
EXP_RANGE = 16.0
"""How far below a row's maximum softmax still resolves (exp(−16) ≈ 1e-7: below every int8 step)."""
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


def softmax(lw: Context, node: Node) -> Value:
    """_softmax / _log_softmax(x, dim, half_to_float) of an int8 value over one dim."""
    b, x, out = lw.b, lw.value(node.args[0]), output_params(node)
    assert out is not None, "support.py takes softmax only when one int8 quantize reads it"
    rank, stored, dim = len(x.shape), x.stored, node.args[1] % len(x.shape)
    axis = stored_axis(dim, rank, x.layout)
    row = tuple(1 if k == dim else d for k, d in enumerate(x.shape))  # one value per row (PyTorch's order)
    kept = tuple(1 if k == axis else d for k, d in enumerate(stored))
    peak = b.op("REDUCE_MAX", [x.tensor], kept, np.int8, "ReduceMaxAttribute", axis, b.ts.NanPropagationMode.PROPAGATE)
    s = x.params.scale
    wide = rescale(lw, x, np.array([1.0]), 0, np.int32)
    top = rescale(lw, Value(peak, row, x.layout, x.params), np.array([1.0]), 0, np.int32)
    diff = b.op("SUB", [wide, top], stored, np.int32, "SubAttribute")  # x − m in steps of s, in [−255, 0]
    reach = min(255 * s, EXP_RANGE)
    step = QParams(reach / 255, 127)  # t = x − m as int8: 0 at code 127
    shifted = rescale(lw, Value(diff, x.shape, x.layout, scales=np.array([s])), np.array([s / step.scale]), 127,
                      np.int8)
    unit = QParams(1 / 127, 0)
    exp = lookup(lw, shifted, stored, np.exp, step, unit)
    wide_exp = rescale(lw, Value(exp, x.shape, x.layout, unit), np.array([1.0]), 0, np.int32)
    total = b.op("REDUCE_SUM", [wide_exp], kept, np.int32, "ReduceSumAttribute", axis)  # 127 · Σ e ∈ [127, 127·N]
    n = stored[axis]
    index_params = QParams(n / 255, -128)  # Σ e as int8 over [0, N]
    index = rescale(lw, Value(total, row, x.layout, scales=np.array([1.0])),
                    np.array([unit.scale / index_params.scale]), -128, np.int8)
    if node.target is aten._log_softmax.default:
        log_sum = QParams(np.log(n) / 255, -128)
        lse = lookup(lw, index, kept, np.log, index_params, log_sum)
        left = rescale(lw, Value(diff, x.shape, x.layout, scales=np.array([s])), np.array([s / out.scale * 2**8]), 0,
                       np.int32)
        right = rescale(lw, Value(lse, row, x.layout, log_sum), np.array([log_sum.scale / out.scale * 2**8]), 0,
                        np.int32)
        result = b.op("SUB", [left, right], stored, np.int32, "SubAttribute")
        tensor = rescale(lw, Value(result, x.shape, x.layout, scales=np.array([out.scale / 2**8])),
                         np.array([1 / 2**8]), out.zero_point, np.int8)
        return Value(tensor, x.shape, x.layout, out)
    inverse = QParams(1 / 255, -128)  # 1/Σ ∈ [1/N, 1]
    recip = lookup(lw, index, kept, np.reciprocal, index_params, inverse)
    wide_recip = rescale(lw, Value(recip, row, x.layout, inverse), np.array([1.0]), 0, np.int32)
    product = b.op("MUL", [wide_exp, wide_recip, b.const(np.array([0], dtype=np.int8), "shift")], stored,
                   np.int32, "MulAttribute")
    tensor = rescale(lw, Value(product, x.shape, x.layout, scales=np.array([unit.scale * inverse.scale])),
                     np.array([unit.scale * inverse.scale / out.scale]), out.zero_point, np.int8)
    return Value(tensor, x.shape, x.layout, out)
