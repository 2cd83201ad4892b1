"""etbuild against ExecuTorch and eager torch, measured in one run on this machine.

    python benchmarks/run.py [RECIPE ...] [--runs 50] [--json out.json]

Per recipe: build time per stage (etbuild, clean build dir) next to ExecuTorch's export →
to_edge → to_executorch; `.pte` size next to ExecuTorch's for the same model; planned
arena bytes next to ExecuTorch's plan and the lower bound (peak live bytes); latency of
the recipe's first method (median of --runs calls after warm-up) in our runtime,
ExecuTorch's portable runtime, ExecuTorch with its XNNPACK delegate (when it lowers), and
eager torch. Ratios are against baselines measured in the same run.

Loading ExecuTorch's runtime library slows eager torch in the same process (~90x here,
thread-pool interference), so every etbuild and eager latency is measured before the
first ExecuTorch runtime call.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import results  # benchmarks/results.py (the script's folder is on sys.path)
import torch
from timing import median_us  # benchmarks/timing.py (the script's folder is on sys.path)

from etbuild.build.driver import build
from etbuild.model import build_model, example_inputs, method_callable
from etbuild.recipe import Recipe, discover_recipes, load_recipe
from etbuild.runtime import Program
from etbuild.runtime.format.pte import read_program
from etbuild.verify.oracle import executorch_build, xnnpack_partitioner

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("export", "lower", "plan", "emit", "select", "verify")


def planned_bytes(pte: Path) -> int:
    program, _ = read_program(pte.read_bytes())
    return sum(sum(p.non_const_buffer_sizes[1:]) for p in program.execution_plan)


def _xnnpack(recipe: Recipe, path: Path) -> Path | None:
    try:
        return executorch_build(recipe, path, xnnpack_partitioner()).path
    except Exception as exc:  # the report says what could not be measured, and why
        print(f"  {recipe.name}: XNNPACK lowering failed: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
        return None


def measure(recipe_path: Path, runs: int, tmp: Path) -> dict[str, Any]:
    """Everything but the ExecuTorch latencies (those come last, see the module docstring)."""
    recipe = load_recipe(recipe_path)
    print(f"{recipe.name} ...", file=sys.stderr)
    result = build([recipe_path], tmp / "build", stream=io.StringIO())
    if result.exit_code:
        raise SystemExit(f"etbuild build failed for {recipe.name}: {result.failed}")
    ours = tmp / "build" / recipe.name / f"{recipe.name}.pte"
    plan = json.loads((ours.parent / "plan.json").read_text())
    theirs = executorch_build(recipe, tmp / f"{recipe.name}.et.pte")
    method = recipe.model.methods[0].name
    inputs = example_inputs(recipe, method)
    ours_method = Program.load(ours).load_method(method)
    np_inputs = [t.numpy() for t in inputs]
    eager = method_callable(build_model(recipe), method, recipe)
    with torch.no_grad():
        eager_us = median_us(lambda: eager(*inputs), runs)
    return {
        "recipe": recipe.name, "method": method,
        "build_s": {k.split(":")[0]: v for k, v in result.seconds.items()},
        "executorch_build_s": {"export": theirs.export_s, "to_edge": theirs.to_edge_s,
                               "to_executorch": theirs.to_executorch_s, "total": theirs.total_s},
        "pte_bytes": ours.stat().st_size, "executorch_pte_bytes": theirs.path.stat().st_size,
        "planned_bytes": plan["planned_bytes"], "lower_bound_bytes": plan["lower_bound"],
        "executorch_planned_bytes": planned_bytes(theirs.path),
        "latency_us": {"etbuild": median_us(lambda: ours_method(*np_inputs), runs), "eager_torch": eager_us},
        "_executorch": (theirs.path, _xnnpack(recipe, tmp / f"{recipe.name}.xnn.pte"), method, inputs),
    }


def executorch_latency(pte: Path | None, method: str, inputs: tuple, runs: int) -> float | None:
    from executorch.runtime import Runtime

    if pte is None:
        return None
    try:
        loaded = Runtime.get().load_program(str(pte)).load_method(method)
    except Exception as exc:
        print(f"  executorch could not load {pte.name}: {exc}", file=sys.stderr)
        return None
    args = list(inputs)
    return median_us(lambda: loaded.execute(args), runs)


def measure_executorch(row: dict[str, Any], runs: int) -> None:
    portable, xnn, method, inputs = row.pop("_executorch")
    row["latency_us"]["executorch_portable"] = executorch_latency(portable, method, inputs, runs)
    row["latency_us"]["executorch_xnnpack"] = executorch_latency(xnn, method, inputs, runs)


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "n/a"


def _us(v: float | None) -> str:
    return f"{v:,.0f}" if v is not None else "n/a"


def build_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| recipe | etbuild build s (export/lower/plan/emit/select/verify) | ExecuTorch s (export/to_edge/"
             "to_executorch) | .pte bytes ours / ET | planned bytes ours / ET / lower bound |", "|---|---|---|---|---|"]
    for r in rows:
        b, e = r["build_s"], r["executorch_build_s"]
        stages = "/".join(f"{b.get(s, 0):.2f}" for s in STAGES)
        lines.append(
            f"| {r['recipe']} | {sum(b.values()):.2f} ({stages}) | {e['total']:.2f} ({e['export']:.2f}/"
            f"{e['to_edge']:.2f}/{e['to_executorch']:.2f}) | {r['pte_bytes']:,} / {r['executorch_pte_bytes']:,} | "
            f"{r['planned_bytes']:,} / {r['executorch_planned_bytes']:,} / {r['lower_bound_bytes']:,} |"
        )
    return lines


def latency_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| recipe (method) | etbuild us | ET portable us | ET XNNPACK us | eager torch us | ET portable / etbuild "
             "| ET XNNPACK / etbuild | eager / etbuild |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lat = r["latency_us"]
        ours = lat["etbuild"]
        lines.append(
            f"| {r['recipe']} ({r['method']}) | {_us(ours)} | {_us(lat['executorch_portable'])} | "
            f"{_us(lat['executorch_xnnpack'])} | {_us(lat['eager_torch'])} | "
            f"{_ratio(lat['executorch_portable'], ours)} | {_ratio(lat['executorch_xnnpack'], ours)} | "
            f"{_ratio(lat['eager_torch'], ours)} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipes", nargs="*", help="recipe names or files (default: all under recipes/)")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--json", type=Path)
    results.add_option(parser, "recipes")
    args = parser.parse_args()
    paths = [Path(r) if r.endswith(".yaml") else ROOT / "recipes" / f"{r}.yaml" for r in args.recipes]
    paths = paths or discover_recipes(ROOT / "recipes")
    with tempfile.TemporaryDirectory(prefix="etbuild-bench-") as tmp:
        torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))  # torch's one-time setup, untimed
        rows = [measure(p, args.runs, Path(tmp)) for p in paths]
        for row in rows:
            measure_executorch(row, args.runs)
    print(f"torch threads {torch.get_num_threads()}; latency: median of {args.runs} calls, microseconds\n")
    print("\n".join(build_table(rows) + [""] + latency_table(rows)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.results:
        results.save(args.results, rows, title="Per recipe: build, size, memory and latency against ExecuTorch",
                     notes=[f"latency: median of {args.runs} calls, microseconds"])


if __name__ == "__main__":
    main()
