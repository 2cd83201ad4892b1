"""Build time: a clean `etbuild build` per model beside ExecuTorch's flow for it, and the no-op build.

    python benchmarks/build.py [NAME|RECIPE.yaml ...] [--only NAME ...] [--quantized] [--no-noop] [--json out.json]

Per model (a tier name of `tests/models/zoo.py`, written as a recipe with `backends: [{name: xnnpack}]`,
or a recipe file as it is; default: the whole tier), each in a fresh process, as a user runs them:
- ours: `etbuild build --json` into an empty build folder; the per-stage seconds come from the build's
  own `end` events (each stage's work, its module's import not counted), `startup` is the rest of the
  process's wall time (imports of torch and etbuild, recipe loading, doit);
- theirs: export (model construction included, as in ours), quantize (ExecuTorch's XNNPACKQuantizer
  prepare → calibrate → convert → re-export, or torchao's 8da4w transform, for a quantized recipe),
  `to_edge_transform_and_lower` with its XnnpackPartitioner, `to_executorch`, and serialize (the
  `.pte` buffer), with their imports timed apart as `startup`.
Before the first model, both flows run once untimed (the first model's numbers: the run's first process
read torch's and the model library's files from disk, and ours always ran first).
The ratio is our stage total over their step total (imports apart on both sides), with the geometric
mean over the models; `wall` ratios count the whole processes, `cpu` ratios their CPU seconds (user +
system, every process they wait for included: on a shared machine the load stretches wall time, CPU
time much less). Then the no-op build: `etbuild build`
of the whole recipes folder, built first, then timed three more times in fresh processes (`--noop-dir`
keeps that build tree between runs). The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import results  # benchmarks/results.py (the script's folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
OURS = ("export", "quantize", "lower", "plan", "emit", "select", "verify")
THEIRS = ("export", "quantize", "lower", "to_executorch", "serialize")


def load() -> str:
    """The 1-, 5- and 15-minute load averages."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def recipe_for(item: str, folder: Path, quantized: bool) -> Path:
    """A recipe file for a tier name (with the XNNPACK backend) or a recipe path as given."""
    if item.endswith((".yaml", ".yml")):
        return Path(item).resolve()
    sys.path.insert(0, str(ROOT))
    from tests.models.zoo import write_recipe

    return write_recipe(item, folder, quantized=quantized, xnnpack=True)


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's waited-for children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ours(recipe: Path, build_dir: Path) -> dict[str, Any]:
    """A clean `etbuild build --json` of one recipe in a fresh process: per-stage seconds, startup, wall, cpu."""
    start, cpu = time.perf_counter(), children_cpu()
    done = subprocess.run([sys.executable, "-m", "etbuild.cli", "build", "--json", "--build-dir", str(build_dir),
                           str(recipe)], capture_output=True, text=True, cwd=ROOT)
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    stages = {e["stage"]: e["seconds"] for e in events if e["event"] == "end"}
    failed = [f"{e['task']}: {e['message'][:200]}" for e in events if e["event"] == "fail"]
    if done.returncode and not failed:
        failed = [done.stderr.strip()[-300:]]
    return {"stages": stages, "total": sum(stages.values()), "startup": wall - sum(stages.values()), "wall": wall,
            "cpu": cpu, "error": "; ".join(failed)}


def theirs(recipe: Path, out: Path) -> dict[str, Any]:
    """ExecuTorch's flow for the recipe's model in a fresh process (this file's `--executorch` mode)."""
    start, cpu = time.perf_counter(), children_cpu()
    done = subprocess.run([sys.executable, __file__, "--executorch", str(recipe), str(out)], capture_output=True,
                          text=True, cwd=ROOT)
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"steps": {}, "total": None, "startup": None, "wall": wall, "cpu": cpu,
                "error": done.stderr.strip()[-300:]}
    report = json.loads(lines[-1])
    return {**report, "total": sum(report["steps"].values()), "wall": wall, "cpu": cpu, "error": ""}


