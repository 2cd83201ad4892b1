"""XNNPACK-delegated programs: our runtime against ExecuTorch's XNNPACK and eager torch, in one run.

    python benchmarks/xnnpack.py [RECIPE ...] [--quant float,static,dynamic] [--real [NAME ...]]
                                 [--threads 1] [--runs 50] [--json out.json] [--profile N]

Per case (a recipe, or a real model of benchmarks/real_models.py, and a quantization: float,
static int8 per channel or dynamic int8 through ExecuTorch's XNNPACKQuantizer), ExecuTorch
lowers the model with its XnnpackPartitioner (the oracle); the same `.pte` then runs in our
runtime and in ExecuTorch's, and the (quantized reference) model runs eagerly. Latency is the
median of --runs calls of the first method after warm-up.

Fairness on a shared machine: the runtimes being compared are called alternately, call by
call, so a burst of load from elsewhere hits both; every runtime gets the same thread count
(--threads: torch's intra-op pool, numpy's BLAS through threadpoolctl, ExecuTorch's
threadpool). Loading ExecuTorch's runtime library slows eager torch in the same process, so
phase 1 alternates ours with eager torch for every case, phase 2 (after the library loads)
ours with ExecuTorch; each ratio compares two columns of one phase. Quantization follows
tests/backends/xnnpack/test_recipes.py: recurrent models float only, dynamic int8 for
models without convolutions. --profile N prints, per case, our N slowest steps (delegate
nodes and instructions, median over calls).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the test oracle (tests/backends/xnnpack/oracle.py) quantizes and lowers

import results  # noqa: E402
from timing import interleaved_us  # noqa: E402  (benchmarks/timing.py: the script's folder is on sys.path)

from etbuild.model import build_model, example_inputs, method_callable  # noqa: E402
from etbuild.recipe import Recipe, discover_recipes, load_recipe  # noqa: E402
from etbuild.runtime import Program  # noqa: E402
from tests.backends.xnnpack.oracle import lower_recipe, recipe_module, schemes  # noqa: E402

ZOO = ("mlp", "cnn", "kws", "gru", "transformer")


@dataclass
class Case:
    """One program to time: a recipe lowered by ExecuTorch at one quantization."""

    recipe: Recipe
    quant: str | None
    pte: Path
    latency_us: dict[str, float] = field(default_factory=dict)
    profile: list[tuple[str, float]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.recipe.name} {self.quant or 'float'}"


def lower_case(recipe: Recipe, quant: str | None, tmp: Path) -> Case | None:
    """ExecuTorch's XNNPACK lowering of the recipe; None (reported) when ExecuTorch cannot lower it."""
    print(f"{recipe.name} {quant or 'float'}: lowering ...", file=sys.stderr, flush=True)
    try:
        data = lower_recipe(recipe, quant)
    except Exception as exc:  # noqa: BLE001  (ExecuTorch's limits are reported, not ours)
        print(f"  ExecuTorch cannot lower it: {type(exc).__name__}: {str(exc)[:160]}", file=sys.stderr)
        return None
    pte = tmp / f"{recipe.name}.{quant or 'float'}.pte"
    pte.write_bytes(data)
    return Case(recipe, quant, pte)


def eager(case: Case) -> Callable[[], Any]:
    """The model (for int8: the pt2e-converted reference ExecuTorch lowered) called eagerly."""
    recipe = case.recipe
    method = recipe.model.methods[0].name
    inputs = example_inputs(recipe, method)
    if case.quant:
        module, _ = recipe_module(recipe, method, case.quant)
        return lambda: module(*inputs)
    fn = method_callable(build_model(recipe).eval(), method, recipe)
    return lambda: fn(*inputs)


def ours(case: Case) -> Callable[[], Any]:
    method = case.recipe.model.methods[0].name
    loaded = Program.load(case.pte).load_method(method)
    arrays = [t.numpy() for t in example_inputs(case.recipe, method)]
    return lambda: loaded(*arrays)


def phase_eager(case: Case, runs: int, top: int) -> None:
    mine = ours(case)
    theirs = eager(case)
    with torch.no_grad():
        lat = interleaved_us({"etbuild": mine, "eager_torch": theirs}, runs)
    case.latency_us.update({"etbuild_vs_eager": lat["etbuild"], "eager_torch": lat["eager_torch"]})
    if top:
        case.profile = hot_spots(case, runs, top)


