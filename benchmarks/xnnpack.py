"""XNNPACK-delegated programs: our runtime against ExecuTorch's XNNPACK and eager torch, in one run.

    python benchmarks/xnnpack.py [RECIPE ...] [--runs 50] [--json out.json] [--profile N]

Per recipe, ExecuTorch lowers the model with its XnnpackPartitioner (the oracle); the same
`.pte` then runs in our runtime and in ExecuTorch's, and the model runs eagerly. Latency is
the median of --runs calls of the recipe's first method after warm-up. As in run.py, every
etbuild and eager latency is measured before the first ExecuTorch runtime call (loading its
library slows torch in the same process). --profile N prints, per recipe, our N slowest
delegate nodes and instructions (median over calls).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from run import median_us  # benchmarks/run.py

from etbuild.model import build_model, example_inputs, method_callable
from etbuild.oracle import executorch_build, xnnpack_partitioner
from etbuild.recipe import discover_recipes, load_recipe
from etbuild.runtime import Program

ROOT = Path(__file__).resolve().parents[1]
ZOO = ("mlp", "cnn", "kws", "gru", "transformer")


def measure(path: Path, runs: int, tmp: Path, profile: int) -> dict[str, Any] | None:
    """Ours and eager (ExecuTorch's latency is added later, see the module docstring)."""
    recipe = load_recipe(path)
    method = recipe.model.methods[0].name
    print(f"{recipe.name} ...", file=sys.stderr)
    try:
        pte = executorch_build(recipe, tmp / f"{recipe.name}.xnn.pte", xnnpack_partitioner()).path
    except Exception as exc:  # noqa: BLE001  (ExecuTorch's limits are reported, not ours)
        print(f"  {recipe.name}: ExecuTorch cannot lower it: {type(exc).__name__}: {str(exc)[:160]}", file=sys.stderr)
        return None
    inputs = example_inputs(recipe, method)
    arrays = [t.numpy() for t in inputs]
    ours = Program.load(pte).load_method(method)
    eager = method_callable(build_model(recipe), method, recipe)
    with torch.no_grad():
        eager_us = median_us(lambda: eager(*inputs), runs)
    row = {"recipe": recipe.name, "method": method, "delegates": len(ours.plan.delegates),
           "latency_us": {"etbuild": median_us(lambda: ours(*arrays), runs), "eager_torch": eager_us},
           "_executorch": (pte, method, inputs)}
    if profile:
        row["profile"] = hot_spots(ours, arrays, runs, profile)
    return row


def hot_spots(method: Any, arrays: list[np.ndarray], runs: int, top: int) -> list[tuple[str, float]]:
    """The slowest instructions and delegate nodes (median µs per call), by name."""
    plan = method.plan
    times: dict[str, list[float]] = defaultdict(list)
    for _ in range(max(3, runs // 5)):
        method(*arrays)  # binds the delegates to the call's arrays; then time each step again
        for k, (step, ins) in enumerate(zip(method.steps, plan.chains[0].instructions)):
            args = ins.instr_args
            handle = method.delegates.get(args.delegate_index) if hasattr(args, "delegate_index") else None
            named = zip(handle.steps, handle.step_names) if hasattr(handle, "step_names") else [(step, "")]
            label = plan.operators[args.op_index].name if hasattr(args, "op_index") else type(args).__name__
            for s, node in named:
                start = time.perf_counter()
                s()
                times[f"{k:4d} {label}{': ' + node if node else ''}"].append(time.perf_counter() - start)
    medians = [(name, statistics.median(t) * 1e6) for name, t in times.items()]
    return sorted(medians, key=lambda kv: -kv[1])[:top]


def measure_executorch(row: dict[str, Any], runs: int) -> None:
    from executorch.runtime import Runtime

    pte, method, inputs = row.pop("_executorch")
    loaded = Runtime.get().load_program(str(pte)).load_method(method)
    args = list(inputs)
    row["latency_us"]["executorch_xnnpack"] = median_us(lambda: loaded.execute(args), runs)


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| recipe (method) | delegates | etbuild us | ET XNNPACK us | eager torch us | etbuild / ET XNNPACK "
             "| etbuild / eager |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lat = r["latency_us"]
        ours, xnn, eager = lat["etbuild"], lat["executorch_xnnpack"], lat["eager_torch"]
        lines.append(f"| {r['recipe']} ({r['method']}) | {r['delegates']} | {ours:,.0f} | {xnn:,.0f} | {eager:,.0f} | "
                     f"{ours / xnn:.2f}x | {ours / eager:.2f}x |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipes", nargs="*", help=f"recipe names or files (default: {', '.join(ZOO)})")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print our N slowest steps per recipe")
    args = parser.parse_args()
    names = args.recipes or list(ZOO)
    paths = [Path(r) if r.endswith(".yaml") else ROOT / "recipes" / f"{r}.yaml" for r in names]
    paths = paths or discover_recipes(ROOT / "recipes")
    with tempfile.TemporaryDirectory(prefix="etbuild-xnn-bench-") as tmp:
        torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))  # torch's one-time setup, untimed
        rows = [r for p in paths if (r := measure(p, args.runs, Path(tmp), args.profile)) is not None]
        for row in rows:
            measure_executorch(row, args.runs)
    print(f"torch threads {torch.get_num_threads()}; latency: median of {args.runs} calls, microseconds\n")
    print("\n".join(table(rows)))
    for r in rows:
        for name, us in r.get("profile", []):
            print(f"  {r['recipe']}: {us:9.1f} us  {name}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
