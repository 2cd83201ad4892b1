"""etbuild.model and etbuild.zoo: building modules and inputs from recipes, and their errors."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from etbuild.errors import RecipeError
from etbuild.model import TORCH_DTYPES, build_model, example_inputs, sample_inputs
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
