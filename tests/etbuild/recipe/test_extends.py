"""etbuild.recipe: `extends:` chains: merging, sources, cycles, missing bases, errors inside a base."""

from __future__ import annotations

from pathlib import Path

import pytest

from etbuild.errors import RecipeError
from etbuild.recipe import (
    InputSpec,
    ModuleOverride,
    VerifyConfig,
    load_recipe,
)
from tests.etbuild.recipe.support import GOOD, METHODS, REPO_RECIPES, error_of, write


def test_repo_mlp_batch32_extends_mlp() -> None:
    recipe = load_recipe(REPO_RECIPES / "mlp-batch32.yaml")
    base = load_recipe(REPO_RECIPES / "mlp.yaml")
    assert recipe.name == "mlp-batch32"
    assert recipe.model.inputs == (InputSpec(shape=(32, 784), dtype="float32"),)
    assert recipe.model.kwargs == base.model.kwargs
    assert (recipe.memory, recipe.verify) == (base.memory, base.verify)
    assert recipe.sources == (REPO_RECIPES / "mlp-batch32.yaml", REPO_RECIPES / "mlp.yaml")



def test_extends_merges_mappings_and_replaces_lists_and_scalars() -> None:
    write(
        "base/common.yaml",
        """
        model:
          factory: etbuild.zoo:mlp
          kwargs: {sizes: [4, 8, 2], extra: {a: 1, b: 2}}
          inputs: [{shape: [1, 4], dtype: float32}, {shape: [1], dtype: int64}]
          seed: 3
        verify: {samples: 2, atol: 0.5}
        """,
    )
    path = write(
        "child.yaml",
        """
        extends: base/common.yaml
        name: child
        model:
          kwargs: {sizes: [4, 2], extra: {b: 3}}
          inputs: [{shape: [2, 4], dtype: float32}]
        verify: {atol: 0.25}
        """,
    )
    recipe = load_recipe(path)
    assert recipe.section("model")["kwargs"] == {"sizes": [4, 2], "extra": {"a": 1, "b": 3}}
    assert recipe.model.inputs == (InputSpec(shape=(2, 4), dtype="float32"),)
    assert recipe.model.seed == 3
    assert recipe.verify == VerifyConfig(samples=2, rtol=1e-4, atol=0.25, seed=1)
    assert recipe.where("model.seed") == "recipes/base/common.yaml:5:3"
    assert recipe.where("model.inputs[0].shape") == "recipes/child.yaml:5:13"
    assert recipe.where("verify.rtol") == "recipes/child.yaml:6:1"  # defaulted: its parent



def test_extends_chain_lists_every_source() -> None:
    write("base/a.yaml", "verify: {samples: 7}\n")
    write("base/b.yaml", "extends: a.yaml\nmodel: {factory: 'etbuild.zoo:mlp'}\n")
    path = write(
        "c.yaml", "extends: base/b.yaml\nname: c\nmodel: {inputs: [{shape: [1], dtype: bool}]}\n"
    )
    recipe = load_recipe(path)
    assert recipe.verify.samples == 7
    assert recipe.sources == tuple(
        Path(p).resolve() for p in ("recipes/c.yaml", "recipes/base/b.yaml", "recipes/base/a.yaml")
    )



def test_extends_cycle_names_the_chain() -> None:
    write("a.yaml", "extends: base/b.yaml\nname: a\n")
    write("base/b.yaml", "extends: ../a.yaml\n")
    with pytest.raises(RecipeError) as info:
        load_recipe("recipes/a.yaml")
    assert str(info.value) == (
        "recipes/base/b.yaml:1:10: extends: cycle in the extends chain:"
        " recipes/a.yaml -> recipes/base/b.yaml -> recipes/a.yaml"
    )



def test_extends_missing_file() -> None:
    assert error_of("extends: base/nope.yaml\n" + GOOD) == (
        "recipes/x.yaml:1:10: extends: expected an existing recipe file;"
        " got 'base/nope.yaml' (recipes/base/nope.yaml not found)"
    )



def test_error_in_a_base_names_the_base_file() -> None:
    write("base/defaults.yaml", "verify:\n  samples: 4\n  rtol: loose\n")
    assert error_of("extends: base/defaults.yaml\n" + GOOD) == (
        "recipes/base/defaults.yaml:3:9: verify.rtol: expected a number; got 'loose'"
    )



def test_extends_must_be_a_path() -> None:
    assert error_of("extends: [base.yaml]\n" + GOOD) == (
        "recipes/x.yaml:1:10: extends: expected the path of a base recipe, relative to this file;"
        " got ['base.yaml']"
    )



def test_both_inputs_and_methods_across_extends() -> None:
    write(
        "base/b.yaml", "model: {factory: 'etbuild.zoo:mlp', inputs: [{shape: [1], dtype: bool}]}\n"
    )
    text = "extends: base/b.yaml\n" + METHODS
    assert error_of(text) == (
        "recipes/x.yaml:6:3: model.methods: expected 'inputs' (to export forward) or 'methods',"
        " not both (model.inputs is set at recipes/base/b.yaml:1:37)"
    )



def test_quantize_modules_through_extends_put_the_extending_recipes_globs_first() -> None:
    write("base/q.yaml", "quantize:\n  scheme: int8-static\n  modules: {'a*': float, 'b*': int8-dynamic}\n")
    text = "extends: base/q.yaml\n" + GOOD + "quantize:\n  modules: {'c*': float, 'b*': int8-weight-only}\n"
    recipe = load_recipe(write("x.yaml", text))
    assert recipe.quantize is not None
    assert recipe.quantize.modules == (
        ModuleOverride("c*", "float"), ModuleOverride("b*", "int8-weight-only"), ModuleOverride("a*", "float")
    )



def test_long_extends_chain() -> None:
    for i in range(40):
        write(f"base/b{i}.yaml", f"extends: b{i + 1}.yaml\n" if i < 39 else "verify: {samples: 1}\n")
    message = error_of("extends: base/b0.yaml\n" + GOOD)
    assert message.startswith(
        "recipes/base/b30.yaml:1:10: extends: expected a chain of at most 32 recipes; got more:"
        " recipes/x.yaml -> recipes/base/b0.yaml -> recipes/base/b1.yaml"
    )
    assert message.endswith("recipes/base/b30.yaml -> recipes/base/b31.yaml")
