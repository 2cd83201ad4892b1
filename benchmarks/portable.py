"""Portable (non-delegated) programs: our runtime against eager torch and ExecuTorch, interleaved.

    python benchmarks/portable.py [RECIPE ...] [--runs 300] [--portable-runs 10] [--threads 1]
                                  [--build-dir build] [--json out.json]

Per recipe (default gru, kws, mlp, cnn, transformer): etbuild builds the recipe (incremental,
into --build-dir), ExecuTorch builds its portable `.pte` and its XNNPACK-lowered one. Latency
is the median over --runs rounds of the recipe's first method, after warm-up; within a round
every contender runs once, in turn, so that a change in the machine's load hits them all alike.

Loading ExecuTorch's runtime library slows eager torch in the same process (thread-pool
interference, see run.py), so the measurement has two phases: ours and eager interleaved,
then ours and ExecuTorch XNNPACK interleaved (ours is reported from both), then ExecuTorch's
portable runtime alone for --portable-runs calls (it is 10-100x slower).
--threads sets OpenBLAS's, OpenMP's and torch's thread counts alike before anything loads.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import results  # benchmarks/results.py (the script's folder is on sys.path)
from timing import interleaved_us  # benchmarks/timing.py (the script's folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ("gru", "kws", "mlp", "cnn", "transformer")
Contender = Callable[[], Any]


def prepare(name: str, build_dir: Path, tmp: Path) -> dict[str, Any]:
    """Our method, the eager callable and inputs, and ExecuTorch's two `.pte` files for one recipe."""
    import torch

    from etbuild.build.driver import build
    from etbuild.model import build_model, example_inputs, method_callable
    from etbuild.recipe import load_recipe
    from etbuild.runtime import Program
    from etbuild.verify.oracle import executorch_build, xnnpack_partitioner

    path = ROOT / "recipes" / f"{name}.yaml"
    recipe = load_recipe(path)
    result = build([path], build_dir, stream=io.StringIO())
    if result.exit_code:
        raise SystemExit(f"etbuild build failed for {name}: {result.failed}")
    method = recipe.model.methods[0].name
    inputs = example_inputs(recipe, method)
    try:
        xnn: Path | None = executorch_build(recipe, tmp / f"{name}.xnn.pte", xnnpack_partitioner()).path
    except Exception as exc:  # noqa: BLE001  (ExecuTorch's limits are reported, not ours)
        print(f"  {name}: ExecuTorch cannot lower it to XNNPACK: {type(exc).__name__}", file=sys.stderr)
        xnn = None
    eager = method_callable(build_model(recipe), method, recipe)
    return {
        "recipe": name, "method": method, "inputs": inputs,
        "ours": Program.load(build_dir / name / f"{name}.pte").load_method(method),
        "eager": lambda: _no_grad(torch, eager, inputs),
        "et_portable": executorch_build(recipe, tmp / f"{name}.et.pte").path, "et_xnnpack": xnn,
    }


def _no_grad(torch: Any, fn: Callable[..., Any], inputs: tuple) -> Any:
    with torch.no_grad():
        return fn(*inputs)


def _executorch(pte: Path | None, method: str, inputs: tuple) -> Contender | None:
    from executorch.runtime import Runtime

    if pte is None:
        return None
    loaded = Runtime.get().load_program(str(pte)).load_method(method)
    args = list(inputs)
    return lambda: loaded.execute(args)


def table(rows: list[dict[str, Any]]) -> list[str]:
    cols = ("ours", "eager", "et_portable", "et_xnnpack")
    lines = ["| recipe | ours us (phase 1 / 2) | eager us | ET portable us | ET XNNPACK us | eager / ours "
             "| ours / ET XNNPACK |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        v = {c: r.get(c) for c in cols}
        fmt = {c: f"{v[c]:,.0f}" if v[c] else "n/a" for c in cols}
        xnn = f"{r['ours2'] / v['et_xnnpack']:.2f}x" if v["et_xnnpack"] else "n/a"
        lines.append(f"| {r['recipe']} | {fmt['ours']} / {r['ours2']:,.0f} | {fmt['eager']} | {fmt['et_portable']} | "
                     f"{fmt['et_xnnpack']} | {v['eager'] / v['ours']:.2f}x | {xnn} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipes", nargs="*", default=list(DEFAULT))
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--portable-runs", type=int, default=10, help="ExecuTorch portable is slow: fewer calls")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--build-dir", type=Path, default=ROOT / "build")
    parser.add_argument("--json", type=Path)
    results.add_option(parser, "portable")
    args = parser.parse_args()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="etbuild-portable-") as tmp:
        prepared = [prepare(name, args.build_dir, Path(tmp)) for name in args.recipes]
        rows = []
        for p in prepared:  # phase 1: before ExecuTorch's runtime loads
            arrays = [t.numpy() for t in p["inputs"]]
            ours = p["ours"]
            rows.append({"recipe": p["recipe"], **interleaved_us(
                {"ours": lambda o=ours, a=arrays: o(*a), "eager": p["eager"]}, args.runs)})
        for p, row in zip(prepared, rows):  # phase 2
            arrays = [t.numpy() for t in p["inputs"]]
            contenders = {"ours2": lambda o=p["ours"], a=arrays: o(*a)}
            xnn = _executorch(p["et_xnnpack"], p["method"], p["inputs"])
            if xnn is not None:
                contenders["et_xnnpack"] = xnn
            row.update(interleaved_us(contenders, args.runs))
            portable = _executorch(p["et_portable"], p["method"], p["inputs"])
            row.update(interleaved_us({"et_portable": portable}, args.portable_runs, warmup=1))
    print(f"threads {args.threads} (OpenBLAS, OpenMP, torch); median of {args.runs} interleaved rounds, microseconds\n")
    print("\n".join(table(rows)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.results:
        results.save(args.results, rows, title="Our portable programs against eager torch and ExecuTorch, interleaved",
                     notes=[f"threads {args.threads}; median of {args.runs} interleaved rounds, microseconds",
                            "ours: beside eager torch; ours2: beside ExecuTorch's XNNPACK program"])


if __name__ == "__main__":
    main()
