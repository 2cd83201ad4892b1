"""etbuild against ExecuTorch and eager torch, measured in one run on this machine.

    python benchmarks/run.py [RECIPE ...] [--runs 50] [--json out.json]

Per recipe: build time per stage (etbuild, clean build dir) next to ExecuTorch's export →
to_edge → to_executorch; `.pte` size next to ExecuTorch's for the same model; planned
arena bytes next to ExecuTorch's plan and the lower bound (peak live bytes); latency
(median of --runs calls after warm-up) of our runtime, ExecuTorch's portable runtime,
ExecuTorch with its XNNPACK delegate (when it lowers), and eager torch. Ratios are against
baselines measured in the same run.

Loading ExecuTorch's runtime library slows eager torch in the same process (~90x here,
thread-pool interference), so every recipe's etbuild and eager latencies are measured
before the first ExecuTorch runtime call.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from etbuild.build import build
from etbuild.model import build_model, example_inputs
from etbuild.recipe import discover_recipes, load_recipe
from etbuild.runtime import Program
from etbuild.runtime.format.pte import read_program

ROOT = Path(__file__).resolve().parents[1]


def median_us(fn, runs: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def executorch_build(model: torch.nn.Module, inputs: tuple, out: Path) -> dict[str, Any]:
    from executorch.exir import to_edge

    t0 = time.perf_counter()
    exported = torch.export.export(model, inputs)
    t1 = time.perf_counter()
    edge = to_edge(exported)
    t2 = time.perf_counter()
    program = edge.to_executorch()
    t3 = time.perf_counter()
    out.write_bytes(program.buffer)
    return {"export_s": t1 - t0, "to_edge_s": t2 - t1, "to_executorch_s": t3 - t2, "total_s": t3 - t0,
            "pte_bytes": out.stat().st_size}


def executorch_xnnpack(model: torch.nn.Module, inputs: tuple, out: Path) -> Path | None:
    try:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        program = to_edge_transform_and_lower(
            torch.export.export(model, inputs), partitioner=[XnnpackPartitioner()]
        ).to_executorch()
    except Exception as exc:  # the benchmark reports what could not be measured
        print(f"  xnnpack lowering failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    out.write_bytes(program.buffer)
    return out


def executorch_latency(pte: Path, inputs: tuple, runs: int) -> float | None:
    from executorch.runtime import Runtime

    try:
        method = Runtime.get().load_program(str(pte)).load_method("forward")
    except Exception as exc:
        print(f"  executorch could not load {pte.name}: {exc}", file=sys.stderr)
        return None
    args = list(inputs)
    return median_us(lambda: method.execute(args), runs)


def planned_bytes(pte: Path) -> int:
    program, _ = read_program(pte.read_bytes())
    return sum(sum(p.non_const_buffer_sizes[1:]) for p in program.execution_plan)


def warm_up() -> None:
    """One export first, so the first recipe's build time excludes torch's one-time setup."""
    torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))


def measure(recipe_path: Path, runs: int, tmp: Path) -> dict[str, Any]:
    recipe = load_recipe(recipe_path)
    print(f"{recipe.name}:", file=sys.stderr)
    result = build([recipe_path], tmp / "build", stream=io.StringIO())
    if result.exit_code:
        raise SystemExit(f"etbuild build failed for {recipe.name}: {result.failed}")
    ours = tmp / "build" / recipe.name / f"{recipe.name}.pte"
    plan = json.loads((ours.parent / "plan.json").read_text())
    model, inputs = build_model(recipe), example_inputs(recipe)
    theirs = executorch_build(model, inputs, tmp / f"{recipe.name}.et.pte")
    xnn = executorch_xnnpack(model, inputs, tmp / f"{recipe.name}.xnnpack.pte")
    method = Program.load(ours).load_method()
    np_inputs = [t.numpy() for t in inputs]
    with torch.no_grad():
        eager = median_us(lambda: model(*inputs), runs)
    return {
        "recipe": recipe.name,
        "build_s": {k.split(":")[0]: v for k, v in result.seconds.items()},
        "build_total_s": sum(result.seconds.values()),
        "executorch_build": theirs,
        "pte_bytes": ours.stat().st_size,
        "planned_bytes": plan["planned_bytes"], "lower_bound_bytes": plan["lower_bound"],
        "executorch_planned_bytes": planned_bytes(tmp / f"{recipe.name}.et.pte"),
        "latency_us": {"etbuild": median_us(lambda: method(*np_inputs), runs), "eager_torch": eager},
        "_executorch_files": (tmp / f"{recipe.name}.et.pte", xnn, inputs),
    }


def measure_executorch(row: dict[str, Any], runs: int) -> None:
    """The ExecuTorch latencies of one measured row (after every torch/etbuild timing)."""
    portable, xnn, inputs = row.pop("_executorch_files")
    row["latency_us"]["executorch_portable"] = executorch_latency(portable, inputs, runs)
    row["latency_us"]["executorch_xnnpack"] = executorch_latency(xnn, inputs, runs) if xnn else None


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "n/a"


def _us(v: float | None) -> str:
    return f"{v:,.1f}" if v is not None else "n/a"


def report(rows: list[dict[str, Any]], runs: int) -> str:
    lines = [f"threads: torch {torch.get_num_threads()}; latency = median of {runs} calls (us)", ""]
    lines.append("| recipe | etbuild build s (export/lower/plan/emit/verify) | ExecuTorch build s (export/to_edge/"
                 "to_executorch) | .pte bytes ours / ET | planned bytes ours / ET / lower bound |")
    lines.append("|---|---|---|---|---|")
    for r in rows:
        b, e = r["build_s"], r["executorch_build"]
        stages = "/".join(f"{b.get(s, 0):.2f}" for s in ("export", "lower", "plan", "emit", "verify"))
        lines.append(
            f"| {r['recipe']} | {r['build_total_s']:.2f} ({stages}) | {e['total_s']:.2f} ({e['export_s']:.2f}/"
            f"{e['to_edge_s']:.2f}/{e['to_executorch_s']:.2f}) | {r['pte_bytes']:,} / {e['pte_bytes']:,} | "
            f"{r['planned_bytes']:,} / {r['executorch_planned_bytes']:,} / {r['lower_bound_bytes']:,} |"
        )
    lines += ["", "| recipe | etbuild us | ExecuTorch portable us | ExecuTorch XNNPACK us | eager torch us | "
              "ET portable / etbuild | eager / etbuild |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lat = r["latency_us"]
        lines.append(
            f"| {r['recipe']} | {_us(lat['etbuild'])} | {_us(lat['executorch_portable'])} | "
            f"{_us(lat['executorch_xnnpack'])} | {_us(lat['eager_torch'])} | "
            f"{_ratio(lat['executorch_portable'], lat['etbuild'])} | {_ratio(lat['eager_torch'], lat['etbuild'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipes", nargs="*", help="recipe names or files (default: all under recipes/)")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    paths = [Path(r) if r.endswith(".yaml") else ROOT / "recipes" / f"{r}.yaml" for r in args.recipes]
    paths = paths or discover_recipes(ROOT / "recipes")
    with tempfile.TemporaryDirectory(prefix="etbuild-bench-") as tmp:
        warm_up()
        rows = [measure(p, args.runs, Path(tmp)) for p in paths]
        for row in rows:
            measure_executorch(row, args.runs)
    print(report(rows, args.runs))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
