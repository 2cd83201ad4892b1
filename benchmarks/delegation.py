"""Our XNNPACK delegation against ExecuTorch's, both run in ExecuTorch's runtime, in one run.

    python benchmarks/delegation.py [RECIPE ...] [--runs 50] [--json out.json]

Per recipe (default: every recipe whose `backends:` names xnnpack): etbuild builds it
(`etbuild.build.driver`, the full stage pipeline), and ExecuTorch lowers the same model with
`to_edge_transform_and_lower` and its XnnpackPartitioner (the oracle; a recipe with a
`quantize:` section is quantized by ExecuTorch's XNNPACKQuantizer first, static int8 for
`int8-static`, dynamic otherwise). Both `.pte` files then run in ExecuTorch's runtime on
the recipe's example inputs; latency is the median of --runs calls after warm-up, the two
programs called in turn, call by call, so that drift of a shared machine hits both.

Columns: latency ours / theirs and the ratio; delegates per program; the share of the
graph's calls inside delegates (each in its own graph: ours after our lowering, which
decomposes more, theirs in the edge dialect) and the kernel calls each `.pte` still makes
outside delegates; our output's largest error against eager torch (float) in ExecuTorch's
runtime.
"""

from __future__ import annotations

import argparse
import io
import json
import operator
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import results  # benchmarks/results.py (the script's folder is on sys.path)
import torch
from timing import interleaved_us  # benchmarks/timing.py (the script's folder is on sys.path)

from etbuild.build.driver import build
from etbuild.model import build_model, example_inputs, method_callable
from etbuild.recipe import Recipe, discover_recipes, load_recipe
from etbuild.runtime.format.pte import read_program
from etbuild.verify.oracle import export_methods

ROOT = Path(__file__).resolve().parents[1]


