"""The format, recipe and release schemas, shipped as package data (`etbuild.schema`)."""

from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parent
PROGRAM_FBS = SCHEMA_DIR / "program.fbs"
RECIPE_SCHEMA = SCHEMA_DIR / "recipe.schema.json"
RELEASE_SCHEMA = SCHEMA_DIR / "release.schema.json"
