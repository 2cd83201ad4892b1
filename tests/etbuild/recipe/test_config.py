"""etbuild.recipe: the frozen dataclasses and the defaults the schema gives them."""

from __future__ import annotations

import json

import jsonschema
import pytest

from etbuild.recipe import (
    CalibrationConfig,
    InputSpec,
    LevelConfig,
    MemoryConfig,
    MethodSpec,
    ModelConfig,
    OperatorsConfig,
    QuantizeConfig,
    VerifyConfig,
    load_recipe,
)
from tests.etbuild.recipe.support import GOOD, REPO, write


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(
        json.loads((REPO / "schema" / "recipe.schema.json").read_text())
    )



def test_defaults_are_filled_from_the_schema() -> None:
    recipe = load_recipe(write("good.yaml", GOOD))
    assert recipe.model.kwargs == {}
    assert (recipe.model.weights, recipe.model.seed) == (None, 0)
    assert recipe.memory == MemoryConfig()
    assert recipe.memory.levels == (LevelConfig(name="dram", bytes=None, alignment=16),)
    assert recipe.verify == VerifyConfig(samples=4, rtol=1e-4, atol=1e-5, seed=1)
    assert (recipe.quantize, recipe.backends, recipe.operators) == (None, (), OperatorsConfig())
    assert recipe.section("verify") == {"atol": 1e-5, "bundle": False, "rtol": 1e-4, "samples": 4, "seed": 1}



def test_section_is_deterministic_and_a_copy() -> None:
    first, second = load_recipe(write("good.yaml", GOOD)), load_recipe("recipes/good.yaml")
    for key in ("name", "model", "memory", "verify", "quantize", "backends", "operators"):
        assert json.dumps(first.section(key)) == json.dumps(second.section(key))
    model = first.section("model")
    assert list(model) == sorted(model)
    model["seed"] = 99
    assert first.section("model")["seed"] == 0
    with pytest.raises(KeyError):
        first.section("nope")



def test_recipes_are_frozen_and_hashable() -> None:
    first, second = load_recipe(write("good.yaml", GOOD)), load_recipe("recipes/good.yaml")
    assert first == second and hash(first) == hash(second)
    with pytest.raises(AttributeError):
        first.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        first.model.kwargs["sizes"] = [1]  # type: ignore[index]



def test_model_config_built_by_hand_fills_methods_or_inputs() -> None:
    inputs = (InputSpec(shape=(3,), dtype="int64"),)
    assert ModelConfig("m:f", inputs=inputs).methods == (MethodSpec("forward", inputs),)
    by_methods = ModelConfig("m:f", methods=(MethodSpec("encode", inputs),))
    assert by_methods.inputs == inputs



@pytest.mark.usefixtures("supported")
def test_quantize_defaults_come_from_the_schema() -> None:
    recipe = load_recipe(write("q.yaml", GOOD + "quantize: {scheme: int8-dynamic}\n"))
    assert recipe.quantize == QuantizeConfig(scheme="int8-dynamic")
    assert recipe.quantize == QuantizeConfig(
        "int8-dynamic", True, 32, None, CalibrationConfig(None, 32, 0), (), None
    )