def executorch_child(recipe_path: Path, out: Path) -> None:
    """Run ExecuTorch's flow here, printing its step seconds as one JSON line."""
    start = time.perf_counter()
    import torch
    from executorch.exir import to_edge_transform_and_lower

    from etbuild.recipe import load_recipe
    from etbuild.verify import oracle

    recipe = load_recipe(recipe_path)
    partitioner = oracle.xnnpack_partitioner()
    steps: dict[str, float] = {}
    t = time.perf_counter()
    startup = t - start
    with torch.no_grad():
        scheme = recipe.quantize.scheme if recipe.quantize else None
        if scheme == oracle.INT4_SCHEME:
            group = recipe.quantize.group_size if recipe.quantize else 32
            exported = oracle.export_methods(recipe, lambda m: oracle.torchao_8da4w(m, group))
            steps["export"] = time.perf_counter() - t  # the 8da4w source transform happens inside export
        else:
            exported = oracle.export_methods(recipe)
            steps["export"] = time.perf_counter() - t
            if scheme is not None:
                t = time.perf_counter()
                import executorch.kernels.quantized  # noqa: F401  (the out-variants to_executorch needs)

                exported = oracle.quantize_methods(recipe, exported, scheme)
                steps["quantize"] = time.perf_counter() - t
        t = time.perf_counter()
        edge = to_edge_transform_and_lower(exported, partitioner=[partitioner])
        steps["lower"] = time.perf_counter() - t
        t = time.perf_counter()
        program = edge.to_executorch()
        steps["to_executorch"] = time.perf_counter() - t
        t = time.perf_counter()
        out.write_bytes(program.buffer)
        steps["serialize"] = time.perf_counter() - t
    print(json.dumps({"steps": steps, "startup": startup}))


def noop(recipes_dir: Path, build_dir: Path, runs: int = 3) -> dict[str, Any]:
    """Build the recipes folder, then time `runs` more builds of it (each should run nothing)."""
    command = [sys.executable, "-m", "etbuild.cli", "build", "--recipes-dir", str(recipes_dir),
               "--build-dir", str(build_dir)]
    first = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    times, last = [], ""
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        times.append(time.perf_counter() - start)
        last = (done.stdout.strip().splitlines() or [""])[-1]
    return {"seconds": times, "median": statistics.median(times), "summary": last,
            "first_exit_code": first.returncode}


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _f(value: float | None, spec: str = ".2f") -> str:
    return "–" if value is None else format(value, spec)


def table(rows: list[dict[str, Any]]) -> str:
    """Per model: our stages, their steps, the ratio of the totals and of the whole processes (wall, CPU)."""
    head = (f"| model | ours s: {' / '.join(OURS)} = total (+startup) | theirs s: {' / '.join(THEIRS)} = total "
            "(+startup) | ours / theirs | wall ours / theirs | cpu s ours / theirs |")
    lines = [head, "|---|---|---|---|---|---|"]
    for r in rows:
        o, t = r["ours"], r["theirs"]
        our_split = " / ".join(_f(o["stages"].get(s)) for s in OURS)
        their_split = " / ".join(_f(t.get("steps", {}).get(s)) for s in THEIRS)
        lines.append(f"| {r['name']} | {our_split} = **{_f(o['total'])}** (+{_f(o['startup'])}) | {their_split} = "
                     f"**{_f(t['total'])}** (+{_f(t['startup'])}) | {_f(r['ratio'])}× | {_f(r['wall_ratio'])}× | "
                     f"{_f(o['cpu'], '.1f')} / {_f(t['cpu'], '.1f')} = {_f(r['cpu_ratio'])}× |")
    return "\n".join(lines)


