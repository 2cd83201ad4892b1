"""Every recipe that delegates to XNNPACK, built by `etbuild build`, runs in ExecuTorch's runtime
(its pybindings, which ship the XNNPACK backend, in a subprocess) with the outputs of eager
torch within the recipe's verify tolerances, and its verify stage checked it there too.
Skipped without the executorch oracle."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from etbuild.build.driver import build
from etbuild.model import build_model, call_method, sample_inputs
from etbuild.recipe import discover_recipes, load_recipe
from etbuild.verify.oracle import run_samples_in_executorch
from etbuild.verify.stage import run_samples
from tests.conftest import HAS_EXECUTORCH

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
DELEGATING = [p for p in discover_recipes(RECIPES) if any(b.name == "xnnpack" for b in load_recipe(p).backends)]
FAST = {"mlp-xnnpack"}


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem, marks=() if p.stem in FAST else pytest.mark.slow)
                                  for p in DELEGATING])
def test_delegated_recipe_runs_in_executorch_like_eager_torch(path, tmp_path):
    recipe = load_recipe(path)
    result = build([path], tmp_path, stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    root = tmp_path / recipe.name
    report = json.loads((root / "verify.json").read_text())
    assert report["passed"] and report["executorch"]["passed"]
    partition = json.loads((root / "partition.json").read_text())
    assert all(m["delegates"] >= 1 for m in partition["methods"].values())
    model = build_model(recipe)
    for m in recipe.model.methods:
        samples = sample_inputs(recipe, 2, 7, m.name)  # not verify's samples (its seed is 0 unless set)
        outputs = run_samples(run_samples_in_executorch, root / f"{recipe.name}.pte", samples, m.name)
        for sample, actual in zip(samples, outputs):
            expected = call_method(recipe, model, m.name, sample)
            expected = expected if isinstance(expected, (tuple, list)) else [expected]
            for a, e in zip(actual, expected, strict=True):
                np.testing.assert_allclose(a, e.numpy(), rtol=recipe.verify.rtol, atol=recipe.verify.atol)
