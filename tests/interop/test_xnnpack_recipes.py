"""Every recipe that delegates to XNNPACK, built by `etbuild build`, runs in ExecuTorch's runtime
(its pybindings, which ship the XNNPACK backend, in a subprocess) with the outputs of eager
torch: a float recipe's within its verify tolerances; a quantized recipe's as close to them as
its quantized model is (the output SNR the quantize stage measured, in `layers.json`, less 6 dB
for other inputs and the program's own rounding). Its verify stage checked it there too.
Skipped without the executorch oracle."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from etbuild.build.driver import build
from etbuild.model import build_model, call_method, sample_inputs
from etbuild.quantize.metrics import snr_db
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
        expected = [call_method(recipe, model, m.name, sample) for sample in samples]
        expected = [e if isinstance(e, (tuple, list)) else [e] for e in expected]
        if recipe.quantize is None:
            for actual, wanted in zip(outputs, expected):
                for a, e in zip(actual, wanted, strict=True):
                    np.testing.assert_allclose(a, e.numpy(), rtol=recipe.verify.rtol, atol=recipe.verify.atol)
            continue
        measured = json.loads((root / "quantized" / "layers.json").read_text())["methods"][m.name]["outputs"]
        for k, output in enumerate(measured):
            got = snr_db([e[k] for e in expected], [torch.from_numpy(np.asarray(a[k])) for a in outputs])
            assert got >= output["snr_db"] - 6.0, (m.name, k, got, output["snr_db"])
