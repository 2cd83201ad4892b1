"""The Ethos-U backend's recipe options: targets, defaults per family, errors naming the key and the valid values."""

from __future__ import annotations

from pathlib import Path

import pytest

from etbuild.backends.ethos_u.options import EthosUOptions
from etbuild.backends.ethos_u.targets import TARGETS, family, macs
from etbuild.backends.options import OptionError, parse_options
from etbuild.recipe import load_recipe
from tests.etbuild.recipe.support import GOOD, REPO_RECIPES, error_of


def test_defaults_follow_the_family_as_executorch_does() -> None:
    u55 = parse_options(EthosUOptions, {"target": "ethos-u55-128"}, "ethos-u")
    assert (u55.system_config, u55.memory_mode) == ("Ethos_U55_High_End_Embedded", "Shared_Sram")
    u85 = parse_options(EthosUOptions, {"target": "ethos-u85-256"}, "ethos-u")
    assert (u85.system_config, u85.memory_mode) == ("Ethos_U85_SYS_DRAM_Mid", "Sram_Only")
    assert family("ethos-u65-512").tosa_spec == "TOSA-1.0+INT+int16+int4+u55"
    assert family("ethos-u85-256").tosa_spec == "TOSA-1.0+INT+int16+int4+cf"
    assert [macs(t) for t in TARGETS if t.startswith("ethos-u55")] == [32, 64, 128, 256]


def test_an_unknown_target_names_the_valid_ones_and_the_near_miss() -> None:
    with pytest.raises(OptionError) as caught:
        parse_options(EthosUOptions, {"target": "ethos-u55-12"}, "ethos-u")
    assert caught.value.key == "target"
    assert str(caught.value) == (
        f"expected one of {', '.join(TARGETS)} for option 'target' of backend ethos-u; got 'ethos-u55-12'"
        " — did you mean 'ethos-u55-128'?")


def test_a_u55_cannot_take_dedicated_sram_or_a_u85_system() -> None:
    with pytest.raises(OptionError, match="memory_mode Dedicated_Sram needs an Ethos-U65 or U85"):
        parse_options(EthosUOptions, {"target": "ethos-u55-128", "memory_mode": "Dedicated_Sram"}, "ethos-u")
    with pytest.raises(OptionError, match="system_config Ethos_U85_SYS_DRAM_Mid is not one for an Ethos-U55"):
        parse_options(EthosUOptions, {"target": "ethos-u55-64", "system_config": "Ethos_U85_SYS_DRAM_Mid"}, "ethos-u")


def test_a_recipe_error_points_at_the_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # error_of writes recipes/x.yaml under the working directory
    message = error_of(GOOD + "backends: [{name: ethos-u, options: {target: ethos-u85-265}}]\n")
    assert message.startswith("recipes/x.yaml:5:38: backends[0].options.target: expected one of ethos-u55-32,")
    assert message.endswith("got 'ethos-u85-265' — did you mean 'ethos-u85-256'?")
    message = error_of(GOOD + "backends: [{name: ethos-u, options: {memory_mode: Shared Sram}}]\n")
    assert "expected a non-empty name without spaces for option 'memory_mode'" in message


@pytest.mark.parametrize(("name", "target", "mode"), [
    ("kws-ethos-u55", "ethos-u55-128", "Shared_Sram"), ("cnn-ethos-u85", "ethos-u85-256", "Sram_Only")])
def test_the_repository_recipes_load(name: str, target: str, mode: str) -> None:
    recipe = load_recipe(REPO_RECIPES / f"{name}.yaml")
    (backend,) = recipe.backends
    options = parse_options(EthosUOptions, backend.options, backend.name)
    assert (backend.name, options.target, options.memory_mode) == ("ethos-u", target, mode)
    assert recipe.quantize.scheme == "int8-static"
