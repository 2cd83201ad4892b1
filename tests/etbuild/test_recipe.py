"""etbuild.recipe: loading, extends, validation, defaults, and the whole text of every error."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import jsonschema
import pytest

from etbuild.errors import RecipeError
from etbuild.recipe import (
    NOT_SUPPORTED_YET,
    AccuracyConfig,
    BackendConfig,
    CalibrationConfig,
    DimRange,
    InputSpec,
    LevelConfig,
    MemoryConfig,
    MethodSpec,
    ModelConfig,
    ModuleOverride,
    OperatorsConfig,
    QuantizeConfig,
    RuleConfig,
    VerifyConfig,
    discover_recipes,
    format_key_path,
    load_recipe,
    parse_key_path,
)

REPO = Path(__file__).resolve().parents[2]
REPO_RECIPES = REPO / "recipes"

GOOD = """
name: good
model:
  factory: etbuild.zoo:mlp
  inputs: [{shape: [1, 4], dtype: float32}]
"""


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run each test in its own directory so that messages show short relative paths."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(name: str, text: str) -> str:
    """Write `text` (dedented) to recipes/<name>; return the relative path."""
    path = Path("recipes") / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path.as_posix()


def error_of(text: str, name: str = "x.yaml") -> str:
    """The message load_recipe raises for a recipe with this text."""
    path = write(name, text)
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    return str(info.value)


# ---------------------------------------------------------------------------- good recipes


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(
        json.loads((REPO / "schema" / "recipe.schema.json").read_text())
    )


def test_repo_mlp_recipe() -> None:
    recipe = load_recipe(REPO_RECIPES / "mlp.yaml")
    assert recipe.name == "mlp"
    assert recipe.model.factory == "etbuild.zoo:mlp"
    assert recipe.model.kwargs["sizes"] == (784, 512, 256, 10)
    assert recipe.model.inputs == (InputSpec(shape=(1, 784), dtype="float32"),)
    assert recipe.memory == MemoryConfig(planner="greedy", alignment=16)
    assert recipe.verify == VerifyConfig(samples=4, rtol=1e-4, atol=1e-5, seed=1)
    assert recipe.sources == (REPO_RECIPES / "mlp.yaml",)


def test_repo_mlp_batch32_extends_mlp() -> None:
    recipe = load_recipe(REPO_RECIPES / "mlp-batch32.yaml")
    base = load_recipe(REPO_RECIPES / "mlp.yaml")
    assert recipe.name == "mlp-batch32"
    assert recipe.model.inputs == (InputSpec(shape=(32, 784), dtype="float32"),)
    assert recipe.model.kwargs == base.model.kwargs
    assert (recipe.memory, recipe.verify) == (base.memory, base.verify)
    assert recipe.sources == (REPO_RECIPES / "mlp-batch32.yaml", REPO_RECIPES / "mlp.yaml")


def test_defaults_are_filled_from_the_schema() -> None:
    recipe = load_recipe(write("good.yaml", GOOD))
    assert recipe.model.kwargs == {}
    assert (recipe.model.weights, recipe.model.seed) == (None, 0)
    assert recipe.memory == MemoryConfig()
    assert recipe.memory.levels == (LevelConfig(name="dram", bytes=None, alignment=16),)
    assert recipe.verify == VerifyConfig(samples=4, rtol=1e-4, atol=1e-5, seed=1)
    assert (recipe.quantize, recipe.backends, recipe.operators) == (None, (), OperatorsConfig())
    assert recipe.section("verify") == {"atol": 1e-5, "rtol": 1e-4, "samples": 4, "seed": 1}


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


def test_file_paths_resolve_against_the_file_that_names_them(in_tmp: Path) -> None:
    write("base/files.yaml", "model: {factory: 'nets/net.py:build', weights: w.pt}\n")
    path = write(
        "p.yaml",
        "extends: base/files.yaml\nname: p\nmodel: {inputs: [{shape: [1], dtype: int8}]}\n",
    )
    recipe = load_recipe(path)
    base_dir = (in_tmp / "recipes" / "base").resolve()
    assert recipe.model.factory == f"{(base_dir / 'nets' / 'net.py').as_posix()}:build"
    assert recipe.model.weights == base_dir / "w.pt"


def test_sizes_and_level_alignment_are_normalized() -> None:
    recipe = load_recipe(
        write("mem.yaml", GOOD + "memory: {alignment: 64, levels: [{name: sram, bytes: 256KiB}]}\n")
    )
    assert recipe.memory.levels == (LevelConfig(name="sram", bytes=256 * 1024, alignment=64),)
    assert recipe.section("memory")["levels"] == [
        {"alignment": 64, "bytes": 262144, "name": "sram"}
    ]


def test_floats_without_a_dot_are_numbers() -> None:
    recipe = load_recipe(write("tol.yaml", GOOD + "verify: {rtol: 1e-3, atol: 2E-6}\n"))
    assert (recipe.verify.rtol, recipe.verify.atol) == (1e-3, 2e-6)


def test_int_input_bounds() -> None:
    text = GOOD.replace(
        "{shape: [1, 4], dtype: float32}", "{shape: [3], dtype: int32, low: -5, high: 5}"
    )
    assert load_recipe(write("ints.yaml", text)).model.inputs == (
        InputSpec(shape=(3,), dtype="int32", low=-5, high=5),
    )


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


UNSUPPORTED_SETTINGS = {
    ("memory", "levels", 1): "memory: {levels: [{name: sram, bytes: 1KiB}, {name: dram}]}\n",
}


@pytest.mark.parametrize("path", NOT_SUPPORTED_YET, ids=format_key_path)
def test_every_unsupported_key_path_is_rejected(path: tuple[str | int, ...]) -> None:
    section = format_key_path(tuple(part for part in path if isinstance(part, str)))
    message = error_of(GOOD + UNSUPPORTED_SETTINGS[path])
    assert message.endswith(f": {format_key_path(path)}: not supported yet: {section}")


def test_an_empty_backends_list_is_not_a_setting() -> None:
    assert load_recipe(write("good.yaml", GOOD + "backends: []\nquantize: null\n")).backends == ()


# ------------------------------------------------------------------- bad recipes: one per kind


def test_unknown_key_suggests_the_nearest() -> None:
    assert error_of(GOOD + "quantise: {scheme: int8-static}\n") == (
        "recipes/x.yaml:5:1: quantise: unknown key 'quantise' — did you mean 'quantize'?"
    )


def test_unknown_key_without_a_near_miss_lists_the_keys() -> None:
    assert error_of(GOOD + "verify: {zzz: 1}\n") == (
        "recipes/x.yaml:5:10: verify.zzz: unknown key 'zzz';"
        " expected one of samples, rtol, atol, seed"
    )


def test_wrong_type() -> None:
    assert error_of(GOOD + "verify:\n  samples: four\n") == (
        "recipes/x.yaml:6:12: verify.samples: expected an integer; got 'four'"
    )


def test_missing_required_key() -> None:
    assert error_of("name: x\nmodel:\n  inputs: [{shape: [1], dtype: float32}]\n") == (
        "recipes/x.yaml:3:3: model.factory: missing required key 'factory'"
    )


def test_missing_name_in_the_final_recipe() -> None:
    assert error_of(GOOD.replace("name: good\n", "")) == (
        "recipes/x.yaml:1:1: name: missing required key 'name'"
    )


def test_bad_enum_value_suggests_the_nearest() -> None:
    assert error_of(GOOD.replace("dtype: float32", "dtype: floot32")) == (
        "recipes/x.yaml:4:35: model.inputs[0].dtype: expected one of float32, float16, float64,"
        " int64, int32, bool, uint8, int8; got 'floot32' — did you mean 'float32'?"
    )


def test_bad_size_suffix() -> None:
    assert error_of(GOOD + "memory:\n  levels: [{name: sram, bytes: 256KB}]\n") == (
        "recipes/x.yaml:6:32: memory.levels[0].bytes: expected a size in bytes: a positive"
        " integer or a string like '256KiB' (suffix B, KiB, MiB or GiB), or 'unbounded' / null for no"
        " limit; got '256KB'"
    )


def test_negative_number() -> None:
    assert error_of(GOOD + "verify: {atol: -1.0e-5}\n") == (
        "recipes/x.yaml:5:16: verify.atol: expected a number >= 0; got -1e-05"
    )


def test_not_a_power_of_two() -> None:
    assert error_of(GOOD + "memory: {alignment: 12}\n") == (
        "recipes/x.yaml:5:21: memory.alignment: expected a power of two; got 12"
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


def test_yaml_syntax_error() -> None:
    assert error_of("name: x\nmodel: {factory: etbuild.zoo:mlp\n") == (
        "recipes/x.yaml:3:1: invalid YAML: expected ',' or '}', but got '<stream end>'"
        " (while parsing a flow mapping)"
    )


def test_every_section_is_supported() -> None:
    """quantize and backends have their stages: nothing is refused as not supported yet."""
    assert NOT_SUPPORTED_YET == ()
    recipe = load_recipe(write("x.yaml", GOOD + "backends: [{name: xnnpack}]\n"))
    assert [b.name for b in recipe.backends] == ["xnnpack"]


def test_memory_hierarchy_loads_levels_and_rules() -> None:
    text = GOOD + (
        "memory:\n  planner: best\n"
        "  levels: [{name: sram, bytes: 256KiB, alignment: 32}, {name: dram, bytes: unbounded}]\n"
        "  rules: [{level: sram, max_bytes: 4KiB}, {level: dram, module: 'head*'}]\n"
    )
    memory = load_recipe(write("x.yaml", text)).memory
    assert memory.planner == "best"
    assert memory.levels == (LevelConfig("sram", 262144, 32), LevelConfig("dram", None, 16))
    assert memory.rules == (RuleConfig("sram", 4096, None), RuleConfig("dram", None, "head*"))


def test_rule_naming_an_unknown_level() -> None:
    text = GOOD + "memory:\n  levels: [{name: sram, bytes: 1MiB}, {name: dram}]\n"
    text += "  rules: [{level: srm, max_bytes: 64}]\n"
    assert error_of(text) == (
        "recipes/x.yaml:7:12: memory.rules[0].level: expected one of the levels sram, dram; got 'srm'"
        " — did you mean 'sram'?"
    )


def test_rule_without_a_condition() -> None:
    text = GOOD + "memory:\n  rules: [{level: dram}]\n"
    assert error_of(text) == (
        "recipes/x.yaml:6:11: memory.rules[0]: expected a rule with `level` and at least one of `max_bytes`"
        " or `module`; got a mapping"
    )


def test_duplicate_level_name() -> None:
    text = GOOD + "memory:\n  levels: [{name: sram, bytes: 1MiB}, {name: sram}]\n"
    assert error_of(text) == "recipes/x.yaml:6:40: memory.levels[1].name: level 'sram' is already defined"


def test_bad_factory_string() -> None:
    assert error_of(GOOD.replace("etbuild.zoo:mlp", "etbuild.zoo.mlp")) == (
        "recipes/x.yaml:3:12: model.factory: expected 'module:callable' or"
        " 'path/file.py:callable'; got 'etbuild.zoo.mlp'"
    )


def test_bad_name() -> None:
    assert error_of(GOOD.replace("name: good", "name: My Model")) == (
        "recipes/x.yaml:1:7: name: expected a name of lowercase letters, digits, '.', '_' or '-'"
        " that starts with a letter or digit; got 'My Model'"
    )


def test_duplicate_key() -> None:
    assert error_of(GOOD + "verify: {samples: 2}\nverify: {samples: 3}\n") == (
        "recipes/x.yaml:6:1: verify: duplicate key 'verify' (first set at recipes/x.yaml:5:1)"
    )


def test_error_in_a_base_names_the_base_file() -> None:
    write("base/defaults.yaml", "verify:\n  samples: 4\n  rtol: loose\n")
    assert error_of("extends: base/defaults.yaml\n" + GOOD) == (
        "recipes/base/defaults.yaml:3:9: verify.rtol: expected a number; got 'loose'"
    )


def test_bounds_on_a_float_input() -> None:
    text = GOOD.replace("dtype: float32}", "dtype: float32, high: 3}")
    assert error_of(text) == (
        "recipes/x.yaml:4:44: model.inputs[0].high: expected high only with an integer dtype;"
        " got dtype float32"
    )


def test_top_level_is_not_a_mapping() -> None:
    assert error_of("- name: x\n") == (
        "recipes/x.yaml:1:1: expected a mapping of recipe sections; got a list"
    )


def test_missing_recipe_file() -> None:
    with pytest.raises(RecipeError) as info:
        load_recipe("recipes/absent.yaml")
    assert str(info.value) == "recipes/absent.yaml: cannot read recipe: No such file or directory"


def test_extends_must_be_a_path() -> None:
    assert error_of("extends: [base.yaml]\n" + GOOD) == (
        "recipes/x.yaml:1:10: extends: expected the path of a base recipe, relative to this file;"
        " got ['base.yaml']"
    )


def test_int_bounds_out_of_order() -> None:
    text = GOOD.replace("dtype: float32}", "dtype: int64, low: 5, high: 5}")
    assert error_of(text) == (
        "recipes/x.yaml:4:50: model.inputs[0].high: expected an integer > low (5); got 5"
    )


# ---------------------------------------------------------------------------- methods, dynamic dims

DYNAMIC = """
name: dyn
model:
  factory: etbuild.zoo:mlp
  inputs: [{shape: [8, 4], dtype: float32}]
  dynamic: {0: {0: {min: 1, max: 64}}}
