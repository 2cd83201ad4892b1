"""Which activation observer int8-static should default to: output SNR and quantize time per observer.

    python benchmarks/observers.py [--arch resnet,tv_mobilenet_v2,...] [--recipe recipes/cnn-int8.yaml ...]
                                   [--samples 16] [--repeat 2]

Per model (the real-model tier's CNNs, `tests/models/zoo.py`, written as int8-static recipes
with 16 calibration samples, and the int8-static recipes named), per observer: the output SNR
(dB, over every float output of every sample) of the converted model against the float eager
model on `--samples` held-out inputs (drawn with seed verify.seed + 1000, not the calibration
seed), and the CPU seconds (all threads; wall time swings on a shared machine) the quantize
stage's work takes with that observer (prepare, calibrate, convert; the least of `--repeat`
runs, after one warm-up run; export not counted). Prints
a Markdown table, one row per model, and the mean.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import results  # benchmarks/results.py (the script's folder is on sys.path)
import torch
from torch.utils._pytree import tree_flatten

from etbuild.model import sample_inputs
from etbuild.quantize import auto, flow
from etbuild.quantize.calibration import calibration_inputs
from etbuild.quantize.fallback import snr_db_of
from etbuild.quantize.modules import SchemeMap
from etbuild.quantize.schemes import AUTO, OBSERVERS
from etbuild.recipe import Recipe, load_recipe
from etbuild.stages.export import run_export
from etbuild.stages.quantize import _model_relative

ROOT = Path(__file__).resolve().parents[1]
CNNS = ("resnet", "tv_mobilenet_v2", "efficientnet", "ghostnet", "tv_shufflenet", "mobilenetv3", "regnet")


def measure(recipe: Recipe, observers: list[str], samples: int, repeat: int,
            work: Path) -> dict[str, tuple[float, float]]:
    """Observer -> (output SNR against float eager in dB, quantize seconds)."""
    exports = {"forward": work / f"{recipe.name}.pt2"}
    run_export(recipe, exports)
    ep = _model_relative(torch.export.load(str(exports["forward"])))
    cfg = recipe.quantize
    calibration = calibration_inputs(recipe, "forward")
    held_out = sample_inputs(recipe, samples, recipe.verify.seed + 1000, "forward")
    eager = ep.module()
    with torch.no_grad():
        reference = [tree_flatten(eager(*x))[0] for x in held_out]
    verify = sample_inputs(recipe, recipe.verify.samples, recipe.verify.seed, "forward")
    flow.quantize(ep, flow.Plan(SchemeMap(cfg.scheme)), calibration[:1])  # warm up: the first run pays for imports
    rows = {}
    for name in observers:
        plan = flow.Plan(SchemeMap(cfg.scheme, cfg.modules, name), cfg.per_channel, cfg.group_size, cfg.embeddings)
        seconds = math.inf
        for _ in range(repeat):  # the fastest of `repeat` runs: the machine is shared
            start = time.process_time()
            if name == AUTO:  # what the stage does: choose on the verify samples, against the float graph
                model = auto.quantize(ep, plan, calibration, verify, flow.float_reference(ep)).model
            else:
                model = flow.quantize(ep, plan, calibration)
            seconds = min(seconds, time.process_time() - start)
        with torch.no_grad():
            got = [tree_flatten(model(*x))[0] for x in held_out]
        rows[name] = (snr_db_of(reference, got), seconds)
    return rows


def recipes(args: argparse.Namespace, work: Path) -> list[Path]:
    sys.path.insert(0, str(ROOT / "tests" / "models"))
    from zoo import write_recipe

    written = [write_recipe(a, work, quantized=True) for a in args.arch.split(",") if a]
    return written + [Path(r) for r in args.recipe]


def _columns(observers: list[str], rows: dict[str, tuple[float, float]]) -> dict[str, float]:
    """One results row's cells: each observer's SNR (dB) and seconds."""
    return {f"{o} {unit}": value for o in observers for unit, value in zip(("dB", "s"), rows[o])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default=",".join(CNNS))
    parser.add_argument("--recipe", action="append", default=[])
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--observers", default=",".join([*OBSERVERS, AUTO]))
    parser.add_argument("--repeat", type=int, default=2)
    results.add_option(parser, "observers")
    args = parser.parse_args(argv)
    observers = args.observers.split(",")
    print("| model | " + " | ".join(f"{o} dB | {o} s" for o in observers) + " |")
    print("|---|" + "---|---|" * len(observers))
    totals = {o: [0.0, 0.0] for o in observers}
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = recipes(args, Path(tmp))
        for path in paths:
            recipe = load_recipe(path)
            rows = measure(recipe, observers, args.samples, args.repeat, Path(tmp))
            for o, (snr, seconds) in rows.items():
                totals[o][0] += snr
                totals[o][1] += seconds
            print(f"| {recipe.name} | " + " | ".join(f"{rows[o][0]:.2f} | {rows[o][1]:.1f}" for o in observers)
                  + " |", flush=True)
            table.append({"model": recipe.name, **_columns(observers, rows)})
    n = len(paths)
    print("| mean | " + " | ".join(f"{totals[o][0] / n:.2f} | {totals[o][1] / n:.1f}" for o in observers) + " |")
    if args.results:
        table.append({"model": "mean", **_columns(observers, {o: (t[0] / n, t[1] / n) for o, t in totals.items()})})
        results.save(args.results, table, title="Observers: output SNR against float and CPU seconds of the stage",
                     notes=[f"SNR on {args.samples} held-out inputs; seconds: CPU time of prepare, calibrate, convert"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
