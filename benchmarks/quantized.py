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

    python benchmarks/quantized.py --tier [--only NAME,...] [--samples 16] [--seed 1] [--runs 20]
        [--rounds 3] [--keep DIR] [--int4-algorithm hqq_scale_only|affine] [--json out.json]

The real-model tier (`tests/models/zoo.py`), each architecture with its family's scheme and
`backends: [xnnpack]`, against ExecuTorch's own quantized XNNPACK flow: ours is `etbuild build`
of the recipe (calibrated on `calibration_inputs(recipe, "forward")`: 16 samples, seed 0);
ExecuTorch's is its XNNPACKQuantizer (per-channel symmetric; static calibrated on the same
inputs, or dynamic) through pt2e, or, for 8da4w decoders, torchao's `quantize_` source transform
as its LLM flow applies it (group size the recipe's), then `to_edge_transform_and_lower` with
its XnnpackPartitioner and `to_executorch`. Both `.pte` files run in ExecuTorch's runtime:
SNR against float eager torch on --samples held-out inputs (seed --seed; the lowest over the
outputs, as verify's gate takes it), bytes, and latency at one thread, each program timed in a
fresh process (--rounds processes each, alternating which goes first; the median of their medians). A side
that fails gives a row naming where and why; the benchmark goes on.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import results  # benchmarks/results.py (the script's folder is on sys.path)
import torch
from timing import executorch_fresh_us, median_us  # benchmarks/timing.py
from torch.utils._pytree import tree_flatten

from etbuild.build.driver import build
from etbuild.model import build_model, call_method, example_inputs, sample_inputs
from etbuild.quantize.metrics import snr_db
from etbuild.recipe import Recipe, discover_recipes, load_recipe
from etbuild.runtime import Program
from etbuild.verify.oracle import INT4_SCHEME, ORACLE_SCHEMES, executorch_build, xnnpack_partitioner

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


# ------------------------------------------------------------------ --tier

FLOWS = ("ours", "theirs")
SNR_SLACK_DB, LATENCY_SLACK = 0.5, 1.1
TIER_COLUMNS = ("snr_db", "pte_bytes", "latency_us")


@dataclass
class TierRow:
    """One architecture: SNR against float, `.pte` bytes and latency per flow; our verify; what failed."""

    name: str
    scheme: str
    snr_db: dict[str, float] = field(default_factory=dict)
    pte_bytes: dict[str, int] = field(default_factory=dict)
    latency_us: dict[str, float] = field(default_factory=dict)
    verify_passed: bool | None = None
    errors: list[str] = field(default_factory=list)

    def fail(self, where: str, exc: BaseException | str) -> None:
        text = str(exc).strip()
        first = text.splitlines()[0] if text else ""
        self.errors.append(f"{where}: {type(exc).__name__ + ': ' if isinstance(exc, BaseException) else ''}{first}")

    @property
    def complete(self) -> bool:
        return all(f in self.snr_db and f in self.latency_us for f in FLOWS)

    @property
    def meets_bar(self) -> bool | None:
        """The issue's bar: SNR within 0.5 dB of ExecuTorch's at no more bytes, or under half its
        bytes at any SNR; and latency at most 1.1× its. None when a side has no numbers."""
        if not self.complete:
            return None
        ours, theirs = self.pte_bytes["ours"], self.pte_bytes["theirs"]
        accurate = self.snr_db["ours"] >= self.snr_db["theirs"] - SNR_SLACK_DB and ours <= theirs
        fast = self.latency_us["ours"] <= LATENCY_SLACK * self.latency_us["theirs"]
        return (accurate or ours < theirs / 2) and fast


def run_tier(args: argparse.Namespace) -> int:
    """`--tier`: every architecture (or --only's) both ways; the table to stdout, progress to stderr."""
    sys.path.insert(0, str(ROOT))  # the tier's zoo lives in the tests package: one definition for both
    from tests.models.zoo import ARCHITECTURES

    warnings.filterwarnings("ignore", category=FutureWarning)  # torch's pytree deprecation, once per export
    names = args.only.split(",") if args.only else list(ARCHITECTURES)
    unknown = [n for n in names if n not in ARCHITECTURES]
    if unknown:
        raise SystemExit(f"--only: unknown architecture(s) {', '.join(unknown)}; known: {', '.join(ARCHITECTURES)}")
    with tempfile.TemporaryDirectory(prefix="quantized-tier-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        rows = []
        for k, name in enumerate(names):
            _progress(f"[{k + 1}/{len(names)}] {name} ({ARCHITECTURES[name].scheme})")
            rows.append(tier_row(name, root, args))
            _progress(f"  {_row_text(rows[-1])}")
            if args.json:
                args.json.write_text(json.dumps(_report(rows), indent=1))
    print(tier_table(rows))
    print()
    print(summary(rows))
    if args.results:
        results.save(args.results, [_flat(r) for r in rows], notes=[summary(rows)],
                     title="The real-model tier quantized: ours against ExecuTorch's flow")
    return 0


def tier_row(name: str, root: Path, args: argparse.Namespace) -> TierRow:
    """Both builds of one architecture, then both `.pte` files measured in ExecuTorch's runtime."""
    from tests.models.zoo import ARCHITECTURES, write_recipe

    row = TierRow(name, ARCHITECTURES[name].scheme)
    try:
        recipe = load_recipe(write_recipe(name, root, quantized=True, xnnpack=True))
    except Exception as exc:  # the recipe the tier writes: a failure is a row, not a crash
        row.fail("recipe", exc)
        return row
    ptes = {"ours": _build_ours(recipe, root, row), "theirs": _build_theirs(recipe, root, row, args.int4_algorithm)}
    ptes = {flow: pte for flow, pte in ptes.items() if pte is not None}
    for flow, pte in ptes.items():
        row.pte_bytes[flow] = pte.stat().st_size
    _measure_snr(recipe, ptes, row, args)
    _measure_latency(recipe, ptes, row, args, root)
    return row


def _progress(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)


def _build_ours(recipe: Recipe, root: Path, row: TierRow) -> Path | None:
    """`etbuild build` of the recipe; the `.pte` if emitted (verify may still fail: that is reported)."""
    start = time.perf_counter()
    try:
        result = build([recipe.path], root / "build", stream=io.StringIO())
    except Exception as exc:  # our build raising rather than reporting is itself a finding
        row.fail("ours build", exc)
        return None
    for task, message in result.failed.items():
        row.fail(f"ours {task.split(':')[0]}", message)
    verify = root / "build" / recipe.name / "verify.json"
    row.verify_passed = json.loads(verify.read_text()).get("passed") if verify.exists() else None
    pte = root / "build" / recipe.name / f"{recipe.name}.pte"
    _progress(f"  ours: built in {time.perf_counter() - start:.0f} s, verify passed {row.verify_passed}")
    return pte if pte.exists() else None


def _build_theirs(recipe: Recipe, root: Path, row: TierRow, int4_algorithm: str) -> Path | None:
    """ExecuTorch's quantizer (or torchao's 8da4w) and XNNPACK flow on the same calibration inputs."""
    from etbuild.quantize.calibration import calibration_inputs

    scheme = INT4_SCHEME if recipe.quantize.scheme == INT4_SCHEME else ORACLE_SCHEMES[recipe.quantize.scheme]
    path = root / f"{recipe.name}.executorch.pte"
    if path.exists():  # a --keep directory's earlier build: ExecuTorch's flow does not change between runs
        _progress(f"  executorch: reused {path}")
        return path
    start = time.perf_counter()
    try:
        executorch_build(recipe, path, xnnpack_partitioner(), quantize=scheme,
                         calibration={"forward": calibration_inputs(recipe, "forward")}, int4_algorithm=int4_algorithm)
    except Exception as exc:  # ExecuTorch's own flow: any failure is reported, not ours to fix
        row.fail("executorch build", exc)
        return None
    _progress(f"  executorch: built in {time.perf_counter() - start:.0f} s")
    return path


def _measure_snr(recipe: Recipe, ptes: dict[str, Path], row: TierRow, args: argparse.Namespace) -> None:
    """Each `.pte` in ExecuTorch's runtime on the held-out inputs against float eager torch."""
    from etbuild.verify.oracle import run_samples_in_executorch
    from etbuild.verify.stage import run_samples

    samples = sample_inputs(recipe, args.samples, args.seed)
    model = build_model(recipe)
    expected = [[t.detach() for t in tree_flatten(call_method(recipe, model, "forward", s))[0]] for s in samples]
    for flow, pte in ptes.items():
        try:
            actual = run_samples(run_samples_in_executorch, pte, samples)
        except Exception as exc:  # ExecuTorch's runtime refusing a program is the finding
            row.fail(f"{flow} in executorch runtime", exc)
            continue
        per_output = [snr_db([e[k] for e in expected], [torch.from_numpy(np.asarray(a[k])) for a in actual])
                      for k in range(len(expected[0]))]
        row.snr_db[flow] = min(per_output)


def _measure_latency(recipe: Recipe, ptes: dict[str, Path], row: TierRow, args: argparse.Namespace,
                     root: Path) -> None:
    """Each program timed in fresh processes, --rounds each, alternating which goes first (against drift)."""
    inputs = root / f"{recipe.name}.inputs.npz"
    np.savez(inputs, **{f"in{k}": t.numpy() for k, t in enumerate(example_inputs(recipe, "forward"))})
    flows = [f for f in FLOWS if f in ptes and f in row.snr_db]
    times: dict[str, list[float]] = {f: [] for f in flows}
    for r in range(args.rounds):
        for flow in flows if r % 2 == 0 else flows[::-1]:
            try:
                times[flow].append(executorch_fresh_us(ptes[flow], inputs, args.runs))
            except RuntimeError as exc:
                row.fail(f"{flow} timing", exc)
    row.latency_us.update({f: statistics.median(ts) for f, ts in times.items() if ts})


def _cell(value: float | None, spec: str) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _row_text(r: TierRow) -> str:
    snr, size, lat = r.snr_db, r.pte_bytes, r.latency_us
    return (f"SNR {_cell(snr.get('ours'), '.1f')} / {_cell(snr.get('theirs'), '.1f')} dB, "
            f"{_cell(size.get('ours'), ',')} / {_cell(size.get('theirs'), ',')} B, "
            f"{_cell(lat.get('ours'), ',.0f')} / {_cell(lat.get('theirs'), ',.0f')} us, verify {r.verify_passed}, "
            f"bar {r.meets_bar}{' — ' + '; '.join(r.errors) if r.errors else ''}")


def _short(text: str, limit: int = 120) -> str:
    """A table cell's text: at most `limit` characters (the JSON report keeps all), no pipes."""
    text = text.replace("|", "/")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tier_table(rows: list[TierRow]) -> str:
    """The tier as a Markdown table (ours / ExecuTorch's in each pair)."""
    lines = ["| model | scheme | SNR dB: ours / ET | Δ dB | .pte KB: ours / ET | latency µs: ours / ET | "
             "ours / ET latency | verify | bar | failed |", "|" + "---|" * 10]
    for r in rows:
        snr, size, lat = r.snr_db, r.pte_bytes, r.latency_us
        delta = snr["ours"] - snr["theirs"] if all(f in snr for f in FLOWS) else None
        ratio = lat["ours"] / lat["theirs"] if all(f in lat for f in FLOWS) else None
        kb = [size[f] / 1024 if f in size else None for f in FLOWS]
        lines.append(
            f"| {r.name} | {r.scheme} | {_cell(snr.get('ours'), '.1f')} / {_cell(snr.get('theirs'), '.1f')} | "
            f"{_cell(delta, '+.1f')} | {_cell(kb[0], ',.0f')} / {_cell(kb[1], ',.0f')} | "
            f"{_cell(lat.get('ours'), ',.0f')} / {_cell(lat.get('theirs'), ',.0f')} | {_cell(ratio, '.2f')} | "
            f"{r.verify_passed} | {'–' if r.meets_bar is None else r.meets_bar} | {_short('; '.join(r.errors))} |")
    return "\n".join(lines)


def summary(rows: list[TierRow]) -> str:
    """How many rows meet the bar, and the mean SNR difference over the rows with both SNRs finite."""
    deltas = [r.snr_db["ours"] - r.snr_db["theirs"] for r in rows
              if all(math.isfinite(r.snr_db.get(f, math.nan)) for f in FLOWS)]
    meets = sum(r.meets_bar is True for r in rows)
    measured = sum(r.meets_bar is not None for r in rows)
    mean = f"{statistics.mean(deltas):+.2f} dB over {len(deltas)} rows" if deltas else "– (no row has both)"
    return (f"{meets} of {len(rows)} rows meet the bar ({measured} measured both ways; bar: SNR ≥ ExecuTorch's − "
            f"{SNR_SLACK_DB} dB at no more bytes, or under half its bytes; latency ≤ {LATENCY_SLACK}× its). "
            f"Mean SNR difference (ours − ExecuTorch's): {mean}.")


def _flat(row: TierRow) -> dict[str, Any]:
    """One results row: each measure per flow in a column of its own."""
    measures = {f"{key} {flow}": getattr(row, key).get(flow) for key in TIER_COLUMNS for flow in FLOWS}
    return {"name": row.name, "scheme": row.scheme, **measures, "verify": row.verify_passed,
            "meets_bar": row.meets_bar, "errors": "; ".join(row.errors)}


def _report(rows: list[TierRow]) -> dict[str, Any]:
    return {"rows": [{**asdict(r), "meets_bar": r.meets_bar} for r in rows], "summary": summary(rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipes", nargs="*", type=Path)
    parser.add_argument("--build-dir", type=Path, default=ROOT / "build")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--json", type=Path)
    results.add_option(parser, "quantized")
    parser.add_argument("--tier", action="store_true", help="the real-model tier against ExecuTorch's XNNPACK flow")
    parser.add_argument("--only", help="--tier: comma-separated architecture names")
    parser.add_argument("--samples", type=int, default=16, help="--tier: held-out inputs for the SNR")
    parser.add_argument("--seed", type=int, default=1, help="--tier: their seed (calibration uses 0)")
    parser.add_argument("--rounds", type=int, default=3, help="--tier: fresh timing processes per program")
    parser.add_argument("--keep", type=Path, help="--tier: build here instead of a temporary dir; next time our "
                        "stages rebuild what changed, ExecuTorch's .pte files are reused (delete one to rebuild)")
    parser.add_argument("--int4-algorithm", default="hqq_scale_only", choices=["hqq_scale_only", "affine"],
                        help="--tier: torchao's scale choice for ExecuTorch's 8da4w (export_llm's default: hqq)")
    args = parser.parse_args(argv)
    if args.tier:
        return run_tier(args)
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
    if args.results:
        results.save(args.results, rows, title="Quantized recipes: size and latency against ExecuTorch's own",
                     notes=[f"median of {args.runs} calls of forward, microseconds; ExecuTorch's portable runtime"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
