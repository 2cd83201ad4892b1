"""Test support: programs lowered by ExecuTorch's XNNPACK partitioner (the oracle), run three ways.

`lower(module, inputs, quant=...)` exports a module, optionally quantizes it with ExecuTorch's
XNNPACKQuantizer through torchao's pt2e flow (static int8 per channel, or dynamic int8), and
lowers it with `to_edge_transform_and_lower(..., partitioner=[XnnpackPartitioner()])`.
`compare(...)` runs the program in our runtime and in ExecuTorch's, and the module in torch.
Only tests import this; etbuild never imports executorch or the quantizer.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from etbuild.backends.xnnpack.format.blob import read_blob
from etbuild.model import build_model, dynamic_shapes, example_inputs
from etbuild.recipe import Recipe
from etbuild.runtime import Program
from etbuild.runtime.format.pte import read_program, segment_bytes
from etbuild.stages.export import MethodModule

QUANT_SCHEMES = (None, "static", "dynamic")


@dataclass
class Lowered:
    """An oracle-lowered program: its bytes, the torch reference and the delegate node counts."""

    pte: bytes
    reference: torch.nn.Module
    nodes: collections.Counter
    operators: list[str]  # what stayed outside the delegates

    def save(self, path: Path) -> Path:
        path.write_bytes(self.pte)
        return path


def quantize(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], scheme: str,
             dynamic_shapes: Any = None) -> torch.nn.Module:
    """The pt2e-converted module: static int8 (per-channel weights) or dynamic int8 activations."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=scheme == "dynamic")
    graph = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes).module()
    prepared = prepare_pt2e(graph, XNNPACKQuantizer().set_global(config))
    generator = torch.Generator().manual_seed(1)
    for _ in range(4):  # calibration on inputs like the examples
        prepared(*[torch.randn(t.shape, generator=generator) * t.std().clamp(min=1e-3) + t.mean() for t in inputs])
    prepared(*inputs)
    return convert_pt2e(prepared)


def lower(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], quant: str | None = None,
          dynamic_shapes: Any = None) -> Lowered:
    """The module lowered to XNNPACK by ExecuTorch (after quantization when quant is set)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    module = module.eval()
    reference = quantize(module, inputs, quant, dynamic_shapes) if quant else module
    exported = torch.export.export(reference, inputs, dynamic_shapes=dynamic_shapes)
    program = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]).to_executorch()
    data = program.buffer
    return Lowered(data, reference, *delegated(data))


def lower_recipe(recipe: Recipe, quant: str | None = None) -> bytes:
    """Every method of a recipe's model lowered to XNNPACK by ExecuTorch, as one program."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    model = build_model(recipe).eval()
    exported = {}
    for m in recipe.model.methods:
        module = model if m.name == "forward" else MethodModule(model, m.name)
        shapes = dynamic_shapes(recipe, m.name)
        if shapes is not None and m.name != "forward":
            shapes = (shapes,)  # MethodModule.forward takes *args
        inputs = example_inputs(recipe, m.name)
        if quant:
            module = quantize(module, inputs, quant, shapes)
        exported[m.name] = torch.export.export(module, inputs, dynamic_shapes=shapes)
    return to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]).to_executorch().buffer


def delegated(data: bytes) -> tuple[collections.Counter, list[str]]:
    """The node kinds inside every XNNPACK delegate of a program, and the operators left outside."""
    program, header = read_program(data)
    nodes: collections.Counter = collections.Counter()
    operators = []
    for plan in program.execution_plan:
        operators += [f"{op.name}.{op.overload}" for op in plan.operators]
        for d in plan.delegates:
            graph = read_blob(segment_bytes(data, program, header, d.processed.index)).graph
            nodes.update(type(n.node).__name__ for n in graph.xnodes)
    return nodes, operators


def run_executorch(pte: bytes, inputs: list[torch.Tensor], method: str = "forward") -> list[np.ndarray]:
    from executorch.runtime import Runtime

    outputs = Runtime.get().load_program(pte).load_method(method).execute(inputs)
    return [np.asarray(o.detach().numpy() if isinstance(o, torch.Tensor) else o) for o in outputs]


def run_ours(pte: bytes, inputs: list[torch.Tensor], method: str = "forward") -> list[np.ndarray]:
    return Program(pte).load_method(method)(*[t.numpy() for t in inputs])


def run_torch(module: torch.nn.Module, inputs: list[torch.Tensor]) -> list[np.ndarray]:
    with torch.no_grad():
        out = module(*inputs)
    outs = out if isinstance(out, (tuple, list)) else [out]
    return [o.detach().numpy() for o in outs]


def quant_step(lowered: Lowered) -> float:
    """The largest output quantization step of a quantized program's delegates (0 for float)."""
    program, header = read_program(lowered.pte)
    step = 0.0
    for plan in program.execution_plan:
        for d in plan.delegates:
            graph = read_blob(segment_bytes(lowered.pte, program, header, d.processed.index)).graph
            for xv in graph.xvalues:
                params = getattr(xv.value, "quant_params", None)
                step = max(step, getattr(params, "scale", 0.0) or 0.0)
    return step
