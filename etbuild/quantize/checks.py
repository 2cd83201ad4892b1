"""The two checks verify makes of a quantized program, on the verify samples.

1. Against the converted torch model (`quantized/<method>.pt2`: what the program should
   compute). It passes by the first of three bounds that holds, named in `passed_by`:
   - `step`: every output element within one quantization step of it, plus the recipe's
     `verify.rtol`/`atol`. The step of an output is the scale of the `dequantize_per_tensor`
     it comes from (through reshapes); a float output (dynamic or weight-only schemes) gets
     no step.
   - `float64`: the program is about as close to the converted model as the same quantized
     computation done in float64 is (`converted64`: float ops in float64, values cast to
     float32 where they are quantized): its SNR against the converted model at most
     `FLIP_MARGIN_DB` below that one's. A value computed in another summation order can land
     on the other side of a rounding boundary and quantize one step away, and the network
     carries that to its outputs.
   - `quantization_noise`: the program's difference from the converted model is no larger
     than quantizing made, `NOISE_MARGIN_DB` aside: its SNR against the converted model at
     least the converted model's SNR against the float model minus that margin. Integer
     kernels round at every requantization and XNNPACK quantizes dynamic inputs per row where
     the converted model does per tensor; in a deep int8 network those differences compound
     layer by layer to the size of the quantization error itself, however correct the
     lowering. ExecuTorch's own XNNPACK programs differ from their converted models so
     (docs/quantization.md: ResNet 1.0 dB below the quantization error, BERT int8-dynamic
     69.5 dB against a float64 spread of 139 dB), and pass only by this bound.
   A lowering that passes a wrong axis, scale or zero point errs far beyond all three: its
   difference from the converted model swamps the quantization error.
2. Against the float model, by the recipe's gate (`quantize.accuracy`): the lowest output
   SNR, or top-1 agreement. This checks that quantizing was acceptable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch._ops import HigherOrderOperator, OpOverload
from torch.export import ExportedProgram
from torch.fx import Interpreter, Node

from etbuild.lowering import quantized_ops  # noqa: F401  (torch's quantized_decomposed ops)
from etbuild.lowering.assertions import is_assertion
from etbuild.quantize.metrics import db, gate_holds, gate_value, snr_db
from etbuild.recipe import AccuracyConfig

aten = torch.ops.aten
qd = torch.ops.quantized_decomposed
_RESHAPES = frozenset({
    aten.view.default, aten.reshape.default, aten.flatten.using_ints, aten.permute.default, aten.transpose.int,
    aten.squeeze.dim, aten.unsqueeze.default, aten.clone.default, aten.contiguous.default,
})


def output_steps(ep: ExportedProgram) -> list[float]:
    """Per output of the method, the quantization step it carries (0.0 for a float output)."""
    output = next(n for n in ep.graph.nodes if n.op == "output")
    flat = torch.utils._pytree.tree_flatten(output.args[0])[0]
    return [_step(n) if isinstance(n, Node) else 0.0 for n in flat]


def _step(node: Node) -> float:
    while node.target in _RESHAPES and isinstance(node.args[0], Node):
        node = node.args[0]
    if node.target is qd.dequantize_per_tensor.default:
        return float(node.args[1])
    return 0.0


FLIP_MARGIN_DB = 10.0
NOISE_MARGIN_DB = 6.0
"""How far (dB) the program's difference from the converted model may exceed the converted
model's own difference from the float model: twice its amplitude."""
_QUANTIZING = frozenset({
    qd.quantize_per_tensor.default, qd.quantize_per_tensor.tensor, qd.quantize_per_channel.default,
    qd.quantize_per_token.default, qd.choose_qparams.tensor, qd.choose_qparams_per_token_asymmetric.default,
})


_SET_GRAD_ENABLED = torch.ops.higher_order.wrap_with_set_grad_enabled
FLOAT32_NAMESPACES = frozenset({"llama"})
"""Operators that run on float32 values: ExecuTorch's `llama::` kernels (when its library is loaded in
the process, they replace etbuild's eager ones) take no float64 tensors."""


class Float64(Interpreter):
    """Runs a converted graph with its float ops in float64: floats are cast to float32 only
    where they are quantized (as the program's values are), and back to float64 after. The
    assertions torch.export leaves in the graph (`_assert_tensor_metadata(x, dtype=float32)`
    around a rotary table's cast) see float32 too: they check the float32 program's values (except
    one that asserts float64: a value the program holds in float64, as an int8 KV cache's scales).
    A region export wrapped in `wrap_with_set_grad_enabled` runs in float64 as well; any other
    higher-order region, and the `FLOAT32_NAMESPACES` operators, run on float32 values, as the program's do."""

    def run_node(self, n: Node) -> Any:
        result = super().run_node(n)
        return result.double() if isinstance(result, torch.Tensor) and result.is_floating_point() else result

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        if target is _SET_GRAD_ENABLED:  # a region export wrapped (a rotary table under no_grad): in float64 too
            enabled, body, *operands = args
            with torch.set_grad_enabled(enabled):
                return Float64(body).run(*operands)
        if target in _QUANTIZING or isinstance(target, HigherOrderOperator) or (isinstance(target, OpOverload) and (
                _float32_kernel(target) or is_assertion(target) and not _asserts_float64(args, kwargs))):
            args = torch.utils._pytree.tree_map(_float32, args)  # other regions run as the float32 program does
        return super().call_function(target, args, kwargs)


