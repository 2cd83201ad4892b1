"""Recipes naming one weights file must agree on each key's value (etbuild.build.shared_weights)."""

from __future__ import annotations

from pathlib import Path

from etbuild.build.shared_weights import conflicts, weight_files
from etbuild.recipe import load_recipe
from etbuild.runtime.format import flat_tensor as ft
from etbuild.runtime.format.ptd import write_ptd

RECIPE = """name: {name}
model:
  factory: etbuild.zoo:mlp
  kwargs: {{sizes: [4, 2]}}
  inputs: [{{shape: [1, 4], dtype: float32}}]
emit: {{weights: {weights}}}
"""
LAYOUT = ft.TensorLayout(6, [2], b"\x00")


def _recipe(tmp: Path, name: str, weights: str, entries: dict[str, bytes] | None = None):
    path = tmp / f"{name}.yaml"
    path.write_text(RECIPE.format(name=name, weights=weights))
    recipe = load_recipe(path)
    if entries is not None:
        out = tmp / "build" / name / f"{recipe.emit.weights.file}.ptd"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(write_ptd({k: (v, LAYOUT) for k, v in entries.items()}))
    return recipe


def test_recipes_are_grouped_by_the_file_they_name(tmp_path):
    a = _recipe(tmp_path, "a", "{file: base}")
    b = _recipe(tmp_path, "b", "{file: base, only: ['0.*']}")
    c = _recipe(tmp_path, "c", "external")
    assert b.emit.weights.only == ("0.*",) and c.emit.weights.file == "c"
    files = weight_files([a, b, c], tmp_path / "build")
    assert sorted(files) == ["base.ptd", "c.ptd"] and [r for r, _ in files["base.ptd"]] == ["a", "b"]


def test_equal_values_and_keys_of_one_recipe_only_are_fine(tmp_path):
    a = _recipe(tmp_path, "a", "{file: base}", {"w": b"12345678", "x": b"abcdefgh"})
    b = _recipe(tmp_path, "b", "{file: base}", {"w": b"12345678"})
    assert conflicts([a, b], tmp_path / "build") == []


def test_a_key_with_two_values_names_both_recipes_and_the_key(tmp_path):
    a = _recipe(tmp_path, "a", "{file: base}", {"w": b"12345678"})
    b = _recipe(tmp_path, "b", "{file: base}", {"w": b"87654321"})
    assert conflicts([a, b], tmp_path / "build") == [
        ("b", "recipes a and b both name weights file base.ptd, and key 'w' holds different values in them "
              "(one key, one value: give one of them another file)")]
