"""ExecuTorch's own build of a recipe's model: the oracle for interop tests and benchmarks.

`executorch` is an optional extra (`pip install -e '.[interop]'`); it is imported only
when these functions are called, never by etbuild's build or runtime.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from etbuild.model import build_model, dynamic_shapes, example_inputs
from etbuild.recipe import Recipe
from etbuild.stages.export import MethodModule


@dataclass(frozen=True)
class OracleBuild:
    """An ExecuTorch-built `.pte` and the seconds each step of its flow took."""

    path: Path
    export_s: float
    to_edge_s: float
    to_executorch_s: float

    @property
    def total_s(self) -> float:
        return self.export_s + self.to_edge_s + self.to_executorch_s


def export_methods(recipe: Recipe) -> dict[str, torch.export.ExportedProgram]:
    """torch.export of every method of the recipe's model, as ExecuTorch's flow wants them."""
    model = build_model(recipe)
    exported = {}
    for m in recipe.model.methods:
        module = model if m.name == "forward" else MethodModule(model, m.name)
        shapes = dynamic_shapes(recipe, m.name)
        if shapes is not None and m.name != "forward":
            shapes = (shapes,)  # MethodModule.forward takes *args
        exported[m.name] = torch.export.export(module, example_inputs(recipe, m.name), dynamic_shapes=shapes)
    return exported


def executorch_build(recipe: Recipe, path: Path, partitioner: Any = None) -> OracleBuild:
    """export → to_edge (or to_edge_transform_and_lower with a partitioner) → to_executorch."""
    from executorch.exir import to_edge, to_edge_transform_and_lower

    t0 = time.perf_counter()
    exported = export_methods(recipe)
    t1 = time.perf_counter()
    if partitioner is None:
        edge = to_edge(exported)
    else:
        edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
    t2 = time.perf_counter()
    program = edge.to_executorch()
    t3 = time.perf_counter()
    path.write_bytes(program.buffer)
    return OracleBuild(path, t1 - t0, t2 - t1, t3 - t2)


def xnnpack_partitioner() -> Any:
    """ExecuTorch's XNNPACK partitioner."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return XnnpackPartitioner()