def executorch_lowered(recipe: Recipe) -> tuple[bytes, dict[str, int]]:
    """ExecuTorch's XNNPACK-lowered program of the recipe's model, and its calls inside/outside delegates."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    exported = export_methods(recipe) if recipe.quantize is None else _quantized_exports(recipe)
    edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    counts = {"inside": 0, "outside": 0}
    for name in exported:
        gm = edge.exported_program(name).graph_module
        for node in gm.graph.nodes:
            if node.op != "call_function" or node.target is operator.getitem:
                continue
            if "executorch_call_delegate" in str(node.target):
                lowered = getattr(gm, node.args[0].target)
                counts["inside"] += sum(n.op == "call_function" and n.target is not operator.getitem
                                        for n in lowered.original_module.graph.nodes)
            else:
                counts["outside"] += 1
    return edge.to_executorch().buffer, counts


def _quantized_exports(recipe: Recipe) -> dict[str, torch.export.ExportedProgram]:
    """The recipe's methods quantized as ExecuTorch's flows do: torchao's Int8DynActInt4WeightQuantizer
    for int4 weights (ExecuTorch's 8da4w), else its XNNPACKQuantizer (the scheme nearest the recipe's)."""
    if recipe.quantize.scheme == "int8-dynamic-int4-weight":
        return _int4_exports(recipe)
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = get_symmetric_quantization_config(is_per_channel=True,
                                               is_dynamic=recipe.quantize.scheme != "int8-static")
    out = {}
    for name, ep in export_methods(recipe).items():
        inputs = example_inputs(recipe, name)
        prepared = prepare_pt2e(ep.module(), XNNPACKQuantizer().set_global(config))
        prepared(*inputs)
        out[name] = torch.export.export(convert_pt2e(prepared), inputs)
    return out


def _int4_exports(recipe: Recipe) -> dict[str, torch.export.ExportedProgram]:
    from torchao.quantization import Int8DynActInt4WeightQuantizer

    model = Int8DynActInt4WeightQuantizer(groupsize=recipe.quantize.group_size).quantize(build_model(recipe).eval())
    return {m.name: torch.export.export(model, example_inputs(recipe, m.name)) for m in recipe.model.methods}


def kernel_calls(pte: bytes) -> tuple[int, int]:
    """(delegates, kernel calls outside them) over every method of a program."""
    program, _ = read_program(pte)
    delegates = sum(len(p.delegates) for p in program.execution_plan)
    calls = sum(type(i.instr_args).__name__ == "KernelCall" for p in program.execution_plan
                for c in p.chains for i in c.instructions)
    return delegates, calls


def max_error(outputs: list[Any], expected: list[torch.Tensor]) -> float:
    return max((float(np.max(np.abs(np.asarray(o) - e.numpy()), initial=0.0)) for o, e in zip(outputs, expected)),
               default=0.0)


def measure(path: Path, runs: int, root: Path) -> dict[str, Any]:
    """One recipe: both programs built, checked and timed in ExecuTorch's runtime."""
    from executorch.runtime import Runtime

    recipe = load_recipe(path)
    print(f"{recipe.name} ...", file=sys.stderr)
    result = build([path], root, stream=io.StringIO())
    if result.exit_code:
        raise SystemExit(f"etbuild build failed for {recipe.name}: {result.failed}")
    ours = (root / recipe.name / f"{recipe.name}.pte").read_bytes()
    report = json.loads((root / recipe.name / "partition.json").read_text())["methods"]
    method = recipe.model.methods[0].name
    try:
        theirs, counts = executorch_lowered(recipe)
    except Exception as exc:  # noqa: BLE001  (ExecuTorch's limits are reported, not ours)
        print(f"  {recipe.name}: ExecuTorch cannot lower it: {type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
        theirs, counts = None, {}
    inputs = list(example_inputs(recipe, method))
    with torch.no_grad():
        out = method_callable(build_model(recipe), method, recipe)(*inputs)
    expected = list(out) if isinstance(out, (tuple, list)) else [out]
    runtime = Runtime.get()
    programs = {"ours": ours, "theirs": theirs}
    loaded = {k: runtime.load_program(data).load_method(method) for k, data in programs.items() if data}
    error = max_error(loaded["ours"].execute(inputs), expected)
    latency = interleaved_us({k: (lambda m=m: m.execute(inputs)) for k, m in loaded.items()}, runs)
    inside = sum(m["delegated_nodes"] for m in report.values())
    total = sum(m["compute_nodes"] for m in report.values())
    calls = {k: kernel_calls(data) if data else (None, None) for k, data in programs.items()}
    return {
        "recipe": recipe.name, "method": method, "latency_us": latency,
        "ratio": latency["ours"] / latency["theirs"] if theirs else None,
        "delegates": {k: c[0] for k, c in calls.items()}, "outside_kernel_calls": {k: c[1] for k, c in calls.items()},
        "delegated_share": {"ours": inside / total if total else 0.0,
                            "theirs": counts["inside"] / max(1, sum(counts.values())) if counts else None},
        "max_abs_error": error, "atol": recipe.verify.atol, "quantized": recipe.quantize is not None,
    }


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| recipe | ours us | ExecuTorch us | ours / theirs | delegates ours / theirs | delegated share "
             "ours / theirs | kernel calls outside ours / theirs | max abs error ours (atol) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lat, d, s, k = r["latency_us"], r["delegates"], r["delegated_share"], r["outside_kernel_calls"]
        error = f"{r['max_abs_error']:.2g} ({r['atol']:g})" if not r["quantized"] else "quantized: see verify"
        theirs = "n/a" if r["ratio"] is None else f"{lat['theirs']:,.0f}"
        ratio = "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        share = "n/a" if s["theirs"] is None else f"{s['theirs']:.1%}"
        lines.append(f"| {r['recipe']} | {lat['ours']:,.0f} | {theirs} | {ratio} | {d['ours']} / {d['theirs']} | "
                     f"{s['ours']:.1%} / {share} | {k['ours']} / {k['theirs']} | {error} |")
    return lines


def xnnpack_recipes() -> list[Path]:
    return [p for p in discover_recipes(ROOT / "recipes") if any(b.name == "xnnpack" for b in load_recipe(p).backends)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipes", nargs="*", help="recipe names or files (default: every xnnpack recipe)")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--json", type=Path)
    results.add_option(parser, "delegation")
    parser.add_argument("--build-dir", type=Path, help="build (incrementally) here instead of a fresh temporary dir")
    args = parser.parse_args()
    paths = [Path(r) if r.endswith(".yaml") else ROOT / "recipes" / f"{r}.yaml" for r in args.recipes]
    with tempfile.TemporaryDirectory(prefix="etbuild-delegation-") as tmp:
        root = args.build_dir or Path(tmp) / "build"
        rows = []
        for path in paths or xnnpack_recipes():
            rows.append(measure(path, args.runs, root))
            print(table(rows[-1:])[-1], file=sys.stderr, flush=True)  # each row as it is measured
    print(f"ExecuTorch's runtime (pybindings), torch threads {torch.get_num_threads()}; "
          f"latency: median of {args.runs} calls, the two programs called in turn, microseconds\n")
    print("\n".join(table(rows)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.results:
        results.save(args.results, rows,
                     title="Our XNNPACK delegation of the recipes against ExecuTorch's lowering, in its runtime",
                     notes=[f"median of {args.runs} calls, the two programs called in turn, microseconds"])


if __name__ == "__main__":
    main()
