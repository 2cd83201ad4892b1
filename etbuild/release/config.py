"""Release files: read, validate and load into frozen dataclasses.

A release file is read like a recipe (`etbuild.recipe.parse`: safely, within bounds, every key
located), validated against `schema/release.schema.json` with the recipe's messages
(file:line:column, key path, what was expected, did-you-mean), then checked for what the
schema cannot say: the recipe files exist and load, product names are unique, runtime groups
name real products and every product ships with at least one runtime. Paths are relative to
the release file. Without `runtimes:`, one runtime `all` holds every product.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etbuild.errors import did_you_mean
from etbuild.recipe import Recipe, load_recipe
from etbuild.recipe.complete import parse_size
from etbuild.recipe.parse import Doc, parse
from etbuild.recipe.places import KeyPath, located_error
from etbuild.recipe.validate import validate, validator
from etbuild.schema import RELEASE_SCHEMA

_VALIDATOR = validator(json.loads(RELEASE_SCHEMA.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class Budget:
    """Limits a product must stay within; None: no limit."""

    pte_bytes: int | None = None
    runtime_bytes: int | None = None
    download_bytes: int | None = None  # the `.pte` and its weights file: what a device downloads to install it
    latency_ms: float | None = None
    sram_bytes: int | None = None  # the first memory level's peak: CPU arenas there and the largest delegate's
    flash_bytes: int | None = None  # what a device keeps in flash: the shipped `.pte` and weights file


@dataclass(frozen=True)
class Product:
    """One product: its recipe (loaded), the path as the release file wrote it, its budget, and whether its
    `.pte` ships with the named data only etbuild's simulation reads (etbuild.release.simulation)."""

    recipe: Recipe
    written: str
    budget: Budget
    keep_simulation: bool = False

    @property
    def name(self) -> str:
        return self.recipe.name


@dataclass(frozen=True)
class RuntimeGroup:
    """A trimmed runtime holding the union of its products' operators, features and dtypes."""

    name: str
    products: tuple[str, ...]


@dataclass(frozen=True)
class Release:
    """A loaded release file."""

    name: str
    version: str
    path: Path
    products: tuple[Product, ...]
    runtimes: tuple[RuntimeGroup, ...]
    sign_key: str | None

    @property
    def dist_name(self) -> str:
        return f"{self.name}-{self.version}"

    def product(self, name: str) -> Product:
        return next(p for p in self.products if p.name == name)

    def runtimes_of(self, product: str) -> tuple[RuntimeGroup, ...]:
        """The runtimes a product ships with."""
        return tuple(g for g in self.runtimes if product in g.products)


def load_release(path: str | Path) -> Release:
    """Load, validate and check the release file at `path` (messages name it as given)."""
    doc = parse(str(path), holds="release keys (name, version, products, …)")
    validate(doc, _VALIDATOR)
    products = tuple(_product(doc, i, item) for i, item in enumerate(doc.data["products"]))
    _check_unique(doc, products)
    runtimes = _runtimes(doc, products)
    sign = doc.data.get("sign")
    return Release(doc.data["name"], doc.data["version"], Path(path), products, runtimes,
                   sign["key"] if sign else None)


def _product(doc: Doc, index: int, item: dict[str, Any]) -> Product:
    written = item["recipe"]
    recipe_path = _shown(doc, written)
    if not recipe_path.is_file():
        path = ("products", index, "recipe")
        raise located_error(doc.where(path), path, f"expected an existing recipe file; got '{written}' "
                                                   f"({recipe_path} not found)")
    budget = item.get("budget", {})
    sizes = {k: parse_size(v) if isinstance(v, str) else v for k, v in budget.items() if k != "latency_ms"}
    return Product(load_recipe(recipe_path), written, Budget(**sizes, latency_ms=budget.get("latency_ms")),
                   item.get("simulation_data", "drop") == "keep")


def _shown(doc: Doc, written: str) -> Path:
    """The recipe path as messages show it: beside the release file as the user named it."""
    return Path(next(iter(doc.files))).parent / written


def _check_unique(doc: Doc, products: tuple[Product, ...]) -> None:
    seen: dict[str, int] = {}
    for i, p in enumerate(products):
        if p.name in seen:
            path: KeyPath = ("products", i, "recipe")
            message = f"recipe name '{p.name}' is already the name of products[{seen[p.name]}]"
            raise located_error(doc.where(path), path, message)
        seen[p.name] = i


def _runtimes(doc: Doc, products: tuple[Product, ...]) -> tuple[RuntimeGroup, ...]:
    names = [p.name for p in products]
    groups = doc.data.get("runtimes") or [{"name": "all", "products": "*"}]
    out: list[RuntimeGroup] = []
    for i, group in enumerate(groups):
        if group["name"] in [g.name for g in out]:
            raise located_error(doc.where(("runtimes", i, "name")), ("runtimes", i, "name"),
                                f"runtime name '{group['name']}' is already used")
        members = names if group["products"] == "*" else group["products"]
        for j, member in enumerate(members if group["products"] != "*" else []):
            if member not in names:
                path: KeyPath = ("runtimes", i, "products", j)
                hint = did_you_mean(member, names) or f"; the products are {', '.join(names)}"
                message = f"no product '{member}'{hint}"
                raise located_error(doc.where(path), path, message)
        out.append(RuntimeGroup(group["name"], tuple(dict.fromkeys(members))))
    alone = [n for n in names if not any(n in g.products for g in out)]
    if alone:
        raise located_error(doc.where(("runtimes",)), ("runtimes",),
                            f"products {', '.join(alone)} ship with no runtime; add them to a group")
    return tuple(out)
