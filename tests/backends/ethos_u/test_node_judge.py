"""etbuild.verify.tosa_nodes: every int8 value of a TOSA graph within one step of the quantized torch model's call
fed the same int8 inputs; a lowering off by a rescale factor is caught and named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

RECIPE = """\
name: tiny-kws-u55
model:
  factory: etbuild.zoo:kws_cnn
  kwargs: {features: 8, channels: [8, 8], num_classes: 3}
  inputs: [{shape: [1, 8, 20], dtype: float32}]
quantize: {scheme: int8-static}
backends: [{name: ethos-u, options: {target: ethos-u55-128}}]
verify: {samples: 2}
"""


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> tuple[object, torch.export.ExportedProgram]:
    pytest.importorskip("tosa_reference_model")
    pytest.importorskip("tosa_serializer")
    from etbuild.model import build_model
    from etbuild.recipe import load_recipe
    from tests.backends.ethos_u.support import quantized

    path = tmp_path_factory.mktemp("judge") / "tiny.yaml"
    path.write_text(RECIPE)
    recipe = load_recipe(path)
    torch.manual_seed(0)
    _, exported = quantized(build_model(recipe), (torch.randn(1, 8, 20),))
    return recipe, exported


def test_every_int8_value_is_within_one_step_of_torch_fed_the_same_inputs(case) -> None:
    from etbuild.verify.tosa_nodes import failures, judge_method

    recipe, exported = case
    (part,) = judge_method(recipe, "forward", exported)
    assert part["partition"] == 0 and part["values"] >= 4 and part["elements"] > 2 * 8 * 20
    assert part["max_steps"] <= 1 and part["passed"]
    assert failures({"methods": {"forward": [part]}}) == []


def test_a_lowering_off_by_a_rescale_factor_fails_naming_the_partition(case, monkeypatch) -> None:
    from etbuild.backends.tosa import rescale
    from etbuild.backends.tosa.aot import compute
    from etbuild.verify.tosa_nodes import failures, judge_method

    recipe, exported = case
    monkeypatch.setattr(compute, "multipliers_shifts", lambda f: rescale.multipliers_shifts(np.asarray(f) * 1.25))
    (part,) = judge_method(recipe, "forward", exported)
    assert part["max_steps"] > 1 and not part["passed"]
    (line,) = failures({"methods": {"forward": [part]}})
    assert line.startswith(f"forward partition 0: a TOSA graph value {part['max_steps']} steps from the quantized "
                           "torch model's call fed the same int8 inputs")


def test_a_graph_the_judge_cannot_evaluate_is_reported_not_judged(case, tmp_path: Path) -> None:
    from etbuild.verify.tosa_nodes import judge_recipe

    recipe, _ = case
    report = judge_recipe(recipe, {"forward": tmp_path / "absent.pt2"})
    assert report["passed"] and "skipped" in report and "methods" not in report
