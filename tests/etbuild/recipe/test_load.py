"""etbuild.recipe: load_recipe on the repository's recipes, and discover_recipes."""

from __future__ import annotations

from pathlib import Path

from etbuild.recipe import (
    NOT_SUPPORTED_YET,
    DimRange,
    InputSpec,
    MemoryConfig,
    MethodSpec,
    VerifyConfig,
    discover_recipes,
    load_recipe,
)
from tests.etbuild.recipe.support import GOOD, REPO_RECIPES, write


def test_repo_mlp_recipe() -> None:
    recipe = load_recipe(REPO_RECIPES / "mlp.yaml")
    assert recipe.name == "mlp"
    assert recipe.model.factory == "etbuild.zoo:mlp"
    assert recipe.model.kwargs["sizes"] == (784, 512, 256, 10)
    assert recipe.model.inputs == (InputSpec(shape=(1, 784), dtype="float32"),)
    assert recipe.memory == MemoryConfig(planner="greedy", alignment=16)
    assert recipe.verify == VerifyConfig(samples=4, rtol=1e-4, atol=1e-5, seed=1)
    assert recipe.sources == (REPO_RECIPES / "mlp.yaml",)



def test_discover_recipes_skips_bases() -> None:
    for name in (
        "b.yaml",
        "a.yaml",
        "base/m.yaml",
        "group/c.yaml",
        "group/base/n.yaml",
        "notes.txt",
    ):
        write(name, "{}\n")
    assert discover_recipes() == [
        Path("recipes/a.yaml"),
        Path("recipes/b.yaml"),
        Path("recipes/group/c.yaml"),
    ]
    repo = discover_recipes(REPO_RECIPES)
    assert {REPO_RECIPES / "mlp.yaml", REPO_RECIPES / "mlp-batch32.yaml"} <= set(repo)
    assert repo == sorted(repo)



def test_every_section_is_supported() -> None:
    """quantize and backends have their stages: nothing is refused as not supported yet."""
    assert NOT_SUPPORTED_YET == ()
    recipe = load_recipe(write("x.yaml", GOOD + "backends: [{name: xnnpack}]\n"))
    assert [b.name for b in recipe.backends] == ["xnnpack"]



def test_the_repo_dynamic_and_two_method_recipes() -> None:
    dynamic = load_recipe(REPO_RECIPES / "mlp-dynamic.yaml")
    assert dynamic.model.methods == (
        MethodSpec(
            "forward",
            (InputSpec(shape=(8, 784), dtype="float32"),),
            {0: {0: DimRange(min=1, max=64)}},
        ),
    )
    two = load_recipe(REPO_RECIPES / "two-method.yaml")
    assert [method.name for method in two.model.methods] == ["decode", "encode"]
