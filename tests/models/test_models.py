"""The real-model tier: each architecture of `zoo.ARCHITECTURES` built from a recipe, verified, run in ExecuTorch.

Per architecture a recipe names the zoo's factory (`factory: tests/models/zoo.py:<name>`);
`etbuild build` takes it through export → … → verify (the trimmed runtime against eager
torch), then ExecuTorch's runtime runs our `.pte` and must give our runtime's outputs.
Quantized, with the scheme its family ships with, portable and delegated to XNNPACK, each
verifies (against its converted model and the float model) and ExecuTorch's runtime passes
the same check on our `.pte`. A few small architectures run in the default suite; the rest
carry the `models` mark (`pytest -m models`). Skipped when the model's library or executorch is not installed
(`pip install -e '.[test,interop,models]'`).
"""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import numpy as np
import pytest

from etbuild.build.driver import build
from etbuild.model import sample_inputs
from etbuild.recipe import load_recipe
from etbuild.runtime import Program
from etbuild.verify.compare import compare_output, describe
from tests.conftest import requires_executorch
from tests.models.zoo import ARCHITECTURES, write_recipe

FAST = ("albert", "segformer", "tv_densenet", "tv_efficientnet_v2", "tv_vit")
"""Small enough (a few seconds each) for the default suite; between them: attention, batch norm, a constant output."""
FAST_QUANTIZED = ("tv_efficientnet_v2", "albert")
"""Quantized in the default suite: a CNN with squeeze-excite blocks (static), an encoder (dynamic)."""


def _param(name: str, fast: tuple[str, ...] = FAST) -> object:
    marks = [] if name in fast else [pytest.mark.models]
    library = ARCHITECTURES[name].library
    if importlib.util.find_spec(library) is None:
        marks.append(pytest.mark.skip(reason=f"{library} (the models extra) is not installed"))
    return pytest.param(name, marks=marks, id=name)


@requires_executorch
@pytest.mark.interop
@pytest.mark.parametrize("name", [_param(n) for n in ARCHITECTURES])
def test_builds_verifies_and_runs_in_executorch(name: str, tmp_path: Path):
    from executorch.runtime import Runtime

    recipe = load_recipe(write_recipe(name, tmp_path))
    result = build([recipe.path], tmp_path / "build", stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    out = tmp_path / "build" / recipe.name
    assert json.loads((out / "verify.json").read_text())["passed"] is True
    sample = sample_inputs(recipe, 1, 7)[0]
    pte = out / f"{recipe.name}.pte"
    ours = Program.load(pte).load_method("forward")(*[t.numpy() for t in sample])
    theirs = Runtime.get().load_program(pte).load_method("forward").execute(list(sample))
    assert len(theirs) == len(ours)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        report = compare_output([np.asarray(a)], [b.numpy()], recipe.verify.rtol, recipe.verify.atol)
        assert report["passed"], f"output {k}: ExecuTorch's runtime and ours differ: {describe(report)}"


@requires_executorch
@pytest.mark.interop
@pytest.mark.parametrize("xnnpack", [False, True], ids=["portable", "xnnpack"])
@pytest.mark.parametrize("name", [_param(n, FAST_QUANTIZED) for n in ARCHITECTURES])
def test_quantized_builds_verifies_and_passes_the_same_check_in_executorch(name: str, xnnpack: bool, tmp_path: Path):
    recipe = load_recipe(write_recipe(name, tmp_path, quantized=True, xnnpack=xnnpack))
    result = build([recipe.path], tmp_path / "build", stream=io.StringIO())
    assert result.exit_code == 0, result.failed
    report = json.loads((tmp_path / "build" / recipe.name / "verify.json").read_text())
    assert report["passed"] is True
    for where in (report, report["executorch"]):  # our trimmed runtime, then ExecuTorch's on the same .pte
        assert all(o["passed_by"] for o in where["methods"]["forward"]), where["methods"]
