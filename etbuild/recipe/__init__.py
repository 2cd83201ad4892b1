"""Recipes: read YAML, resolve `extends:`, validate, fill defaults, give frozen dataclasses.

`load_recipe` runs these steps in order, one module each:

1. `parse`: read each file safely and within bounds, keeping the file:line:column of every
   key and value;
2. `extends`: deep-merge the `extends:` chain (mappings merge key by key; lists and scalars replace);
   `llm`: expand `model.llm` (a language model) into the model section it stands for;
3. `validate`: check against `schema/recipe.schema.json`; `checks`: what the schema cannot say
   (exactly one of `model.inputs` and `model.methods`, integer input bounds, dynamic dimensions
   that name real inputs and hold their declared sizes, quantize keys that go with the scheme,
   unique backend and level names, rules that name levels), then reject the sections in
   `NOT_SUPPORTED_YET`;
4. `complete`: fill defaults from the schema's `default` fields (the only place defaults are
   written), normalise sizes and file paths, and build the frozen dataclasses of `config`.

Every `RecipeError` reads `file:line:column: key.path[0]: what was wrong`, pointing into the file
(product or base) that holds the offending node (`places`).
"""

from __future__ import annotations

import os
from pathlib import Path

from etbuild.recipe.checks import NOT_SUPPORTED_YET, check, reject_unsupported
from etbuild.recipe.complete import complete
from etbuild.recipe.config import (
    AccuracyConfig,
    BackendConfig,
    CalibrationConfig,
    DimRange,
    EmitConfig,
    FrozenMapping,
    InputSpec,
    LevelConfig,
    MemoryConfig,
    MethodSpec,
    ModelConfig,
    ModuleOverride,
    OperatorsConfig,
    QuantizeConfig,
    Recipe,
    RuleConfig,
    VerifyConfig,
    WeightsConfig,
)
from etbuild.recipe.extends import load_chain
from etbuild.recipe.llm import expand_llm
from etbuild.recipe.places import KeyPath, Location, format_key_path, parse_key_path
from etbuild.recipe.validate import validate

__all__ = [
    "NOT_SUPPORTED_YET",
    "AccuracyConfig",
    "BackendConfig",
    "CalibrationConfig",
    "DimRange",
    "EmitConfig",
    "FrozenMapping",
    "InputSpec",
    "KeyPath",
    "LevelConfig",
    "Location",
    "MemoryConfig",
    "MethodSpec",
    "ModelConfig",
    "ModuleOverride",
    "OperatorsConfig",
    "QuantizeConfig",
    "Recipe",
    "RuleConfig",
    "VerifyConfig",
    "WeightsConfig",
    "discover_recipes",
    "format_key_path",
    "load_recipe",
    "parse_key_path",
]


def load_recipe(path: str | Path) -> Recipe:
    """Load, merge, validate and complete the recipe at `path` (messages name it as given)."""
    doc = load_chain(os.fspath(path))
    expand_llm(doc)
    validate(doc)
    check(doc)
    reject_unsupported(doc)
    return complete(Path(path), doc)


def discover_recipes(root: str | Path = "recipes") -> list[Path]:
    """Every `*.yaml` product recipe under `root`, sorted.

    Files under a `base/` folder are bases, not products; files under an `errors/` folder are
    recipes that must fail (examples of error messages, built by the tests).
    """
    root = Path(root)
    return sorted(
        path
        for path in root.rglob("*.yaml")
        if path.is_file() and not {"base", "errors"} & set(path.relative_to(root).parts[:-1])
    )
