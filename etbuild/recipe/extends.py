"""`extends:`: a recipe deep-merged onto the base it names, recursively.

Mappings merge key by key; lists and scalars replace. Keys keep the base's order, new keys
follow, except in an ordered mapping marked `x-merge: extending-first` in the schema
(`quantize.modules`, where the first matching glob wins): there the extending recipe's keys
come first, then the base's keys it does not repeat, so a product's overrides take
precedence over its base's. Locations follow the data they describe, so an error in a value
that came from a base names the base file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from etbuild.recipe.config import SCHEMA, resolve, schema_at
from etbuild.recipe.parse import Doc, parse
from etbuild.recipe.places import KeyPath, Location, located_error, show

MAX_CHAIN = 32
"""The most recipes one `extends:` chain may hold (deeper chains are a mistake, or an attack)."""


def load_chain(shown: str, chain: tuple[tuple[str, Path], ...] = ()) -> Doc:
    """Parse `shown` and, recursively, the bases it extends; return them merged."""
    doc = parse(shown)
    if "extends" not in doc.data:
        return doc
    base_ref = doc.data.pop("extends")
    where = doc.values[("extends",)]
    if not isinstance(base_ref, str) or not base_ref:
        expected = schema_at("extends")["x-expected"]
        raise located_error(where, ("extends",), f"expected {expected}; got {show(base_ref)}")
    base_shown = os.path.normpath(os.path.join(os.path.dirname(shown), base_ref))
    chain = (*chain, (shown, doc.files[shown]))
    _check_base(where, base_ref, base_shown, chain)
    return _merge(load_chain(base_shown, chain), doc)


def _check_base(where: Location, base_ref: str, base_shown: str, chain: tuple[tuple[str, Path], ...]) -> None:
    """The base exists and closes no cycle; the chain stays within MAX_CHAIN recipes."""
    base_path = Path(base_shown).resolve()
    names = " -> ".join([*(name for name, _ in chain), base_shown])
    if any(path == base_path for _, path in chain):
        raise located_error(where, ("extends",), f"cycle in the extends chain: {names}")
    if len(chain) >= MAX_CHAIN:
        message = f"expected a chain of at most {MAX_CHAIN} recipes; got more: {names}"
        raise located_error(where, ("extends",), message)
    if not base_path.is_file():
        message = f"expected an existing recipe file; got '{base_ref}' ({base_shown} not found)"
        raise located_error(where, ("extends",), message)


def _merge(base: Doc, over: Doc) -> Doc:
    """`over` deep-merged onto `base`, locations following the data they describe."""
    replaced: list[KeyPath] = []
    data = _merge_values(base.data, over.data, (), replaced)

    def kept(places: dict[KeyPath, Location]) -> dict[KeyPath, Location]:
        return {p: w for p, w in places.items() if not any(p[: len(r)] == r for r in replaced)}

    return Doc(
        data,
        {**kept(base.keys), **over.keys},
        {**kept(base.values), **over.values},
        {**over.files, **base.files},
    )


def _merge_values(base: Any, over: Any, path: KeyPath, replaced: list[KeyPath]) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        merged = dict(base)
        for key, value in over.items():
            if key in base:
                merged[key] = _merge_values(base[key], value, (*path, key), replaced)
            else:
                merged[key] = value
        if _extending_first(path):
            return {**{key: merged[key] for key in over}, **merged}
        return merged
    replaced.append(path)
    return over


def _extending_first(path: KeyPath) -> bool:
    """Whether the schema marks the mapping at `path` `x-merge: extending-first`."""
    schema = SCHEMA
    for key in path:
        properties = resolve(schema).get("properties", {})
        if not isinstance(key, str) or key not in properties:
            return False
        schema = properties[key]
    return resolve(schema).get("x-merge") == "extending-first"
