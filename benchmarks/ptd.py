"""Bytes shipped with weights inside each program and with weights apart (`.ptd`), per model.

    python benchmarks/ptd.py [--models mlp transformer cnn-xnnpack] [--results]

Per model of the repo's recipes, built in memory (etbuild.pipeline) three times: products A and B, one model
with two program settings (memory alignment 16 and 64), and A' (alignment 4096), an update that changes the
program only. Inside: each product's `.pte` holds the weights. Apart: each `.pte` names its weights by key
and one `.ptd` serves both. The release ships A and B (the `.ptd` once); the update ships what changed (the
`.pte` alone, when the weights are apart). Writes docs/results/ptd.json and ptd.md with --results.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import results  # benchmarks/results.py (the script's folder is on sys.path)

from etbuild.model import build_model, example_inputs
from etbuild.pipeline import compile_module
from etbuild.recipe import Recipe, WeightsConfig, load_recipe

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("mlp", "transformer", "cnn-xnnpack")
ALIGNMENTS = {"A": 16, "B": 64, "A'": 4096}


def _built(recipe: Recipe, alignment: int, apart: bool) -> tuple[bytes, bytes | None]:
    memory = replace(recipe.memory, alignment=alignment,
                     levels=tuple(replace(level, alignment=alignment) for level in recipe.memory.levels))
    out = compile_module(build_model(recipe), example_inputs(recipe), memory, backends=recipe.backends,
                         weights=WeightsConfig("w") if apart else None)
    return out.pte, out.ptd


def measure(name: str) -> dict[str, Any]:
    """The bytes of one model's two-product release and of its program-only update, inside and apart."""
    recipe = load_recipe(ROOT / "recipes" / f"{name}.yaml")
    inside = {k: _built(recipe, a, False)[0] for k, a in ALIGNMENTS.items()}
    apart = {k: _built(recipe, a, True) for k, a in ALIGNMENTS.items()}
    ptd = {v[1] for v in apart.values()}
    if len(ptd) != 1:
        raise SystemExit(f"{name}: the three builds wrote different .ptd files; the weights should coincide")
    weights = len(next(iter(ptd)))
    changed = inside["A"] != inside["A'"]
    return {
        "model": name, "pte_inside": len(inside["A"]), "pte_apart": len(apart["A"][0]), "ptd": weights,
        "release_inside": len(inside["A"]) + len(inside["B"]),
        "release_apart": len(apart["A"][0]) + len(apart["B"][0]) + weights,
        "update_inside": len(inside["A'"]) if changed else 0,
        "update_apart": len(apart["A'"][0]) if apart["A"][0] != apart["A'"][0] else 0,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    results.add_option(p, "ptd")
    args = p.parse_args(argv)
    rows = [measure(name) for name in args.models]
    columns = ["model", "pte_inside", "pte_apart", "ptd", "release_inside", "release_apart", "update_inside",
               "update_apart"]
    print(" ".join(f"{c:>14}" for c in columns))
    for row in rows:
        print(" ".join(f"{row[c]:>14,}" if isinstance(row[c], int) else f"{row[c]:>14}" for c in columns))
    if args.results:
        results.save(args.results, rows, title="Bytes shipped with weights inside the programs and apart (.ptd)",
                     columns=columns, notes=[
                         "bytes; products A and B: one model, memory alignment 16 and 64; the update A → A' "
                         "(alignment 4096) changes the program only",
                         "release_*: A and B (apart: both .pte and the one .ptd); update_*: the files whose "
                         "bytes changed (0: none)"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
