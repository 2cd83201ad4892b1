"""The transformers releases `model.llm` builds with: outside `SUPPORTED`, loading the recipe is a RecipeError."""

from __future__ import annotations

import pytest

from etbuild.errors import RecipeError
from etbuild.recipe import llm_versions as versions
from etbuild.recipe import load_recipe
from tests.llm_support import TINY, write_llm_recipe


@pytest.mark.parametrize(("version", "supported"), [
    (versions.OLDEST, True), ("5.0.0", True), ("5.23.0", True), ("5.24.0", True), ("5.24.3", True),
    ("4.57.6", False), ("4.46.0", False), ("5.25.0", False), ("5.25.0.dev0", False), ("6.0.0", False),
])
def test_the_supported_range(version: str, supported: bool) -> None:
    assert (versions.problem(version) is None) == supported


def test_the_installed_release_is_supported() -> None:
    assert versions.problem(versions.installed()) is None


@pytest.mark.parametrize(("version", "said"), [
    ("5.25.0", "5.25.0 is installed"),
    (None, "it is not installed"),
])
def test_a_release_outside_the_range_is_a_recipe_error_naming_it(tmp_path, monkeypatch, version, said) -> None:
    path = write_llm_recipe(tmp_path, "tiny", {"config": TINY})
    monkeypatch.setattr(versions, "installed", lambda: version)
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:") and "model.llm: expected transformers" in message
    assert f"{versions.OLDEST} … {versions.NEWEST}.x" in message and said in message