def measure(item: str, tmp: Path, quantized: bool) -> dict[str, Any]:
    recipe = recipe_for(item, tmp, quantized)
    name = recipe.stem
    print(f"{name} ...", file=sys.stderr, flush=True)
    o = ours(recipe, tmp / "build" / name)
    t = theirs(recipe, tmp / f"{name}.et.pte")
    ok = not o["error"] and not t["error"] and t["total"]
    return {"name": name, "ours": o, "theirs": t, "ratio": o["total"] / t["total"] if ok else None,
            "wall_ratio": o["wall"] / t["wall"] if ok else None, "cpu_ratio": o["cpu"] / t["cpu"] if ok else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="tier names or recipe files (default: the whole tier)")
    parser.add_argument("--only", action="append", default=[], help="only these tier names (repeatable)")
    parser.add_argument("--quantized", action="store_true", help="tier models with their family's quantize scheme")
    parser.add_argument("--recipes-dir", type=Path, default=ROOT / "recipes", help="the folder of the no-op build")
    parser.add_argument("--noop-dir", type=Path, help="build tree for the no-op build (default: temporary)")
    parser.add_argument("--no-noop", action="store_true", help="skip the no-op build")
    parser.add_argument("--json", type=Path)
    results.add_option(parser, "build")
    parser.add_argument("--executorch", nargs=2, type=Path, metavar=("RECIPE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.executorch:
        executorch_child(*args.executorch)
        return 0
    items = args.models or args.only or _tier_names()
    before = load()
    with tempfile.TemporaryDirectory(prefix="etbuild-build-bench-") as tmp:
        (Path(tmp) / "warm-up").mkdir()
        measure(items[0], Path(tmp) / "warm-up", args.quantized)  # not recorded: see the module's docstring
        rows = [measure(item, Path(tmp), args.quantized) for item in items]
        no_op = None if args.no_noop else noop(args.recipes_dir, args.noop_dir or Path(tmp) / "noop")
    print(f"load average before {before}, after {load()}\n")
    print(table(rows))
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    walls = [r["wall_ratio"] for r in rows if r["wall_ratio"]]
    cpus = [r["cpu_ratio"] for r in rows if r["cpu_ratio"]]
    print(f"\ngeometric mean ours / theirs: {_f(geomean(ratios))}× over {len(ratios)} models "
          f"(wall, imports included: {_f(geomean(walls))}×; cpu: {_f(geomean(cpus))}×)")
    for r in rows:
        for side in ("ours", "theirs"):
            if r[side]["error"]:
                print(f"{r['name']} {side}: {r[side]['error']}")
    if no_op:
        print(f"no-op build of {args.recipes_dir}: {' / '.join(f'{s:.2f}' for s in no_op['seconds'])} s "
              f"(median {no_op['median']:.2f} s; {no_op['summary']})")
    if args.json:
        args.json.write_text(json.dumps({"load": [before, load()], "rows": rows, "noop": no_op}, indent=1))
    if args.results:
        results.save(args.results, [_cells(r) for r in rows], title="Clean builds against ExecuTorch's flow",
                     columns=["name", "ours s", "ours startup s", "theirs s", "theirs startup s", "ratio",
                              "wall ratio", "cpu ratio", "error"],
                     extra={"geometric mean ours / theirs (stages)": geomean(ratios),
                            "geometric mean, wall": geomean(walls), "geometric mean, cpu": geomean(cpus),
                            "no-op build seconds": no_op and no_op["seconds"]},
                     notes=["seconds; ratio: our stages' total over their steps' total; wall: process over process"])
    return 0


def _cells(row: dict[str, Any]) -> dict[str, Any]:
    """One results row: each side's total, startup and CPU seconds and the ratios (stage splits in the JSON)."""
    ours, theirs = row["ours"], row["theirs"]
    return {"name": row["name"], "ours s": ours["total"], "ours startup s": ours["startup"],
            "theirs s": theirs["total"], "theirs startup s": theirs["startup"], "ratio": row["ratio"],
            "wall ratio": row["wall_ratio"], "cpu ratio": row["cpu_ratio"],
            "error": ours["error"] or theirs["error"] or None, "ours stages": ours["stages"],
            "theirs steps": theirs.get("steps")}


def _tier_names() -> list[str]:
    sys.path.insert(0, str(ROOT))
    from tests.models.zoo import ARCHITECTURES

    return list(ARCHITECTURES)


if __name__ == "__main__":
    sys.exit(main())
