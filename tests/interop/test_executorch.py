"""Two-way interop with ExecuTorch (the oracle) over every recipe: our `.pte` in its runtime
(against eager torch), its `.pte` in ours (against its own runtime on the same file).

Skipped when the `executorch` package is not installed; `.ci/run` installs it. Samples run
in order on one loaded method, so state carried across calls is compared too.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils._pytree import tree_flatten

from etbuild.build.driver import build
from etbuild.model import build_model, method_callable, sample_inputs
from etbuild.recipe import Recipe, discover_recipes, load_recipe
from etbuild.runtime import Program
from etbuild.verify.oracle import executorch_build
from tests.conftest import HAS_EXECUTORCH

pytestmark = [pytest.mark.interop, pytest.mark.skipif(not HAS_EXECUTORCH, reason="executorch is not installed")]

RECIPES = [  # quantized recipes: tests/interop/test_quantized.py
    p for p in discover_recipes(Path(__file__).resolve().parents[2] / "recipes") if load_recipe(p).quantize is None
]
CASES = [(p, m.name) for p in RECIPES for m in load_recipe(p).model.methods]
IDS = [f"{p.stem}.{m}" for p, m in CASES]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("build")
    result = build(RECIPES, root, stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    return root


def _flat(outputs) -> list[np.ndarray]:
    return [np.asarray(t.detach().numpy() if isinstance(t, torch.Tensor) else t) for t in tree_flatten(outputs)[0]]


def _assert_same(actual: list, expected: list, recipe: Recipe) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        rtol, atol = max(recipe.verify.rtol, 1e-5), max(recipe.verify.atol, 1e-6)
        np.testing.assert_allclose(np.asarray(a), e, rtol=rtol, atol=atol)


@pytest.mark.parametrize(("recipe_path", "method"), CASES, ids=IDS)
def test_our_pte_runs_in_executorch(built, recipe_path, method):
    from executorch.runtime import Runtime

    recipe = load_recipe(recipe_path)
    theirs = Runtime.get().load_program(built / recipe.name / f"{recipe.name}.pte").load_method(method)
    eager = method_callable(build_model(recipe), method, recipe)
    for sample in sample_inputs(recipe, 3, 7, method):
        with torch.no_grad():
            expected = _flat(eager(*sample))
        _assert_same(_flat(theirs.execute(list(sample))), expected, recipe)


@pytest.mark.parametrize(("recipe_path", "method"), CASES, ids=IDS)
def test_executorch_pte_runs_in_ours(tmp_path, recipe_path, method):
    from executorch.runtime import Runtime

    recipe = load_recipe(recipe_path)
    pte = executorch_build(recipe, tmp_path / "theirs.pte").path
    ours = Program.load(pte).load_method(method)
    theirs = Runtime.get().load_program(pte).load_method(method)
    for sample in sample_inputs(recipe, 3, 7, method):
        expected = _flat(theirs.execute(list(sample)))
        _assert_same(ours(*[t.numpy() for t in sample]), expected, recipe)


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
