"""etbuild.recipe: reading YAML: syntax, duplicate keys, numbers, and the bounds on hostile files."""

from __future__ import annotations

import pytest

from etbuild.errors import RecipeError
from etbuild.recipe import (
    load_recipe,
)
from tests.etbuild.recipe.support import GOOD, REPO_RECIPES, error_of, write


def test_floats_without_a_dot_are_numbers() -> None:
    recipe = load_recipe(write("tol.yaml", GOOD + "verify: {rtol: 1e-3, atol: 2E-6}\n"))
    assert (recipe.verify.rtol, recipe.verify.atol) == (1e-3, 2e-6)



def test_yaml_syntax_error() -> None:
    assert error_of("name: x\nmodel: {factory: etbuild.zoo:mlp\n") == (
        "recipes/x.yaml:3:1: invalid YAML: expected ',' or '}', but got '<stream end>'"
        " (while parsing a flow mapping)"
    )



def test_duplicate_key() -> None:
    assert error_of(GOOD + "verify: {samples: 2}\nverify: {samples: 3}\n") == (
        "recipes/x.yaml:6:1: verify: duplicate key 'verify' (first set at recipes/x.yaml:5:1)"
    )



def test_top_level_is_not_a_mapping() -> None:
    assert error_of("- name: x\n") == (
        "recipes/x.yaml:1:1: expected a mapping of recipe sections; got a list"
    )



def test_missing_recipe_file() -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe("recipes/absent.yaml")
    assert str(info.value) == "recipes/absent.yaml: cannot read recipe: No such file or directory"



def test_alias_bomb_is_refused() -> None:
    """Expanded, the bomb is 10^9 values (gigabytes, minutes): loading stops at the cap."""
    path = REPO_RECIPES / "errors" / "alias-bomb.yaml"
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert str(info.value) == (
        f"{path}:8:8: expected at most 100000 values once YAML aliases are expanded; got more"
    )



@pytest.mark.parametrize("opening, closing", [("[", "]"), ("{a: ", "}")])
def test_deep_nesting_is_a_recipe_error(opening: str, closing: str) -> None:
    kwargs = opening * 5000 + closing * 5000
    assert error_of(GOOD.replace("  factory:", f"  kwargs: {{x: {kwargs}}}\n  factory:")) == (
        f"recipes/x.yaml:3:{15 + 61 * len(opening)}: expected lists and mappings nested at most 64 deep;"
        " got deeper"
    )



def test_deep_nesting_through_aliases_is_a_recipe_error() -> None:
    chain = "\n".join(f"  a{i}: &a{i} [*a{i - 1}]" for i in range(1, 200))
    assert error_of(GOOD + f"verify:\n  a0: &a0 [1]\n{chain}\n") == (
        "recipes/x.yaml:6:7: expected lists and mappings nested at most 64 deep; got deeper"
    )



def test_oversized_file() -> None:
    assert error_of(GOOD + "#" * (1 << 20)) == (
        f"recipes/x.yaml: expected a recipe of at most 1048576 bytes; got {len(GOOD) - 1 + (1 << 20)}"
    )
