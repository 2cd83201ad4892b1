"""Two-way interop with ExecuTorch (the oracle): our `.pte` in its runtime, its `.pte` in ours.

Skipped when the `executorch` package is not installed; `.ci/run` installs it.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.build import build
from etbuild.model import build_model, sample_inputs
from etbuild.recipe import discover_recipes, load_recipe
from etbuild.runtime import Program
from tests.conftest import HAS_EXECUTORCH, executorch_pte

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]

RECIPES = discover_recipes(Path(__file__).resolve().parents[2] / "recipes")
RECIPE_IDS = [p.stem for p in RECIPES]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("build")
    result = build(RECIPES, root, stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    return root


def _eager(recipe, samples):
    model = build_model(recipe)
    with torch.no_grad():
        return [model(*s) for s in samples]


@pytest.mark.parametrize("recipe_path", RECIPES, ids=RECIPE_IDS)
def test_our_pte_runs_in_executorch(built, recipe_path):
    from executorch.runtime import Runtime

    recipe = load_recipe(recipe_path)
    method = Runtime.get().load_program(built / recipe.name / f"{recipe.name}.pte").load_method("forward")
    samples = sample_inputs(recipe, 3, seed=7)
    for sample, expected in zip(samples, _eager(recipe, samples)):
        (out,) = method.execute(list(sample))
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("recipe_path", RECIPES, ids=RECIPE_IDS)
def test_executorch_pte_runs_in_ours(tmp_path, recipe_path):
    recipe = load_recipe(recipe_path)
    samples = sample_inputs(recipe, 3, seed=7)
    pte = executorch_pte(build_model(recipe), samples[0], tmp_path / "theirs.pte")
    method = Program.load(pte).load_method("forward")
    for sample, expected in zip(samples, _eager(recipe, samples)):
        (out,) = method(*[t.numpy() for t in sample])
        np.testing.assert_allclose(out, expected.numpy(), rtol=1e-4, atol=1e-5)


def test_executorch_pte_works_with_inspect_and_run(tmp_path, small_mlp, executorch_small_mlp_pte):
    from etbuild.cli import main
    from etbuild.runtime.inspect import describe

    d = describe(executorch_small_mlp_pte)
    ops = d["methods"][0]["operators"]
    assert ops == {"aten::addmm.out": 3, "aten::permute_copy.out": 3, "aten::relu.out": 2}
    model, (x,) = small_mlp
    np.savez(tmp_path / "in.npz", in0=x.numpy())
    assert main(["run", str(executorch_small_mlp_pte), "--inputs", str(tmp_path / "in.npz"),
                 "--out", str(tmp_path / "out.npz"), "--calls", "2"]) == 0
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_allclose(out["call1_out0"], model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
