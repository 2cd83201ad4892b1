"""Verify builds the eager model it judges once per run, and every comparison runs a copy of that one."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import etbuild.model
from etbuild.build.driver import build
from etbuild.build.layout import Artifacts
from etbuild.build.stage_table import stage_calls
from etbuild.recipe import load_recipe
from tests.llm_support import TINY, write_llm_recipe

ROOT = Path(__file__).resolve().parents[3]


def _verify_builds(recipe_path: Path, root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, dict]:
    """Build the recipe up to verify, then run its verify stage counting the models built."""
    result = build([recipe_path], root, stream=io.StringIO())
    assert not result.failed, result.failed
    recipe = load_recipe(recipe_path)
    call = stage_calls(recipe, Artifacts.of(recipe, root))["verify"]
    calls = []
    real = etbuild.model._call_factory
    monkeypatch.setattr(etbuild.model, "_call_factory", lambda *a, **k: calls.append(1) or real(*a, **k))
    call.run()
    return len(calls), json.loads((root / recipe.name / "verify.json").read_text())


def test_two_methods_and_a_bundle_take_one_build(tmp_path, monkeypatch):
    recipe = tmp_path / "two.yaml"
    recipe.write_text((ROOT / "recipes" / "two-method.yaml").read_text().replace("  samples: 4", "  samples: 2\n"
                                                                                   "  bundle: true"))
    builds, report = _verify_builds(recipe, tmp_path / "build", monkeypatch)
    assert report["passed"] and set(report["methods"]) == {"encode", "decode"} and "bundle" in report
    assert builds == 1


def test_a_language_model_s_token_check_takes_the_same_build(tmp_path, monkeypatch):
    path = write_llm_recipe(tmp_path, "tiny", {"config": TINY, "max_context": 32, "max_prefill": 4},
                            verify={"samples": 1, "tokens": 4})
    builds, report = _verify_builds(path, tmp_path / "build", monkeypatch)
    assert report["passed"] and report["llm"]["matched"] == 4
    assert builds == 1