def _float32_kernel(target: OpOverload) -> bool:
    """A `FLOAT32_NAMESPACES` operator that writes none of its arguments (a cache update keeps writing the
    float64 copy of the cache that this run reads)."""
    return target.namespace in FLOAT32_NAMESPACES and not target._schema.is_mutable


def _asserts_float64(args: Any, kwargs: Any) -> bool:
    """Whether an `_assert_tensor_metadata(x, sizes, strides, dtype)` asks for float64."""
    return kwargs.get("dtype", args[3] if len(args) > 3 else None) is torch.float64


def _float32(x: Any) -> Any:
    return x.float() if isinstance(x, torch.Tensor) and x.dtype == torch.float64 else x


def tight(
    outputs: Outputs, steps: Sequence[float], rtol: float, atol: float
) -> list[dict[str, Any]]:
    """Per output: the largest difference from the converted model and its step, whether every
    element is within step + atol + rtol·|converted|, the SNRs the bounds compare, and the
    first bound that holds (`passed_by`; None when none does)."""
    report = []
    for k, step in enumerate(steps):
        within, worst = _within(outputs, k, step, rtol, atol)
        program = _snr(outputs.converted, outputs.actual, k)
        spread = _snr(outputs.converted, outputs.converted64, k)
        noise = _snr(outputs.reference, outputs.converted, k)
        passed_by = next((name for name, holds in (
            ("step", within), ("float64", program >= spread - FLIP_MARGIN_DB),
            ("quantization_noise", math.isfinite(noise) and program >= noise - NOISE_MARGIN_DB)) if holds), None)
        report.append({"index": k, "max_abs_error": worst, "step": step, "within_step": within,
                       "snr_vs_converted_db": db(program), "converted64_snr_vs_converted_db": db(spread),
                       "converted_snr_vs_float_db": db(noise), "passed_by": passed_by,
                       "passed": passed_by is not None})
    return report


def _within(outputs: Outputs, k: int, step: float, rtol: float, atol: float) -> tuple[bool, float]:
    """Whether output `k` is within step + atol + rtol·|converted| of the converted model on
    every sample, and the largest difference."""
    worst, within = 0.0, True
    for c, a in zip((s[k] for s in outputs.converted), (s[k] for s in outputs.actual)):
        c64, a64 = np.asarray(c, np.float64), np.asarray(a, np.float64)
        if c64.shape != a64.shape:
            within = False
            continue
        diff = np.abs(a64 - c64)
        if diff.size:
            worst = max(worst, float(np.nanmax(diff)))
            within = within and bool(np.all(diff <= step + atol + rtol * np.abs(c64)))
    return within, worst


@dataclass(frozen=True)
class Outputs:
    """Per sample, the flattened outputs of the converted model, of it in float64, of the
    program, and of the float model (`reference`)."""

    converted: list[list[np.ndarray]]
    converted64: list[list[np.ndarray]]
    actual: list[list[np.ndarray]]
    reference: list[list[np.ndarray]]


def _snr(ref: list[list[np.ndarray]], test: list[list[np.ndarray]], k: int) -> float:
    pairs = [(np.asarray(r[k]), np.asarray(t[k])) for r, t in zip(ref, test)]
    if not pairs or pairs[0][0].dtype.kind != "f" or any(r.shape != t.shape for r, t in pairs):
        return math.inf
    return snr_db([torch.from_numpy(r) for r, _ in pairs], [torch.from_numpy(t) for _, t in pairs])


def gate(
    accuracy: AccuracyConfig | None, reference: list[list[np.ndarray]], actual: list[list[np.ndarray]]
) -> dict[str, Any]:
    """The lowest output SNR and top-1 agreement against the float model, and whether the
    recipe's gate holds (True when it sets none)."""
    ref = [[torch.from_numpy(np.asarray(t)) for t in s] for s in reference]
    test = [[torch.from_numpy(np.asarray(t)) for t in s] for s in actual]
    snr = gate_value(AccuracyConfig(min_snr_db=0.0), ref, test)
    top1 = gate_value(AccuracyConfig(top1_agreement=1.0), ref, test)
    value = top1 if accuracy is not None and accuracy.top1_agreement is not None else snr
    return {"snr_db": db(snr), "top1_agreement": top1, "passed": accuracy is None or gate_holds(accuracy, value)}


def worst_layer(layers: Sequence[dict[str, Any]]) -> str:
    """`; the layer that loses the most is …` for the layer records of a report, or ``."""
    measured = [layer for layer in layers if layer["own_snr_db"] is not None]
    if not measured:
        return ""
    worst = min(measured, key=lambda layer: layer["own_snr_db"])
    return (f"; the layer that loses the most is {worst['node']} ({worst['op']} in module {worst['module']}, "
            f"{worst['own_snr_db']} dB SNR of its own)")
