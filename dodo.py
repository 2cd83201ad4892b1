"""doit entry point: `doit` builds and verifies every recipe under recipes/.

`doit list --all` lists the tasks (`stage:recipe`); the tasks come from etbuild.build.driver.
"""

from pathlib import Path

from etbuild.build.driver import doit_namespace
from etbuild.recipe import discover_recipes, load_recipe

globals().update(doit_namespace([load_recipe(p) for p in discover_recipes("recipes")], Path("build")))
