"""Quantized recipes: size and latency in our runtime, in ExecuTorch's portable runtime on its
own quantized build of the same model, and float eager torch, in one run.

    python benchmarks/quantized.py [RECIPE ...] [--build-dir build] [--runs 30] [--json out.json]

Per quantized recipe (default: every recipe under recipes/ with a `quantize:` section), our
`.pte` is built with `etbuild build` (up-to-date stages are skipped) and run in our runtime;
ExecuTorch builds the same model with its XNNPACKQuantizer (per-channel symmetric weights;
static calibrated, or dynamic; its quantizer has no weight-only config, so int8-weight-only
recipes are compared with its dynamic build), to_edge and to_executorch without a partitioner,
and its `.pte` runs in its portable runtime with `executorch.kernels.quantized` loaded.
Latency is the median of --runs calls of `forward` after warm-up. Every etbuild and eager
latency is measured before the first ExecuTorch runtime call (loading its library slows torch
in the same process).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from timing import median_us  # benchmarks/timing.py

from etbuild.build.driver import build
from etbuild.model import build_model, example_inputs
from etbuild.recipe import discover_recipes, load_recipe
from etbuild.runtime import Program
from etbuild.verify.oracle import ORACLE_SCHEMES, executorch_build

ROOT = Path(__file__).resolve().parents[1]


def ours(path: Path, build_dir: Path, runs: int) -> dict[str, Any]:
    """Our build of the recipe: `.pte` bytes, the float recipe's, latency in our runtime, float eager."""
    recipe = load_recipe(path)
    result = build([path], build_dir, stream=io.StringIO())
    if result.exit_code:
        raise SystemExit(f"{path}: build failed: {result.failed}")
    pte = build_dir / recipe.name / f"{recipe.name}.pte"
    report = json.loads((build_dir / recipe.name / "quantize.json").read_text())
    x = example_inputs(recipe, "forward")
    method = Program.load(pte).load_method("forward")
    args = [t.numpy() for t in x]
    model = build_model(recipe).eval()
    with torch.no_grad():
        eager_us = median_us(lambda: model(*x), runs)
    return {
        "recipe": recipe.name, "scheme": recipe.quantize.scheme, "ours_bytes": pte.stat().st_size,
        "float_bytes": report["pte_bytes"]["float_estimate"], "ours_us": median_us(lambda: method(*args), runs),
        "eager_float_us": eager_us,
    }


def theirs(path: Path, row: dict[str, Any], runs: int, tmp: Path) -> None:
    """ExecuTorch's quantized build of the same model in its portable runtime, into `row`."""
    import executorch.kernels.quantized  # noqa: F401  (its quantized kernels)
    from executorch.runtime import Runtime

    recipe = load_recipe(path)
    scheme = ORACLE_SCHEMES[recipe.quantize.scheme]
    built = executorch_build(recipe, tmp / f"{recipe.name}-et.pte", quantize=scheme)
    method = Runtime.get().load_program(built.path).load_method("forward")
    x = list(example_inputs(recipe, "forward"))
    row.update(et_scheme=scheme, et_bytes=built.path.stat().st_size,
               et_us=median_us(lambda: method.execute(x), runs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipes", nargs="*", type=Path)
    parser.add_argument("--build-dir", type=Path, default=ROOT / "build")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    paths = args.recipes or [p for p in discover_recipes(ROOT / "recipes") if load_recipe(p).quantize]
    rows = [ours(p, args.build_dir, args.runs) for p in paths]
    with tempfile.TemporaryDirectory() as tmp:
        for path, row in zip(paths, rows):
            theirs(path, row, args.runs, Path(tmp))
    print(f"{'recipe':30} {'ours B':>9} {'x float':>7} {'ET B':>9} {'ours us':>9} {'ET us':>9} {'eager us':>9}")
    for r in rows:
        print(f"{r['recipe']:30} {r['ours_bytes']:9,} {r['ours_bytes'] / r['float_bytes']:7.3f} {r['et_bytes']:9,} "
              f"{r['ours_us']:9.0f} {r['et_us']:9.0f} {r['eager_float_us']:9.0f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
