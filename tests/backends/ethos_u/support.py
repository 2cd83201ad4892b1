"""Helpers for the Ethos-U and TOSA tests: a model quantized in the NPU's mode, lowered with a backend,
its delegates' processed blobs, and the int8 values the quantized torch model gives at a delegate's edges."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from etbuild.backends.aot import Processed
from etbuild.lowering.partition_report import MethodPartitions
from etbuild.quantize import flow
from etbuild.quantize.modules import SchemeMap
from etbuild.quantize.schemes import MODES
from etbuild.recipe import BackendConfig
from etbuild.stages.lower import lower

qd = torch.ops.quantized_decomposed


@dataclass(frozen=True)
class Lowered:
    converted: torch.fx.GraphModule
    exported: torch.export.ExportedProgram
    processed: list[Processed]
    report: MethodPartitions


def quantized(model: torch.nn.Module, x: tuple[torch.Tensor, ...]) -> tuple[torch.fx.GraphModule, Any]:
    """The model converted in the NPU mode (calibrated on x and a shifted copy), and re-exported."""
    torch.manual_seed(0)
    ep = torch.export.export(model.eval(), x, strict=False)
    plan = flow.Plan(SchemeMap("int8-static"), True, mode=MODES["npu-int8"])
    converted = flow.quantize(ep, plan, [x, tuple(t * 0.8 + 0.1 for t in x)])
    return converted, flow.reexport(converted, x, None)


def lowered(model: torch.nn.Module, x: tuple[torch.Tensor, ...], backend: str, **options: Any) -> Lowered:
    converted, exported = quantized(model, x)
    found: list[Processed] = []

    def after(step: Any, form: Any) -> None:
        if step.name == "partition":
            found.extend(m.processed for _, m in form.methods[0].exported.graph_module.named_children())

    result = lower({"forward": exported}, after, backends=[BackendConfig(backend, options)])
    return Lowered(converted, exported, found, result.report.methods[0])


def int8_edges(converted: torch.fx.GraphModule, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The quantized model's int8 input (its first quantize) and int8 output (its last dequantize's input)."""
    quants = [n for n in converted.graph.nodes if n.target is qd.quantize_per_tensor.default]
    scale, zero = quants[0].args[1:3]
    q_in = torch.clamp(torch.round(x / scale) + zero, -128, 127).to(torch.int8).numpy()
    scale, zero = output_params(converted)
    q_out = torch.clamp(torch.round(converted(x).detach() / scale) + zero, -128, 127).to(torch.int8).numpy()
    return q_in, q_out


def output_params(converted: torch.fx.GraphModule) -> tuple[float, int]:
    """The (scale, zero point) of the dequantize that gives the model's output."""
    (output,) = [n for n in converted.graph.nodes if n.op == "output"]
    produced = output.args[0][0] if isinstance(output.args[0], (tuple, list)) else output.args[0]
    assert produced.target is qd.dequantize_per_tensor.default
    return produced.args[1], produced.args[2]


def only_edges_outside(found: Lowered) -> bool:
    """Whether the CPU keeps only the model input's quantize and the output's dequantize."""
    return sorted(o.operator.split("::")[1] for o in found.report.outside) == [
        "dequantize_per_tensor", "quantize_per_tensor"]


def steps_from_quantized(model: torch.nn.Module, shape: tuple[int, ...]) -> int:
    """The model lowered to one TOSA delegate (asserted, with only the edges on the CPU) and run in the reference
    model on a seeded input: the most int8 steps its output is from the quantized torch model's."""
    from etbuild.backends.tosa.runtime.reference import ReferenceGraph

    torch.manual_seed(3)
    x = torch.randn(shape)
    found = lowered(model, (x,), "tosa")
    assert len(found.processed) == 1, [(o.node, o.reason) for o in found.report.outside]
    assert only_edges_outside(found), found.report.outside
    q_in, q_out = int8_edges(found.converted, x)
    (out,) = ReferenceGraph(found.processed[0].blob).run([q_in])
    assert out.shape == q_out.shape
    return int(np.abs(out.astype(np.int32) - q_out).max())
