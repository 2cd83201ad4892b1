"""Export stage: the recipe's model → `torch.export` ExportedProgram (`export.pt2`).

Takes: a Recipe (model factory, kwargs, weights, example inputs). Gives: the ATen-dialect
ExportedProgram of `model(*example_inputs)`, saved with `torch.export.save`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.export import ExportedProgram

from etbuild.errors import StageError
from etbuild.fsutil import atomic_path
from etbuild.model import build_model, example_inputs
from etbuild.recipe import Recipe


def export_model(recipe: Recipe) -> ExportedProgram:
    """Build the recipe's model and export it with its example inputs."""
    model = build_model(recipe)
    inputs = example_inputs(recipe)
    try:
        return torch.export.export(model, inputs, strict=False)
    except Exception as exc:  # torch raises many types; the user needs the message
        where = recipe.where("model.factory")
        raise StageError(f"torch.export failed for {where}: {type(exc).__name__}: {exc}") from exc


def run_export(recipe: Recipe, out: Path) -> None:
    """Export and save to `out` atomically."""
    ep = export_model(recipe)
    with atomic_path(out) as tmp:
        torch.export.save(ep, str(tmp))
