"""etbuild.recipe: schema errors, with the nearest valid key or value in the message."""

from __future__ import annotations

from tests.etbuild.recipe.support import DYNAMIC, GOOD, METHODS, error_of


def test_unknown_key_suggests_the_nearest() -> None:
    assert error_of(GOOD + "quantise: {scheme: int8-static}\n") == (
        "recipes/x.yaml:5:1: quantise: unknown key 'quantise' — did you mean 'quantize'?"
    )



def test_unknown_key_without_a_near_miss_lists_the_keys() -> None:
    assert error_of(GOOD + "verify: {zzz: 1}\n") == (
        "recipes/x.yaml:5:10: verify.zzz: unknown key 'zzz';"
        " expected one of samples, rtol, atol, seed, bundle, tokens, agreement, fallback"
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



def test_bounds_on_a_float_input() -> None:
    text = GOOD.replace("dtype: float32}", "dtype: float32, high: 3}")
    assert error_of(text) == (
        "recipes/x.yaml:4:44: model.inputs[0].high: expected high only with an integer dtype;"
        " got dtype float32"
    )



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



def test_unknown_observer_names_the_key_and_the_observers() -> None:
    assert error_of(GOOD + "quantize:\n  scheme: int8-static\n  calibration: {observer: percentil}\n") == (
        "recipes/x.yaml:7:27: quantize.calibration.observer: expected one of minmax, histogram, percentile, mse, auto;"
        " got 'percentil' — did you mean 'percentile'?"
    )


def test_a_module_override_mapping_is_checked_key_by_key() -> None:
    text = GOOD + "quantize:\n  scheme: int8-static\n  modules: {'head*': {observer: mse, schem: float}}\n"
    assert error_of(text) == (
        "recipes/x.yaml:7:38: quantize.modules.head*.schem: unknown key 'schem' — did you mean 'scheme'?")
    text = GOOD + "quantize:\n  scheme: int8-static\n  modules: {'head*': {observer: minmix}}\n"
    assert error_of(text) == (
        "recipes/x.yaml:7:33: quantize.modules.head*.observer: expected one of minmax, histogram, percentile, mse,"
        " auto; got 'minmix' — did you mean 'minmax'?"
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



def test_unknown_backend_key_suggests_the_nearest() -> None:
    assert error_of(GOOD + "backends: [{name: xnnpack, option: {}}]\n") == (
        "recipes/x.yaml:5:28: backends[0].option: unknown key 'option' — did you mean 'options'?"
    )



def test_backend_option_names_are_identifiers() -> None:
    assert error_of(GOOD + "backends: [{name: xnnpack, options: {Min-Nodes: 1}}]\n") == (
        "recipes/x.yaml:5:38: backends[0].options.Min-Nodes: expected an option name of lowercase letters,"
        " digits and '_' that starts with a letter; got 'Min-Nodes'"
    )


def test_bad_weights_method_suggests_the_nearest() -> None:
    assert error_of(GOOD + "quantize: {scheme: int8-dynamic, weights: gptx}\n") == (
        "recipes/x.yaml:5:43: quantize.weights: expected one of rounded, gptq; got 'gptx' — did you mean 'gptq'?"
    )