"""

METHODS = """
name: two
model:
  factory: etbuild.zoo:encoder_decoder
  methods:
    encode:
      inputs: [{shape: [2, 32], dtype: float32}]
      dynamic: {0: {0: {min: 1, max: 16}}}
    decode:
      inputs: [{shape: [1, 8], dtype: float32, name: z}]
"""


def test_a_recipe_with_inputs_has_the_one_method_forward() -> None:
    recipe = load_recipe(write("good.yaml", GOOD))
    inputs = (InputSpec(shape=(1, 4), dtype="float32"),)
    assert recipe.model.methods == (MethodSpec(name="forward", inputs=inputs, dynamic={}),)
    assert recipe.model.inputs == inputs
    assert recipe.model.method("forward") is recipe.model.methods[0]


def test_dynamic_dims_of_forward() -> None:
    recipe = load_recipe(write("dyn.yaml", DYNAMIC))
    (forward,) = recipe.model.methods
    assert forward.dynamic == {0: {0: DimRange(min=1, max=64)}}
    assert recipe.section("model")["dynamic"] == {"0": {"0": {"max": 64, "min": 1}}}
    assert recipe == load_recipe("recipes/dyn.yaml")
    assert hash(recipe) == hash(load_recipe("recipes/dyn.yaml"))
    with pytest.raises(TypeError):
        forward.dynamic[1] = {}  # type: ignore[index]


def test_dynamic_indices_are_numbers_in_numeric_order() -> None:
    text = DYNAMIC.replace("[8, 4]", "[8, 2, 2, 2, 2, 2, 2, 2, 2, 2, 4]").replace(
        "{0: {0: {min: 1, max: 64}}}", "{0: {10: {min: 2, max: 4}, 2: {min: 1, max: 2}}}"
    )
    (forward,) = load_recipe(write("dims.yaml", text)).model.methods
    assert list(forward.dynamic[0]) == [2, 10]
    assert forward.dynamic[0][10] == DimRange(min=2, max=4)


def test_methods_are_sorted_by_name_and_inputs_are_the_first_methods() -> None:
    recipe = load_recipe(write("two.yaml", METHODS))
    decode = MethodSpec("decode", (InputSpec(shape=(1, 8), dtype="float32", name="z"),), {})
    encode = MethodSpec(
        "encode",
        (InputSpec(shape=(2, 32), dtype="float32"),),
        {0: {0: DimRange(min=1, max=16)}},
    )
    assert recipe.model.methods == (decode, encode)
    assert recipe.model.inputs == decode.inputs
    assert recipe.section("model")["methods"]["decode"] == {
        "dynamic": None,
        "inputs": [{"dtype": "float32", "high": None, "low": None, "name": "z", "shape": [1, 8]}],
    }
    assert recipe.where("model.methods.encode.dynamic.0.0") == "recipes/two.yaml:7:21"


def test_unknown_method_lists_the_recipes_methods() -> None:
    recipe = load_recipe(write("two.yaml", METHODS))
    with pytest.raises(KeyError) as info:
        recipe.model.method("forward")
    assert info.value.args[0] == "no method 'forward' in this recipe; it has decode, encode"


def test_model_config_built_by_hand_fills_methods_or_inputs() -> None:
    inputs = (InputSpec(shape=(3,), dtype="int64"),)
    assert ModelConfig("m:f", inputs=inputs).methods == (MethodSpec("forward", inputs),)
    by_methods = ModelConfig("m:f", methods=(MethodSpec("encode", inputs),))
    assert by_methods.inputs == inputs


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


def test_neither_inputs_nor_methods() -> None:
    assert error_of("name: x\nmodel:\n  factory: etbuild.zoo:mlp\n") == (
        "recipes/x.yaml:3:3: model: expected 'inputs' (to export forward) or 'methods'; got neither"
    )


def test_both_inputs_and_methods() -> None:
    text = GOOD + "  methods: {encode: {inputs: [{shape: [1], dtype: float32}]}}\n"
    assert error_of(text) == (
        "recipes/x.yaml:5:3: model.methods: expected 'inputs' (to export forward) or 'methods',"
        " not both (model.inputs is set at recipes/x.yaml:4:3)"
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


def test_model_dynamic_beside_methods() -> None:
    assert error_of(METHODS + "  dynamic: {0: {0: {min: 1, max: 2}}}\n") == (
        "recipes/x.yaml:10:3: model.dynamic: expected no model.dynamic beside model.methods;"
        " set model.methods.<name>.dynamic"
    )


def test_dynamic_input_index_out_of_range() -> None:
    assert error_of(DYNAMIC.replace("{0: {0:", "{1: {0:")) == (
        "recipes/x.yaml:5:13: model.dynamic.1: expected an index into model.inputs, which has"
        " 1 input; got 1"
    )


def test_dynamic_input_index_out_of_range_in_a_method() -> None:
    assert error_of(METHODS.replace("{0: {0:", "{2: {0:")) == (
        "recipes/x.yaml:7:17: model.methods.encode.dynamic.2: expected an index into"
        " model.methods.encode.inputs, which has 1 input; got 2"
    )


def test_dynamic_dimension_out_of_range() -> None:
    assert error_of(DYNAMIC.replace("{0: {0:", "{0: {2:")) == (
        "recipes/x.yaml:5:17: model.dynamic.0.2: expected a dimension of model.inputs[0].shape,"
        " [8, 4]; got 2"
    )


def test_dynamic_max_below_min() -> None:
    assert error_of(DYNAMIC.replace("max: 64", "max: 0").replace("min: 1", "min: 4")) == (
        "recipes/x.yaml:5:34: model.dynamic.0.0.max: expected an integer >= 1; got 0"
    )
    assert error_of(DYNAMIC.replace("min: 1, max: 64", "min: 16, max: 4")) == (
        "recipes/x.yaml:5:30: model.dynamic.0.0.max: expected an integer >= min (16); got 4"
    )


def test_dynamic_min_below_one() -> None:
    assert error_of(DYNAMIC.replace("min: 1", "min: 0")) == (
        "recipes/x.yaml:5:26: model.dynamic.0.0.min: expected an integer >= 1; got 0"
    )


def test_dynamic_range_must_hold_the_declared_size() -> None:
    assert error_of(DYNAMIC.replace("max: 64", "max: 4")) == (
        "recipes/x.yaml:5:17: model.dynamic.0.0: expected a range that holds 8, the declared size"
        " model.inputs[0].shape[0] (the export example); got [1, 4]"
    )


def test_dynamic_example_size_of_one() -> None:
    assert error_of(DYNAMIC.replace("[8, 4]", "[1, 4]")) == (
        "recipes/x.yaml:4:21: model.inputs[0].shape[0]: expected a size >= 2 at a dynamic"
        " dimension (torch.export specializes an example size of 0 or 1; the range may still"
        " start at 1); got 1"
    )


def test_dynamic_bad_indices() -> None:
    assert error_of(DYNAMIC.replace("{0: {0:", "{x: {0:")) == (
        "recipes/x.yaml:5:13: model.dynamic.x: expected an input index such as 0; got 'x'"
    )
    assert error_of(DYNAMIC.replace("{0: {0:", "{0: {01:")) == (
        "recipes/x.yaml:5:17: model.dynamic.0.01: expected a dimension index such as 0; got '01'"
    )


def test_dynamic_input_without_dimensions() -> None:
    assert error_of(DYNAMIC.replace("{0: {0: {min: 1, max: 64}}}", "{0: {}}")) == (
        "recipes/x.yaml:5:16: model.dynamic.0: expected a mapping of at least 1 key; got a mapping"
    )


def test_dynamic_range_needs_min_and_max() -> None:
    assert error_of(DYNAMIC.replace("min: 1, ", "")) == (
        "recipes/x.yaml:5:20: model.dynamic.0.0.min: missing required key 'min'"
    )


def test_bad_method_name() -> None:
    assert error_of(METHODS.replace("    encode:", "    en-code:")) == (
        "recipes/x.yaml:5:5: model.methods.en-code: expected a method name (a Python identifier);"
        " got 'en-code'"
    )


def test_no_methods() -> None:
    assert error_of("name: x\nmodel:\n  factory: etbuild.zoo:mlp\n  methods: {}\n") == (
        "recipes/x.yaml:4:12: model.methods: expected a mapping of at least 1 key; got a mapping"
    )


def test_method_without_inputs() -> None:
    text = METHODS.replace("      inputs: [{shape: [1, 8], dtype: float32, name: z}]\n", "")
    assert error_of(text + "      dynamic: null\n") == (
        "recipes/x.yaml:9:7: model.methods.decode.inputs: missing required key 'inputs'"
    )


def test_unknown_key_in_a_method_suggests_the_nearest() -> None:
    assert error_of(
        METHODS.replace("      inputs: [{shape: [1, 8]", "      input: [{shape: [1, 8]")
    ) == (
        "recipes/x.yaml:9:7: model.methods.decode.input: unknown key 'input'"
        " — did you mean 'inputs'?"
    )


def test_int_bounds_are_checked_in_methods() -> None:
    assert error_of(METHODS.replace("name: z}", "name: z, low: 3}")) == (
        "recipes/x.yaml:9:57: model.methods.decode.inputs[0].low: expected low only with an"
        " integer dtype; got dtype float32"
    )


# ---------------------------------------------------------------------------- typed sections

QUANTIZE = """
quantize:
  scheme: int8-static
  per_channel: false
  embeddings: int4
  group_size: 64
  calibration: {data: calib/kws.npz, seed: 3}
  modules: {"head*": float, "encoder.*": int8-dynamic, "a*": int8-static}
  accuracy: {min_snr_db: 30, fallback: auto}