def phase_executorch(case: Case, runs: int) -> None:
    from executorch.runtime import Runtime

    method = case.recipe.model.methods[0].name
    loaded = Runtime.get().load_program(str(case.pte)).load_method(method)
    args = list(example_inputs(case.recipe, method))
    lat = interleaved_us({"etbuild": ours(case), "executorch_xnnpack": lambda: loaded.execute(args)}, runs)
    case.latency_us.update({"etbuild_vs_executorch": lat["etbuild"], "executorch_xnnpack": lat["executorch_xnnpack"]})


def hot_spots(case: Case, runs: int, top: int) -> list[tuple[str, float]]:
    """The slowest instructions and delegate nodes (median µs per call), by name."""
    method_name = case.recipe.model.methods[0].name
    method = Program.load(case.pte).load_method(method_name)
    arrays = [t.numpy() for t in example_inputs(case.recipe, method_name)]
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


def set_threads(count: int) -> None:
    """The same thread count for torch and numpy's BLAS (ExecuTorch's pool is set when it loads)."""
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(count)
    threadpool_limits(count)


def executorch_threads(count: int) -> None:
    from executorch.extension.pybindings import portable_lib

    portable_lib._unsafe_reset_threadpool(count)


def table(cases: list[Case]) -> list[str]:
    lines = ["| model | quant | etbuild us | eager torch us | etbuild / eager | etbuild us | ET XNNPACK us "
             "| etbuild / ET XNNPACK |", "|---|---|---|---|---|---|---|---|"]
    for c in cases:
        lat = c.latency_us
        a, e = lat["etbuild_vs_eager"], lat["eager_torch"]
        b, x = lat.get("etbuild_vs_executorch", np.nan), lat.get("executorch_xnnpack", np.nan)
        lines.append(f"| {c.recipe.name} | {c.quant or 'float'} | {a:,.0f} | {e:,.0f} | {a / e:.2f}x | {b:,.0f} | "
                     f"{x:,.0f} | {b / x:.2f}x |")
    return lines


def recipes(names: list[str], real: list[str] | None, tmp: Path) -> list[Recipe]:
    paths = [Path(r) if r.endswith(".yaml") else ROOT / "recipes" / f"{r}.yaml" for r in names]
    if not names and real is None:
        paths = [ROOT / "recipes" / f"{r}.yaml" for r in ZOO]
    found = [load_recipe(p) for p in paths]
    if real is not None:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import real_models

        for name in real or list(real_models.ARCHITECTURES):
            found.append(load_recipe(real_models.write_recipe(name, tmp)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipes", nargs="*", help=f"recipe names or files (default: {', '.join(ZOO)}; "
                        "'all': every recipe)")
    parser.add_argument("--quant", default="float,static,dynamic", help="comma-separated: float, static, dynamic")
    parser.add_argument("--real", nargs="*", help="also these models of benchmarks/real_models.py (none named: all)")
    parser.add_argument("--threads", type=int, default=1, help="threads for every runtime (default 1)")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--json", type=Path)
    results.add_option(parser, "xnnpack")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print our N slowest steps per case")
    args = parser.parse_args()
    wanted = {None if q == "float" else q for q in args.quant.split(",")}
    set_threads(args.threads)
    names = [p.stem for p in discover_recipes(ROOT / "recipes")] if args.recipes == ["all"] else args.recipes
    with tempfile.TemporaryDirectory(prefix="etbuild-xnn-bench-") as tmp:
        cases = []
        for recipe in recipes(names, args.real, Path(tmp)):
            model = build_model(recipe)
            for quant in (q for q in schemes(model) if q in wanted):
                if (case := lower_case(recipe, quant, Path(tmp))) is not None:
                    phase_eager(case, args.runs, args.profile)
                    cases.append(case)
        executorch_threads(args.threads)
        for case in cases:
            phase_executorch(case, args.runs)
    print(f"threads {args.threads}; latency: median of {args.runs} alternating calls, microseconds\n")
    print("\n".join(table(cases)))
    for c in cases:
        for name, us in c.profile:
            print(f"  {c.label}: {us:9.1f} us  {name}")
    rows = [{"recipe": c.recipe.name, "quant": c.quant or "float", "latency_us": c.latency_us,
             "profile": c.profile} for c in cases]
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.results:
        results.save(args.results, rows, title="ExecuTorch's XNNPACK programs in our runtime, in its own and eagerly",
                     columns=["recipe", "quant", *(f"latency_us.{k}" for k in ("etbuild_vs_eager", "eager_torch",
                              "etbuild_vs_executorch", "executorch_xnnpack"))],
                     notes=[f"threads {args.threads}; median of {args.runs} alternating calls, microseconds"])


if __name__ == "__main__":
    main()
