"""etbuild.recipe: key paths and the file:line:column places errors name."""

from __future__ import annotations

from etbuild.recipe import (
    format_key_path,
    load_recipe,
    parse_key_path,
)
from tests.etbuild.recipe.support import GOOD, write


def test_where_points_at_keys() -> None:
    recipe = load_recipe(write("good.yaml", GOOD))
    assert recipe.where("model.factory") == "recipes/good.yaml:3:3"
    assert recipe.where(("model", "inputs", 0, "dtype")) == "recipes/good.yaml:4:28"
    assert recipe.where("memory.planner") == "recipes/good.yaml:1:1"  # absent: the file's root
    assert (
        str(recipe.error("model.factory", "boom")) == "recipes/good.yaml:3:3: model.factory: boom"
    )



def test_key_paths_round_trip() -> None:
    path = ("model", "inputs", 0, "shape", 1)
    assert format_key_path(path) == "model.inputs[0].shape[1]"
    assert parse_key_path("model.inputs[0].shape[1]") == path