"""


@pytest.fixture
def supported(monkeypatch: pytest.MonkeyPatch) -> None:
    """Load quantize and backends as they will load once their stages exist."""
    monkeypatch.setattr("etbuild.recipe.checks.NOT_SUPPORTED_YET", ())


@pytest.mark.usefixtures("supported")
def test_quantize_loads_into_its_dataclasses(in_tmp: Path) -> None:
    recipe = load_recipe(write("q.yaml", GOOD + QUANTIZE))
    assert recipe.quantize == QuantizeConfig(
        scheme="int8-static",
        per_channel=False,
        group_size=64,
        embeddings="int4",
        calibration=CalibrationConfig(data=(in_tmp / "recipes/calib/kws.npz").resolve(), samples=32, seed=3),
        modules=(
            ModuleOverride("head*", "float"),
            ModuleOverride("encoder.*", "int8-dynamic"),
            ModuleOverride("a*", "int8-static"),
        ),
        accuracy=AccuracyConfig(min_snr_db=30, top1_agreement=None, fallback="auto"),
    )
    assert recipe.section("quantize")["modules"] == [  # the recipe's order: the first match wins
        {"module": "head*", "scheme": "float"},
        {"module": "encoder.*", "scheme": "int8-dynamic"},
        {"module": "a*", "scheme": "int8-static"},
    ]
    assert hash(recipe) == hash(load_recipe("recipes/q.yaml"))


@pytest.mark.usefixtures("supported")
def test_quantize_defaults_come_from_the_schema() -> None:
    recipe = load_recipe(write("q.yaml", GOOD + "quantize: {scheme: int8-dynamic}\n"))
    assert recipe.quantize == QuantizeConfig(scheme="int8-dynamic")
    assert recipe.quantize == QuantizeConfig(
        "int8-dynamic", True, 32, None, CalibrationConfig(None, 32, 0), (), None
    )


@pytest.mark.usefixtures("supported")
def test_quantize_calibration_data_is_relative_to_the_file_that_names_it(in_tmp: Path) -> None:
    write("base/q.yaml", "quantize: {scheme: int8-static, calibration: {data: c.npz}}\n")
    recipe = load_recipe(write("x.yaml", "extends: base/q.yaml\n" + GOOD))
    assert recipe.quantize is not None
    assert recipe.quantize.calibration.data == (in_tmp / "recipes/base/c.npz").resolve()


def test_backends_load_in_order_with_frozen_options() -> None:
    text = GOOD + "backends:\n  - {name: xnnpack, options: {exclude: ['head*'], min_nodes: 2}}\n"
    recipe = load_recipe(write("b.yaml", text))
    assert recipe.backends == (BackendConfig("xnnpack", {"exclude": ("head*",), "min_nodes": 2}),)
    with pytest.raises(TypeError):
        recipe.backends[0].options["min_nodes"] = 3  # type: ignore[index]


def test_unknown_backend_lists_the_backends() -> None:
    assert error_of(GOOD + "backends: [{name: xnnpak}]\n") == (
        "recipes/x.yaml:5:13: backends[0].name: expected one of the backends xnnpack; got 'xnnpak'"
        " — did you mean 'xnnpack'?"
    )


def test_unknown_backend_option_names_its_near_miss() -> None:
    assert error_of(GOOD + "backends: [{name: xnnpack, options: {min_node: 2}}]\n") == (
        "recipes/x.yaml:5:38: backends[0].options.min_node: backend xnnpack has no option 'min_node'"
        " — did you mean 'min_nodes'? (its options: exclude, min_nodes, decompose)"
    )


@pytest.mark.parametrize(("option", "expected"), [
    ("min_nodes: 0", "an integer >= 1"), ("exclude: head", "a list of non-empty glob strings"),
    ("decompose: 1", "true or false"),
])
def test_backend_option_values_are_checked(option: str, expected: str) -> None:
    name = option.split(":")[0]
    message = error_of(GOOD + f"backends: [{{name: xnnpack, options: {{{option}}}}}]\n")
    assert message.startswith(f"recipes/x.yaml:5:38: backends[0].options.{name}: expected {expected} for option")


def test_operators_allow_a_list_or_a_file_relative_to_the_file_that_names_it(in_tmp: Path) -> None:
    write("base/ops.txt", "aten::addmm.out\n")
    write("base/ops.yaml", "operators: {allow: ops.txt}\n")
    recipe = load_recipe(write("o.yaml", "extends: base/ops.yaml\n" + GOOD))
    ops = (in_tmp / "recipes/base/ops.txt").resolve()
    assert recipe.operators == OperatorsConfig(allow=(f"@{ops.as_posix()}",))
    assert recipe.operators.files == (ops,)
    listed = load_recipe(write("l.yaml", GOOD + "operators: {allow: ['aten::relu*', '@base/ops.txt']}\n"))
    assert listed.operators.allow == ("aten::relu*", f"@{ops.as_posix()}")
    assert listed.section("operators") == {"allow": ["aten::relu*", f"@{ops.as_posix()}"]}


def test_operators_allow_file_missing(in_tmp: Path) -> None:
    assert error_of(GOOD + "operators:\n  allow: [aten::relu.out, '@ops.txt']\n") == (
        "recipes/x.yaml:6:27: operators.allow[1]: expected an existing allowlist file; got 'ops.txt'"
        f" ({(in_tmp / 'recipes/ops.txt').resolve().as_posix()} not found)"
    )


def test_int4_weights_need_the_xnnpack_backend() -> None:
    assert error_of(GOOD + "quantize: {scheme: int8-dynamic-int4-weight, group_size: 64}\n") == (
        "recipes/x.yaml:5:12: quantize.scheme: int8-dynamic-int4-weight needs backends: [{name: xnnpack}]:"
        " ExecuTorch runs int4 linear weights only inside the XNNPACK delegate; backends lists none"
    )
    override = "quantize:\n  scheme: int8-dynamic\n  modules: {'ffn.*': int8-dynamic-int4-weight}\n"
    assert error_of(GOOD + override + "backends: [{name: cpu}]\n") == (
        "recipes/x.yaml:7:13: quantize.modules.ffn.*: int8-dynamic-int4-weight needs backends: [{name: xnnpack}]:"
        " ExecuTorch runs int4 linear weights only inside the XNNPACK delegate; backends lists cpu"
    )


def test_int4_weights_with_xnnpack_load() -> None:
    text = GOOD + "quantize: {scheme: int8-dynamic-int4-weight}\nbackends: [{name: xnnpack}]\n"
    recipe = load_recipe(write("x.yaml", text))
    assert recipe.quantize is not None and recipe.quantize.scheme == "int8-dynamic-int4-weight"


def test_quantize_modules_through_extends_put_the_extending_recipes_globs_first() -> None:
    write("base/q.yaml", "quantize:\n  scheme: int8-static\n  modules: {'a*': float, 'b*': int8-dynamic}\n")
    text = "extends: base/q.yaml\n" + GOOD + "quantize:\n  modules: {'c*': float, 'b*': int8-weight-only}\n"
    recipe = load_recipe(write("x.yaml", text))
    assert recipe.quantize is not None
    assert recipe.quantize.modules == (
        ModuleOverride("c*", "float"), ModuleOverride("b*", "int8-weight-only"), ModuleOverride("a*", "float")
    )


def test_unknown_scheme_lists_the_schemes() -> None:
    assert error_of(GOOD + "quantize: {scheme: int8-statik}\n") == (
        "recipes/x.yaml:5:20: quantize.scheme: expected one of int8-static, int8-dynamic, int8-weight-only,"
        " int8-dynamic-int4-weight; got 'int8-statik' — did you mean 'int8-static'?"
    )


def test_unknown_module_scheme_lists_the_schemes_and_float() -> None:
    assert error_of(GOOD + "quantize:\n  scheme: int8-dynamic\n  modules: {'head*': flaot}\n") == (
        "recipes/x.yaml:7:22: quantize.modules.head*: expected one of int8-static, int8-dynamic,"
        " int8-weight-only, int8-dynamic-int4-weight, float; got 'flaot' — did you mean 'float'?"
    )


def test_unknown_quantize_keys_suggest_the_nearest() -> None:
    assert error_of(GOOD + "quantize: {scheme: int8-static, per_chanel: false}\n") == (
        "recipes/x.yaml:5:33: quantize.per_chanel: unknown key 'per_chanel' — did you mean 'per_channel'?"
    )
    assert error_of(GOOD + "quantize:\n  scheme: int8-static\n  calibration: {sample: 8}\n") == (
        "recipes/x.yaml:7:17: quantize.calibration.sample: unknown key 'sample' — did you mean 'samples'?"
    )
    assert error_of(GOOD + "quantize:\n  scheme: int8-static\n  accuracy: {min_snr: 30}\n") == (
        "recipes/x.yaml:7:14: quantize.accuracy.min_snr: unknown key 'min_snr' — did you mean 'min_snr_db'?"
    )


def test_bad_embeddings_and_fallback() -> None:
    assert error_of(GOOD + "quantize: {scheme: int8-dynamic, embeddings: int2}\n") == (
        "recipes/x.yaml:5:46: quantize.embeddings: expected one of int8, int4, null; got 'int2'"
        " — did you mean 'int8'?"
    )
    text = GOOD + "quantize: {scheme: int8-dynamic, accuracy: {min_snr_db: 30, fallback: yes}}\n"
    assert error_of(text) == (
        "recipes/x.yaml:5:71: quantize.accuracy.fallback: expected one of none, auto; got true"
    )


def test_group_size_is_a_power_of_two() -> None:
    assert error_of(GOOD + "quantize: {scheme: int8-dynamic-int4-weight, group_size: 48}\n") == (
        "recipes/x.yaml:5:58: quantize.group_size: expected a power of two; got 48"
    )


def test_calibration_only_with_a_static_scheme() -> None:
    assert error_of(GOOD + "quantize: {scheme: int8-dynamic, calibration: {samples: 8}}\n") == (
        "recipes/x.yaml:5:34: quantize.calibration: expected calibration only with scheme int8-static"
        " (in quantize.scheme or quantize.modules); got scheme int8-dynamic"
    )


@pytest.mark.usefixtures("supported")
def test_calibration_for_a_static_module_override() -> None:
    text = GOOD + "quantize:\n  scheme: int8-dynamic\n  modules: {'conv*': int8-static}\n  calibration: {samples: 8}\n"
    quantize = load_recipe(write("q.yaml", text)).quantize
    assert quantize is not None and quantize.calibration.samples == 8


def test_group_size_only_with_int4() -> None:
    assert error_of(GOOD + "quantize: {scheme: int8-static, group_size: 64}\n") == (
        "recipes/x.yaml:5:33: quantize.group_size: expected group_size only with int4 weights (scheme"
        " int8-dynamic-int4-weight in quantize.scheme or quantize.modules, or embeddings int4);"
        " got scheme int8-static"
    )


def test_calibration_data_or_samples() -> None:
    text = GOOD + "quantize:\n  scheme: int8-static\n  calibration: {data: c.npz, samples: 8}\n"
    assert error_of(text) == (
        "recipes/x.yaml:7:30: quantize.calibration.samples: expected data or samples, not both"
        " (data is set at recipes/x.yaml:7:17)"
    )


def test_accuracy_names_one_gate() -> None:
    assert error_of(GOOD + "quantize: {scheme: int8-dynamic, accuracy: {fallback: auto}}\n") == (
        "recipes/x.yaml:5:34: quantize.accuracy: expected min_snr_db or top1_agreement; got neither"
    )
    text = GOOD + "quantize: {scheme: int8-dynamic, accuracy: {min_snr_db: 30, top1_agreement: 0.9}}\n"
    assert error_of(text) == (
        "recipes/x.yaml:5:61: quantize.accuracy.top1_agreement: expected min_snr_db or top1_agreement,"
        " not both (min_snr_db is set at recipes/x.yaml:5:45)"
    )
    text = GOOD + "quantize: {scheme: int8-dynamic, accuracy: {top1_agreement: 95}}\n"
    assert error_of(text) == (
        "recipes/x.yaml:5:61: quantize.accuracy.top1_agreement: expected a fraction in (0, 1]; got 95"
    )


def test_unknown_backend_key_suggests_the_nearest() -> None:
    assert error_of(GOOD + "backends: [{name: xnnpack, option: {}}]\n") == (
        "recipes/x.yaml:5:28: backends[0].option: unknown key 'option' — did you mean 'options'?"
    )


def test_backend_listed_twice() -> None:
    assert error_of(GOOD + "backends: [{name: xnnpack}, {name: xnnpack}]\n") == (
        "recipes/x.yaml:5:30: backends[1].name: backend 'xnnpack' is already defined"
    )


def test_backend_option_names_are_identifiers() -> None:
    assert error_of(GOOD + "backends: [{name: xnnpack, options: {Min-Nodes: 1}}]\n") == (
        "recipes/x.yaml:5:38: backends[0].options.Min-Nodes: expected an option name of lowercase letters,"
        " digits and '_' that starts with a letter; got 'Min-Nodes'"
    )


# ---------------------------------------------------------------------------- hostile or broken files


def test_zero_sizes_are_refused_at_load() -> None:
    expected = (
        "recipes/x.yaml:6:32: memory.levels[0].bytes: expected a size in bytes: a positive integer or a"
        " string like '256KiB' (suffix B, KiB, MiB or GiB), or 'unbounded' / null for no limit; got {}"
    )
    for size, shown in (("0KiB", "'0KiB'"), ("0", "0"), ("0 B", "'0 B'")):
        text = GOOD + f"memory:\n  levels: [{{name: sram, bytes: {size}}}, {{name: dram}}]\n"
        assert error_of(text) == expected.format(shown)
    assert error_of(GOOD + "memory:\n  rules: [{level: dram, max_bytes: 0KiB}]\n") == (
        "recipes/x.yaml:6:36: memory.rules[0].max_bytes: expected a size in bytes: a positive integer or"
        " a string like '4KiB' (suffix B, KiB, MiB or GiB); got '0KiB'"
    )


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


def test_long_extends_chain() -> None:
    for i in range(40):
        write(f"base/b{i}.yaml", f"extends: b{i + 1}.yaml\n" if i < 39 else "verify: {samples: 1}\n")
    message = error_of("extends: base/b0.yaml\n" + GOOD)
    assert message.startswith(
        "recipes/base/b30.yaml:1:10: extends: expected a chain of at most 32 recipes; got more:"
        " recipes/x.yaml -> recipes/base/b0.yaml -> recipes/base/b1.yaml"
    )
    assert message.endswith("recipes/base/b30.yaml -> recipes/base/b31.yaml")
