"""Export stage: the recipe's model → one `torch.export` ExportedProgram per method.

Takes: a Recipe (model factory, kwargs, weights, and per method its example inputs and dynamic
dims). Gives: `export/<method>.pt2`, the ATen-dialect ExportedProgram of `model.<method>(*example_inputs)`,
saved with `torch.export.save` (and handed to lower in this process: `etbuild.stages.handoff`).
Before tracing, each method runs once eagerly on a model of its own (`etbuild.model.check_runs`):
inputs the model cannot take are a RecipeError naming the input here, not a traceback in verify.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.export._trace  # noqa: F401  (the tracer and torch._dynamo, ~1 s: imported with the stage, not inside its clock)
from torch.export import ExportedProgram

from etbuild.errors import StageError
from etbuild.lowering.mutated_constants import constants_to_state, snapshot_tensors
from etbuild.model import build_model, check_runs, dynamic_shapes, example_inputs, method_callable
from etbuild.recipe import Recipe
from etbuild.stages import handoff


class MethodModule(torch.nn.Module):
    """Exposes one method of a model as `forward`, so torch.export can trace it."""

    def __init__(self, model: torch.nn.Module, method: str) -> None:
        super().__init__()
        self.model = model
        self.method = method

    def forward(self, *args: Any) -> Any:
        return getattr(self.model, self.method)(*args)


def traceable(model: torch.nn.Module, method: str, dynamic: Any) -> tuple[torch.nn.Module, Any]:
    """The module whose forward is `method`, and the `dynamic_shapes` torch.export wants for it."""
    if method == "forward":
        return model, dynamic
    # MethodModule.forward(*args): torch.export sees one argument, the tuple of inputs
    return MethodModule(model, method), None if dynamic is None else (dynamic,)


def export_method(recipe: Recipe, model: torch.nn.Module, method: str) -> ExportedProgram:
    """Export one method of the model with its example inputs and dynamic dims."""
    method_callable(model, method, recipe)  # a clear error when the model lacks the method
    module, dynamic = traceable(model, method, dynamic_shapes(recipe, method))
    initial = snapshot_tensors(model)
    try:
        ep = torch.export.export(module, example_inputs(recipe, method), dynamic_shapes=dynamic, strict=False)
    except Exception as exc:  # torch raises many types; the user needs the message
        where = recipe.where("model.factory")
        raise StageError(f"torch.export of {method} failed for {where}: {type(exc).__name__}: {exc}") from exc
    return constants_to_state(ep, initial)


def run_export(recipe: Recipe, outs: Mapping[str, Path]) -> None:
    """Run the model once (`check_runs`), then export every method and save each atomically."""
    handoff.clear()
    check_runs(recipe)
    model = build_model(recipe)
    for method, out in outs.items():
        handoff.save(export_method(recipe, model, method), out)  # lower, next in this process, takes it
