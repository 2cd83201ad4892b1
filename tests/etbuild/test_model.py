"""etbuild.model and etbuild.zoo: building modules and inputs from recipes, and their errors."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from etbuild.errors import RecipeError
from etbuild.model import (
    TORCH_DTYPES,
    build_model,
    call_method,
    check_runs,
    dynamic_shapes,
    example_inputs,
    method_callable,
    sample_inputs,
)
from etbuild.recipe import Recipe, load_recipe
from etbuild.zoo import mlp

REPO = Path(__file__).resolve().parents[2]

NET_PY = """
from torch import nn

class Net(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(3, width)

    def forward(self, x):
        return self.linear(x)

def build(width=2):
    return Net(width)

def not_a_module():
    return [1, 2]

def broken():
    raise ValueError("no luck")

CONSTANT = 3
"""


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run each test in its own directory so that messages show short relative paths."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipes" / "nets").mkdir(parents=True)
    (tmp_path / "recipes" / "nets" / "net.py").write_text(NET_PY)
    return tmp_path


def recipe_with(model_lines: str, inputs: str = "[{shape: [2, 3], dtype: float32}]") -> Recipe:
    """A recipe whose `model:` holds `model_lines` (one `key: value` per line) and `inputs`."""
    body = textwrap.indent(textwrap.dedent(model_lines).strip(), "  ")
    text = f"name: t\nmodel:\n{body}\n  inputs: {inputs}\n"
    Path("recipes/t.yaml").write_text(text)
    return load_recipe("recipes/t.yaml")


def error_of(recipe: Recipe) -> str:
    with pytest.raises(RecipeError) as info:
        build_model(recipe)
    return str(info.value)


# ---------------------------------------------------------------------------- zoo


def test_mlp_layers() -> None:
    model = mlp([4, 8, 2])
    assert [type(layer).__name__ for layer in model] == ["Linear", "ReLU", "Linear"]
    assert model(torch.zeros(5, 4)).shape == (5, 2)


def test_mlp_needs_two_sizes() -> None:
    with pytest.raises(ValueError, match=r"mlp needs at least two sizes"):
        mlp([4])


# ---------------------------------------------------------------------------- building


def test_repo_mlp_builds_reproducibly() -> None:
    recipe = load_recipe(REPO / "recipes" / "mlp.yaml")
    first, second = build_model(recipe), build_model(recipe)
    assert not first.training
    for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    (x,) = example_inputs(recipe)
    assert (x.shape, x.dtype) == ((1, 784), torch.float32)
    assert first(x).shape == (1, 10)


def test_seed_changes_the_initialization_and_leaves_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    zero = build_model(recipe_with("factory: etbuild.zoo:mlp\nkwargs: {sizes: [3, 2]}"))
    assert torch.equal(torch.rand(1), expected_next)
    seven = build_model(recipe_with("factory: etbuild.zoo:mlp\nkwargs: {sizes: [3, 2]}\nseed: 7"))
    assert not torch.equal(zero[0].weight, seven[0].weight)


def test_file_factory_with_kwargs() -> None:
    model = build_model(recipe_with("factory: nets/net.py:build\nkwargs: {width: 5}"))
    assert type(model).__name__ == "Net"
    assert model(torch.zeros(2, 3)).shape == (2, 5)


def test_weights_round_trip() -> None:
    source = build_model(recipe_with("factory: nets/net.py:build\nseed: 11"))
    torch.save(source.state_dict(), "recipes/net.pt")
    loaded = build_model(recipe_with("factory: nets/net.py:build\nweights: net.pt"))
    assert torch.equal(loaded.linear.weight, source.linear.weight)
    assert torch.equal(loaded.linear.bias, source.linear.bias)


# ---------------------------------------------------------------------------- inputs


def test_example_inputs_are_deterministic() -> None:
    recipe = recipe_with("factory: etbuild.zoo:mlp", inputs="[{shape: [2, 3], dtype: float64}]")
    (first,), (second,) = example_inputs(recipe), example_inputs(recipe)
    assert first.dtype == torch.float64
    assert torch.equal(first, second)


def test_sample_inputs_follow_dtypes_and_bounds() -> None:
    inputs = (
        "[{shape: [64], dtype: int32, low: -3, high: 3}, {shape: [64], dtype: uint8},"
        " {shape: [64], dtype: bool}, {shape: [2], dtype: float16}]"
    )
    recipe = recipe_with("factory: etbuild.zoo:mlp", inputs=inputs)
    samples = sample_inputs(recipe, 3, seed=5)
    assert len(samples) == 3
    ints, small, flags, halves = samples[0]
    assert (ints.dtype, small.dtype, flags.dtype, halves.dtype) == (
        torch.int32,
        torch.uint8,
        torch.bool,
        torch.float16,
    )
    assert int(ints.min()) >= -3 and int(ints.max()) < 3
    assert int(small.max()) < 10
    assert not torch.equal(samples[0][0], samples[1][0])
    again = sample_inputs(recipe, 3, 5)[2]
    assert all(torch.equal(a, b) for a, b in zip(samples[2], again, strict=True))


def test_torch_dtypes_cover_the_schema_enum() -> None:
    schema = json.loads((REPO / "schema" / "recipe.schema.json").read_text())
    assert list(TORCH_DTYPES) == schema["$defs"]["dtype"]["enum"]


# ---------------------------------------------------------------------------- errors


def test_module_not_importable() -> None:
    assert error_of(recipe_with("factory: etbuild.zooo:mlp")) == (
        "recipes/t.yaml:3:3: model.factory: cannot import module 'etbuild.zooo':"
        " No module named 'etbuild.zooo'"
    )


def test_missing_attribute_suggests_a_public_name() -> None:
    assert error_of(recipe_with("factory: etbuild.zoo:mpl")) == (
        "recipes/t.yaml:3:3: model.factory: module 'etbuild.zoo' has no attribute 'mpl'"
        " — did you mean 'mlp'?"
    )


def test_factory_file_missing(in_tmp: Path) -> None:
    missing = (in_tmp / "recipes" / "nets" / "nett.py").resolve()
    assert error_of(recipe_with("factory: nets/nett.py:build")) == (
        f"recipes/t.yaml:3:3: model.factory: factory file {missing.as_posix()} does not exist"
    )


def test_not_callable(in_tmp: Path) -> None:
    net = (in_tmp / "recipes" / "nets" / "net.py").resolve().as_posix()
    assert error_of(recipe_with("factory: nets/net.py:CONSTANT")) == (
        f"recipes/t.yaml:3:3: model.factory: expected a callable; got int '{net}:CONSTANT'"
    )


def test_factory_returns_something_else() -> None:
    assert error_of(recipe_with("factory: nets/net.py:not_a_module")) == (
        "recipes/t.yaml:3:3: model.factory: expected the factory to return a torch.nn.Module;"
        " got list"
    )


def test_factory_raises() -> None:
    assert error_of(recipe_with("factory: etbuild.zoo:mlp\nkwargs: {sizes: [3]}")) == (
        "recipes/t.yaml:3:3: model.factory: calling etbuild.zoo:mlp raised ValueError:"
        " mlp needs at least two sizes (inputs and outputs); got [3]"
    )


def test_weights_file_missing(in_tmp: Path) -> None:
    weights = (in_tmp / "recipes" / "absent.pt").resolve()
    assert error_of(recipe_with("factory: nets/net.py:build\nweights: absent.pt")) == (
        f"recipes/t.yaml:4:3: model.weights: weights file {weights} does not exist"
    )


def test_weights_do_not_match(in_tmp: Path) -> None:
    torch.save({"linear.weight": torch.zeros(4, 3), "extra": torch.zeros(1)}, "recipes/bad.pt")
    weights = (in_tmp / "recipes" / "bad.pt").resolve()
    assert error_of(recipe_with("factory: nets/net.py:build\nweights: bad.pt")) == (
        f"recipes/t.yaml:4:3: model.weights: {weights} does not match the model:"
        " missing linear.bias; unexpected extra; linear.weight has shape [4, 3], expected [2, 3]"
    )


def test_weights_not_a_state_dict(in_tmp: Path) -> None:
    torch.save([torch.zeros(1)], "recipes/list.pt")
    weights = (in_tmp / "recipes" / "list.pt").resolve()
    assert error_of(recipe_with("factory: nets/net.py:build\nweights: list.pt")) == (
        f"recipes/t.yaml:4:3: model.weights: expected a state_dict (names to tensors)"
        f" in {weights}; got list"
    )


# ---------------------------------------------------------------------------- methods, dynamic dims

TWO_METHODS = """
name: t
model:
  factory: etbuild.zoo:encoder_decoder
  kwargs: {features: 6, hidden: 4, latent: 2}
  methods:
    encode:
      inputs: [{shape: [4, 6], dtype: float32}]
      dynamic: {0: {0: {min: 1, max: 16}}}
    decode:
      inputs: [{shape: [1, 2], dtype: float32}]
"""


def write_recipe(text: str) -> Recipe:
    Path("recipes/t.yaml").write_text(textwrap.dedent(text).lstrip("\n"))
    return load_recipe("recipes/t.yaml")


def dynamic_mlp(dynamic: str = "{0: {0: {min: 1, max: 64}}}") -> Recipe:
    """mlp([3, 2]) with inputs of declared shape [8, 3] and these dynamic dimensions."""
    return recipe_with(
        f"factory: etbuild.zoo:mlp\nkwargs: {{sizes: [3, 2]}}\ndynamic: {dynamic}",
        inputs="[{shape: [8, 3], dtype: float32}]",
    )


def test_example_inputs_have_the_declared_shapes() -> None:
    recipe = dynamic_mlp()
    (first,), (second,) = example_inputs(recipe), example_inputs(recipe)
    assert first.shape == (8, 3)
    assert torch.equal(first, second)


def test_static_inputs_are_the_same_as_before_methods() -> None:
    recipe = recipe_with("factory: etbuild.zoo:mlp")
    (example,) = example_inputs(recipe)
    (sample,) = sample_inputs(recipe, 1, recipe.model.seed)[0]
    assert torch.equal(example, sample)
    for a, b in zip(sample_inputs(recipe, 3, 2), sample_inputs(recipe, 3, 2, method="forward")):
        assert torch.equal(a[0], b[0])


def test_dynamic_sizes_are_max_first_then_drawn_independently() -> None:
    recipe = recipe_with(
        "factory: etbuild.zoo:mlp\ndynamic: {0: {0: {min: 2, max: 9}}, 1: {1: {min: 1, max: 5}}}",
        inputs="[{shape: [3, 4], dtype: float32}, {shape: [2, 3], dtype: int64}]",
    )
    samples = sample_inputs(recipe, 40, seed=3)
    shapes = [(a.shape, b.shape) for a, b in samples]
    assert shapes[0] == ((9, 4), (2, 5))
    assert all(2 <= a[0] <= 9 and a[1] == 4 and b[0] == 2 and 1 <= b[1] <= 5 for a, b in shapes)
    assert {a[0] for a, _ in shapes} == set(range(2, 10))
    assert {b[1] for _, b in shapes} == set(range(1, 6))
    assert len({(a[0], b[1]) for a, b in shapes}) > 9  # the two dimensions vary independently
    assert [s[0].shape for s in sample_inputs(recipe, 40, seed=3)] == [a for a, _ in shapes]


def test_dynamic_shapes_of_a_static_method_is_none() -> None:
    assert dynamic_shapes(recipe_with("factory: etbuild.zoo:mlp")) is None


def test_dynamic_shapes_has_one_entry_per_input() -> None:
    recipe = recipe_with(
        "factory: etbuild.zoo:mlp\ndynamic: {1: {0: {min: 1, max: 8}, 1: {min: 2, max: 3}}}",
        inputs="[{shape: [2, 3], dtype: float32}, {shape: [2, 3], dtype: float32}]",
    )
    shapes = dynamic_shapes(recipe)
    assert shapes is not None and shapes[0] is None
    described = {dim: (d.__name__, d.min, d.max) for dim, d in shapes[1].items()}
    assert described == {0: ("forward_input1_dim0", 1, 8), 1: ("forward_input1_dim1", 2, 3)}


def test_export_with_dynamic_shapes_runs_from_min_to_max() -> None:
    recipe = dynamic_mlp()
    model = build_model(recipe)
    ep = torch.export.export(
        model, example_inputs(recipe), dynamic_shapes=dynamic_shapes(recipe), strict=False
    )
    assert [(r.lower, r.upper) for r in ep.range_constraints.values()] == [(1, 64)]
    exported = ep.module()
    for (x,) in [*sample_inputs(recipe, 4, seed=1), (torch.randn(1, 3),)]:
        torch.testing.assert_close(exported(x), model(x))


def test_methods_have_their_own_inputs() -> None:
    recipe = write_recipe(TWO_METHODS)
    (z,) = example_inputs(recipe, "decode")
    assert z.shape == (1, 2)
    assert [x.shape for (x,) in sample_inputs(recipe, 2, 0, method="encode")][0] == (16, 6)
    (encode_dims,) = dynamic_shapes(recipe, "encode") or ()
    assert encode_dims[0].__name__ == "encode_input0_dim0"
    assert dynamic_shapes(recipe, "decode") is None


def test_method_callable_gives_the_bound_method() -> None:
    recipe = write_recipe(TWO_METHODS)
    model = build_model(recipe)
    encode = method_callable(model, "encode", recipe)
    (x,) = example_inputs(recipe, "encode")
    assert torch.equal(encode(x), model.encode(x))
    assert method_callable(model, "decode") == model.decode


def test_inputs_of_an_unknown_method() -> None:
    with pytest.raises(KeyError) as info:
        example_inputs(write_recipe(TWO_METHODS))
    assert info.value.args[0] == "no method 'forward' in this recipe; it has decode, encode"


def test_model_without_the_recipes_method() -> None:
    assert error_of(write_recipe(TWO_METHODS.replace("    decode:", "    decdoe:"))) == (
        "recipes/t.yaml:9:5: model.methods.decdoe: the model (EncoderDecoder) has no method"
        " 'decdoe' — did you mean 'decode'?"
    )


def test_recipe_method_that_is_not_a_method() -> None:
    assert error_of(write_recipe(TWO_METHODS.replace("    decode:", "    decoder:"))) == (
        "recipes/t.yaml:9:5: model.methods.decoder: expected a method; the model's"
        " (EncoderDecoder) 'decoder' is a Sequential"
    )


def test_model_without_forward() -> None:
    assert error_of(recipe_with("factory: etbuild.zoo:encoder_decoder")) == (
        "recipes/t.yaml:4:3: model.inputs: the model (EncoderDecoder) has no forward method;"
        " list the methods to export in model.methods"
    )


def test_method_callable_without_a_recipe() -> None:
    with pytest.raises(ValueError) as info:
        method_callable(mlp([2, 1]), "encode")
    assert str(info.value) == "the model (Sequential) has no method 'encode'"


# ---------------------------------------------------------------------------- the model's first run


def run_error(recipe: Recipe) -> str:
    with pytest.raises(RecipeError) as info:
        check_runs(recipe)
    return str(info.value)


def test_an_int_input_to_a_float_model_names_its_dtype() -> None:
    path = REPO / "recipes" / "errors" / "mlp-int64-input.yaml"
    assert run_error(load_recipe(path)) == (
        f"{path}:6:30: model.inputs[0].dtype: expected a dtype the model takes; got int64 (forward raised"
        " RuntimeError: mat1 and mat2 must have the same dtype, but got Long and Float; it runs with float32)"
    )


def test_a_float_input_to_an_embedding_names_its_dtype() -> None:
    recipe = recipe_with("factory: etbuild.zoo:embed_argmax", inputs="[{shape: [1, 4], dtype: float32}]")
    assert run_error(recipe) == (
        "recipes/t.yaml:4:28: model.inputs[0].dtype: expected a dtype the model takes; got float32 (forward"
        " raised RuntimeError: Expected tensor for argument #1 'indices' to have one of the following scalar"
        " types: Long, Int; but got torch.FloatTensor instead (while checking arguments for embedding);"
        " it runs with int64)"
    )


def test_a_method_input_names_its_dtype() -> None:
    text = TWO_METHODS.replace("[{shape: [1, 2], dtype: float32}]", "[{shape: [1, 2], dtype: int32}]")
    assert run_error(write_recipe(text)) == (
        "recipes/t.yaml:10:32: model.methods.decode.inputs[0].dtype: expected a dtype the model takes; got"
        " int32 (decode raised RuntimeError: mat1 and mat2 must have the same dtype, but got Int and Float;"
        " it runs with float32)"
    )


def test_inputs_the_model_cannot_take_for_another_reason() -> None:
    recipe = recipe_with("factory: nets/net.py:build", inputs="[{shape: [2, 4], dtype: float32}]")
    assert run_error(recipe) == (
        "recipes/t.yaml:4:3: model.inputs: expected inputs the model takes; forward raised RuntimeError:"
        " mat1 and mat2 shapes cannot be multiplied (2x4 and 3x2)"
    )


def test_the_first_run_leaves_no_state_behind() -> None:
    recipe = recipe_with("factory: etbuild.zoo:running_stats\nkwargs: {features: 3}")
    check_runs(recipe)
    model = build_model(recipe)
    assert int(model.count) == 0
    call_method(recipe, model, "forward", example_inputs(recipe))
    assert int(model.count) == 1
