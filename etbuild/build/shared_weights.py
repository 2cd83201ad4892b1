"""Recipes that name one weights file must agree on it: a key holds the same value in each.

Two recipes with `emit.weights: {file: base}` write `build/<recipe>/base.ptd` each; the file is
a function of its keys and values (etbuild.runtime.format.ptd.write_ptd), so recipes holding the
same weights write the same bytes, and a release ships one. A key whose value differs between
them is an error naming both recipes and the key: ExecuTorch's runtime would run one program
with the other's weights without a word. Keys only one of them holds are fine (a release ships
their union, etbuild.release.weights).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from etbuild.recipe import Recipe
from etbuild.runtime.data_files import DataFile, load_data_file


def weight_files(recipes: Sequence[Recipe], build_root: Path) -> dict[str, list[tuple[str, Path]]]:
    """Data file name → (recipe, its built `.ptd`) for every recipe that keeps its weights apart."""
    files: dict[str, list[tuple[str, Path]]] = {}
    for r in recipes:
        if r.emit.weights is not None:
            name = f"{r.emit.weights.file}.ptd"
            files.setdefault(name, []).append((r.name, build_root / r.name / name))
    return files


def conflicts(recipes: Sequence[Recipe], build_root: Path) -> list[tuple[str, str]]:
    """(recipe, message) for each key that two recipes naming one data file hold with different values."""
    out = []
    for name, built in weight_files(recipes, build_root).items():
        loaded = [(recipe, load_data_file(path)) for recipe, path in built if path.exists()]
        for i, (first, a) in enumerate(loaded):
            for second, b in loaded[i + 1:]:
                keys = _differing(a, b)
                if keys:
                    listed = ", ".join(map(repr, keys[:5])) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
                    out.append((second, f"recipes {first} and {second} both name weights file {name}, and key "
                                        f"{listed} holds different values in them (one key, one value: give one of "
                                        "them another file)"))
    return out


def _differing(a: DataFile, b: DataFile) -> list[str]:
    keys = sorted(set(a.entries) & set(b.entries))
    return [k for k in keys if _value(a, k) != _value(b, k)]


def _value(f: DataFile, key: str) -> tuple[object, ...]:
    entry = f.entries[key]
    layout = entry.layout
    shape = None if layout is None else (layout.scalar_type, tuple(layout.sizes), bytes(layout.dim_order))
    return bytes(entry.data), shape
