"""etbuild.recipe: what the schema cannot say: dynamic dims, memory rules, quantize and backend combinations."""

from __future__ import annotations

from pathlib import Path

import pytest

from etbuild.recipe import (
    NOT_SUPPORTED_YET,
    InputSpec,
    format_key_path,
    load_recipe,
)
from tests.etbuild.recipe.support import DYNAMIC, GOOD, METHODS, error_of, write

UNSUPPORTED_SETTINGS = {
    ("memory", "levels", 1): "memory: {levels: [{name: sram, bytes: 1KiB}, {name: dram}]}\n",
}



def test_int_input_bounds() -> None:
    text = GOOD.replace(
        "{shape: [1, 4], dtype: float32}", "{shape: [3], dtype: int32, low: -5, high: 5}"
    )
    assert load_recipe(write("ints.yaml", text)).model.inputs == (
        InputSpec(shape=(3,), dtype="int32", low=-5, high=5),
    )



@pytest.mark.parametrize("path", NOT_SUPPORTED_YET, ids=format_key_path)
def test_every_unsupported_key_path_is_rejected(path: tuple[str | int, ...]) -> None:
    section = format_key_path(tuple(part for part in path if isinstance(part, str)))
    message = error_of(GOOD + UNSUPPORTED_SETTINGS[path])
    assert message.endswith(f": {format_key_path(path)}: not supported yet: {section}")



def test_an_empty_backends_list_is_not_a_setting() -> None:
    assert load_recipe(write("good.yaml", GOOD + "backends: []\nquantize: null\n")).backends == ()



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



def test_int_bounds_out_of_order() -> None:
    text = GOOD.replace("dtype: float32}", "dtype: int64, low: 5, high: 5}")
    assert error_of(text) == (
        "recipes/x.yaml:4:50: model.inputs[0].high: expected an integer > low (5); got 5"
    )



def test_unknown_method_lists_the_recipes_methods() -> None:
    recipe = load_recipe(write("two.yaml", METHODS))
    with pytest.raises(KeyError) as info:
        recipe.model.method("forward")
    assert info.value.args[0] == "no method 'forward' in this recipe; it has decode, encode"



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



def test_int_bounds_are_checked_in_methods() -> None:
    assert error_of(METHODS.replace("name: z}", "name: z, low: 3}")) == (
        "recipes/x.yaml:9:57: model.methods.decode.inputs[0].low: expected low only with an"
        " integer dtype; got dtype float32"
    )



def test_unknown_backend_lists_the_backends() -> None:
    assert error_of(GOOD + "backends: [{name: xnnpak}]\n") == (
        "recipes/x.yaml:5:13: backends[0].name: expected one of the backends xnnpack, ethos-u, tosa; got 'xnnpak'"
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



def test_group_size_is_a_power_of_two() -> None:
    assert error_of(GOOD + "quantize: {scheme: int8-dynamic-int4-weight, group_size: 48}\n") == (
        "recipes/x.yaml:5:58: quantize.group_size: expected a power of two; got 48"
    )



def test_calibration_only_with_a_static_scheme() -> None:
    assert error_of(GOOD + "quantize: {scheme: int8-dynamic, calibration: {samples: 8}}\n") == (
        "recipes/x.yaml:5:34: quantize.calibration: expected calibration only with scheme int8-static"
        " (in quantize.scheme or quantize.modules) or weights gptq; got scheme int8-dynamic"
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



def test_backend_listed_twice() -> None:
    assert error_of(GOOD + "backends: [{name: xnnpack}, {name: xnnpack}]\n") == (
        "recipes/x.yaml:5:30: backends[1].name: backend 'xnnpack' is already defined"
    )



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


def test_weights_only_with_int4_linears() -> None:
    assert error_of(GOOD + "quantize: {scheme: int8-static, weights: gptq}\n") == (
        "recipes/x.yaml:5:33: quantize.weights: expected weights only with int4 linear weights (scheme"
        " int8-dynamic-int4-weight in quantize.scheme or quantize.modules); got scheme int8-static"
    )


@pytest.mark.usefixtures("supported")
def test_calibration_with_int4_linears_only_for_gptq() -> None:
    int4 = (GOOD + "backends: [{name: xnnpack}]\n"
            "quantize: {scheme: int8-dynamic-int4-weight, weights: %s, calibration: {samples: 4, text: t.txt}}\n")
    assert error_of(int4 % "rounded") == (
        "recipes/x.yaml:6:64: quantize.calibration: expected calibration only with scheme int8-static"
        " (in quantize.scheme or quantize.modules) or weights gptq; got scheme int8-dynamic-int4-weight"
    )
    write("t.txt", "calibration text")  # the text must name a file (a missing one: test_llm_calibration)
    quantize = load_recipe(write("g.yaml", int4 % "gptq")).quantize
    assert quantize is not None and quantize.weights == "gptq" and quantize.calibration.samples == 4
    assert quantize.calibration.text == (Path("recipes") / "t.txt").resolve()
