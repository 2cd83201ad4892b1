"""Helpers for the etbuild.recipe tests: recipe texts, writing a recipe, the error it raises."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from etbuild.errors import RecipeError
from etbuild.recipe import load_recipe

REPO = Path(__file__).resolve().parents[3]
REPO_RECIPES = REPO / "recipes"

GOOD = """
name: good
model:
  factory: etbuild.zoo:mlp
  inputs: [{shape: [1, 4], dtype: float32}]
"""

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
