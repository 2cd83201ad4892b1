"""etbuild.recipe: normalising a valid recipe: sizes, paths, methods, dynamic dims and the typed sections."""

from __future__ import annotations

from pathlib import Path

import pytest

from etbuild.recipe import (
    AccuracyConfig,
    BackendConfig,
    CalibrationConfig,
    DimRange,
    InputSpec,
    LevelConfig,
    MethodSpec,
    ModuleOverride,
    OperatorsConfig,
    QuantizeConfig,
    RuleConfig,
    load_recipe,
)
from tests.etbuild.recipe.support import DYNAMIC, GOOD, METHODS, QUANTIZE, write


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


@pytest.mark.usefixtures("in_tmp")
def test_observers_load_with_auto_by_default() -> None:
    text = GOOD + "quantize:\n  scheme: int8-static\n  modules: {'head*': {observer: mse}, a: {scheme: float}}\n"
    quantize = load_recipe(write("q.yaml", text)).quantize
    assert quantize.calibration.observer == "auto"
    assert quantize.modules == (ModuleOverride("head*", observer="mse"), ModuleOverride("a", scheme="float"))
    text = GOOD + "quantize:\n  scheme: int8-static\n  calibration: {observer: percentile}\n"
    assert load_recipe(write("p.yaml", text)).quantize.calibration.observer == "percentile"



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



def test_int4_weights_with_xnnpack_load() -> None:
    text = GOOD + "quantize: {scheme: int8-dynamic-int4-weight}\nbackends: [{name: xnnpack}]\n"
    recipe = load_recipe(write("x.yaml", text))
    assert recipe.quantize is not None and recipe.quantize.scheme == "int8-dynamic-int4-weight"
