"""The real-model tier: build, verify, run in ExecuTorch; build time, latency and size next to ExecuTorch's flows.

    python benchmarks/real_models.py [NAME ...] [--runs 10] [--threads 1] [--keep DIR] [--json out.json]
    python benchmarks/real_models.py --delegation [NAME ...] [--rounds 5] [--runs 20] [--thread-counts 1 2]

The architectures are the tier's (`tests/models/zoo.py`, one definition for the tests and this
file): small random-initialised configurations from transformers, timm and torchvision, no
download. Per model it writes a recipe (`factory: tests/models/zoo.py:<name>`) into a temporary
directory and runs `etbuild build` on it (export → … → verify); builds the same model with
ExecuTorch's portable flow (`to_edge → to_executorch`) and its XNNPACK flow
(`to_edge_transform_and_lower` with its XnnpackPartitioner); and times, as the median of
--runs calls after warm-up, our `.pte` in our runtime, ExecuTorch's portable and XNNPACK
`.pte` files in ExecuTorch's runtime, and eager torch. ExecuTorch's runtime also runs our
`.pte` and must give our outputs. Build time is export → lower → plan → emit for us (select and
verify apart) and export → to_edge → to_executorch for ExecuTorch. Every etbuild and eager
latency is measured before the first ExecuTorch runtime call (loading its library slows torch
in the same process). Needs the `interop` and `models` extras.

`--delegation` measures what a user of our XNNPACK delegation sees: per model, our `.pte` built with
`backends: [{name: xnnpack}]` and ExecuTorch's own lowering of the same model
(`to_edge_transform_and_lower` + XnnpackPartitioner + `to_executorch`), both run in ExecuTorch's
runtime, each timing (median of --runs calls after warm-up) in a fresh process
(`timing.executorch_fresh_us`: its XNNPACK threadpool reset to the thread count with
`_unsafe_reset_threadpool`), ours and theirs alternating process by process for --rounds rounds at each
of --thread-counts. Per model and thread count it reports both medians over the rounds, the median
of the rounds' ratios (ours / theirs) and the machine's 1-minute load average before and after.
Per model it also counts both programs' delegates and the XNNPACK node kinds whose counts differ (ours
minus theirs): where the two graphs are the same, a ratio away from 1 is the machine, not the lowering.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import results  # benchmarks/results.py (the script's folder is on sys.path)
import torch
from alternate import alternate  # benchmarks/alternate.py (the script's folder is on sys.path)
from timing import median_us  # benchmarks/timing.py

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tier's zoo lives in the tests package: one definition for both

from tests.models.zoo import ARCHITECTURES, write_recipe  # noqa: E402

OUR_BUILD = ("export", "lower", "plan", "emit")
FLOWS = ("etbuild", "executorch_portable", "executorch_xnnpack", "eager_torch")


@dataclass
class Result:
    """One architecture's row: does it build, verify and run in ExecuTorch; build seconds, latency, bytes."""

    name: str
    builds: bool = False
    verifies: bool = False
    runs_in_executorch: bool | None = None
    max_diff_executorch: float | None = None
    build_s: dict[str, float] = field(default_factory=dict)
    latency_us: dict[str, float] = field(default_factory=dict)
    pte_bytes: dict[str, int] = field(default_factory=dict)
    error: str = ""


@dataclass
class Pending:
    """What the ExecuTorch-runtime phase needs: the recipe, the sample, ours and ExecuTorch's `.pte` files."""

    recipe: Any
    sample: tuple[torch.Tensor, ...]
    ours: list[np.ndarray] | None
    ptes: dict[str, Path]


def probe(name: str, root: Path, runs: int) -> tuple[Result, Pending]:
    """Our build and latency, eager latency, ExecuTorch's two builds (its runtime is not called here)."""
    from etbuild.build.driver import build
    from etbuild.model import sample_inputs
    from etbuild.recipe import load_recipe

    result = Result(name)
    recipe = load_recipe(write_recipe(name, root))
    built = build([recipe.path], root / "build", stream=io.StringIO())
    pte = root / "build" / recipe.name / f"{recipe.name}.pte"
    result.builds, result.verifies = pte.exists(), built.exit_code == 0
    result.error = "; ".join(built.failed.values())
    result.build_s["etbuild"] = sum(t for task, t in built.seconds.items() if task.split(":")[0] in OUR_BUILD)
    result.build_s["etbuild_select_verify"] = sum(t for task, t in built.seconds.items()
                                                  if task.split(":")[0] not in OUR_BUILD)
    sample = sample_inputs(recipe, 1, 7)[0]
    pending = Pending(recipe, sample, None, {})
    if result.builds:
        result.pte_bytes["etbuild"] = pte.stat().st_size
        pending.ptes["etbuild"] = pte
        pending.ours = _time_ours(pte, sample, runs, result)
    _time_eager(recipe, sample, runs, result)
    for flow in ("executorch_portable", "executorch_xnnpack"):
        _executorch_build(recipe, root / f"{name}.{flow}.pte", flow, pending, result)
    return result, pending


def _time_ours(pte: Path, sample: tuple[torch.Tensor, ...], runs: int, result: Result) -> list[np.ndarray]:
    from etbuild.runtime import Program

    method, arrays = Program.load(pte).load_method("forward"), [t.numpy() for t in sample]
    result.latency_us["etbuild"] = median_us(lambda: method(*arrays), runs, warmup=2)
    return [np.asarray(a) for a in method(*arrays)]


def _time_eager(recipe: Any, sample: tuple[torch.Tensor, ...], runs: int, result: Result) -> None:
    from etbuild.model import build_model

    model = build_model(recipe)
    with torch.no_grad():
        result.latency_us["eager_torch"] = median_us(lambda: model(*sample), runs, warmup=2)


def _executorch_build(recipe: Any, path: Path, flow: str, pending: Pending, result: Result) -> None:
    from etbuild.verify.oracle import executorch_build, xnnpack_partitioner

    try:
        built = executorch_build(recipe, path, xnnpack_partitioner() if flow == "executorch_xnnpack" else None)
    except Exception as exc:  # ExecuTorch's own flow: any failure is reported, not ours to fix
        result.error += f" {flow} build: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return
    result.build_s[flow] = built.total_s
    result.pte_bytes[flow] = path.stat().st_size
    pending.ptes[flow] = path


def run_in_executorch(pending: Pending, runs: int, result: Result) -> None:
    """ExecuTorch's runtime: our `.pte` against our outputs, then the latency of its own two `.pte` files."""
    from executorch.runtime import Runtime

    args = list(pending.sample)
    for flow, pte in pending.ptes.items():
        try:
            method = Runtime.get().load_program(pte).load_method("forward")
            outs = method.execute(args)
        except Exception as exc:  # ExecuTorch's runtime: any failure is the finding
            result.error += f" executorch runtime on the {flow} pte: {type(exc).__name__}: {exc}"
            result.runs_in_executorch = False if flow == "etbuild" else result.runs_in_executorch
            continue
        if flow == "etbuild" and pending.ours is not None:
            diffs = [float(np.max(np.abs(a - t.numpy()), initial=0.0)) for a, t in zip(pending.ours, outs)]
            result.runs_in_executorch, result.max_diff_executorch = True, max(diffs, default=0.0)
        else:
            result.latency_us[flow] = median_us(lambda m=method: m.execute(args), runs, warmup=2)


def _cell(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def table(results: list[Result]) -> str:
    """The report as a Markdown table."""
    head = ("| model | builds | verifies | runs in ET | ET diff | build s: ours / ET / ET+XNNPACK "
            "| latency ms: ours / ET / ET+XNNPACK / eager | .pte KB: ours / ET |")
    rows = [head, "|" + "---|" * 8]
    for r in results:
        b, lat, size = r.build_s, r.latency_us, r.pte_bytes
        builds = " / ".join(_cell(b.get(f), ".1f") for f in FLOWS[:3])
        latency = " / ".join(_cell(lat[f] / 1000 if f in lat else None, ".2f") for f in FLOWS)
        sizes = " / ".join(_cell(size[f] / 1024 if f in size else None, ",.0f") for f in FLOWS[:2])
        rows.append(f"| {r.name} | {r.builds} | {r.verifies} | {r.runs_in_executorch} | "
                    f"{_cell(r.max_diff_executorch, '.1e')} | {builds} | {latency} | {sizes} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", choices=[[], *ARCHITECTURES], default=[])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--keep", type=Path, help="build here instead of a temporary directory")
    parser.add_argument("--json", type=Path)
    results.add_option(parser, "real-models")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for eager (default 1, as ExecuTorch's)")
    parser.add_argument("--delegation", action="store_true",
                        help="ours vs ExecuTorch's XNNPACK lowering in its runtime, fresh processes (docstring)")
    parser.add_argument("--rounds", type=int, default=5, help="--delegation: alternating rounds per thread count")
    parser.add_argument("--thread-counts", type=int, nargs="+", default=[1, 2], help="--delegation: thread counts")
    args = parser.parse_args(argv)
    if args.delegation:
        return delegation_main(args)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))  # torch's one-time setup, untimed
        probed = [_probe_or_report(name, root, args.runs) for name in args.names or list(ARCHITECTURES)]
        for result, pending in probed:
            if pending is not None:
                run_in_executorch(pending, args.runs, result)
    measured = [r for r, _ in probed]
    print(f"torch threads {torch.get_num_threads()}; latency: median of {args.runs} calls\n")
    print(table(measured))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in measured], indent=1))
    if args.results:
        results.save(args.results, [asdict(r) for r in measured], title="The tier against ExecuTorch's flows",
                     notes=[f"latency: median of {args.runs} calls, µs; eager torch on {args.threads} thread"])
    return 0 if all(r.verifies and r.runs_in_executorch for r in measured) else 1


def delegation_row(name: str, root: Path, rounds: int, runs: int, thread_counts: list[int]) -> dict[str, Any]:
    """One model of `--delegation`: ours and ExecuTorch's XNNPACK `.pte`, timed in fresh processes, alternating."""
    from etbuild.build.driver import build
    from etbuild.model import sample_inputs
    from etbuild.recipe import load_recipe
    from etbuild.verify.oracle import executorch_build, xnnpack_partitioner

    recipe = load_recipe(write_recipe(name, root, xnnpack=True))
    built = build([recipe.path], root / "build", stream=io.StringIO())
    if built.exit_code:
        return {"model": name, "error": "; ".join(built.failed.values())}
    ptes = {"ours": root / "build" / recipe.name / f"{recipe.name}.pte", "theirs": root / f"{recipe.name}.et.pte"}
    try:
        executorch_build(recipe, ptes["theirs"], xnnpack_partitioner())
    except Exception as exc:  # ExecuTorch's own flow: its failure is reported, not ours to fix
        return {"model": name, "error": f"ExecuTorch's XNNPACK flow: {type(exc).__name__}: {str(exc)[:150]}"}
    inputs = root / f"{recipe.name}.inputs.npz"
    np.savez(inputs, **{f"in{k}": t.numpy() for k, t in enumerate(sample_inputs(recipe, 1, 7)[0])})
    kinds = {who: delegate_kinds(pte) for who, pte in ptes.items()}
    row: dict[str, Any] = {"model": name, "threads": {}, "kinds": kinds_difference(kinds["ours"], kinds["theirs"]),
                           "delegates": {who: len(counts) for who, counts in kinds.items()}}
    for threads in thread_counts:
        load = [_load()]
        timed = alternate(inputs, [ptes["ours"], ptes["theirs"]], rounds, runs, threads, warmup=3)
        times = {who: timed[pte] for who, pte in ptes.items()}
        load.append(_load())
        ratios = [a / b for a, b in zip(times["ours"], times["theirs"])]
        row["threads"][threads] = {"ours_us": statistics.median(times["ours"]),
                                   "theirs_us": statistics.median(times["theirs"]),
                                   "ratio": statistics.median(ratios), "load": load}
    return row


def delegate_kinds(pte: Path) -> list[Counter[str]]:
    """The XNNPACK node kinds of each delegate of `pte`'s forward, counted."""
    from etbuild.backends.xnnpack.format.blob import read_blob
    from etbuild.runtime import Program
    from etbuild.runtime.delegates import processed_blob

    program = Program.load(pte)
    return [Counter(type(n.node).__name__ for n in read_blob(processed_blob(
        program.data, program.program, program.header, d.processed, str(pte))).graph.xnodes)
        for d in program.plan("forward").delegates]


def kinds_difference(ours: list[Counter[str]], theirs: list[Counter[str]]) -> dict[str, int]:
    """Node kinds whose count differs between two programs' delegates (`delegate_kinds`): ours minus theirs (what
    one side runs inside XNNPACK that the other runs otherwise or not at all)."""
    a, b = (sum(kinds, Counter()) for kinds in (ours, theirs))
    return {k: a[k] - b[k] for k in sorted(a.keys() | b.keys()) if a[k] != b[k]}


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def delegation_table(rows: list[dict[str, Any]], thread_counts: list[int]) -> str:
    """The `--delegation` report as a Markdown table."""
    cells = " | ".join(f"{t} thread{'s' if t > 1 else ''}: ours / ET µs, ratio, load" for t in thread_counts)
    lines = [f"| model | {cells} | delegates ours / ET; node kinds ours − ET |",
             "|---|" + "---|" * (len(thread_counts) + 1)]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['model']} | {row['error'][:200]} |")
            continue
        parts = []
        for t in thread_counts:
            c = row["threads"][t]
            parts.append(f"{c['ours_us']:,.0f} / {c['theirs_us']:,.0f}, **{c['ratio']:.2f}×**, "
                         f"{c['load'][0]:.1f}–{c['load'][1]:.1f}")
        kinds = ", ".join(f"{k} {n:+d}" for k, n in row["kinds"].items()) or "same"
        parts.append(f"{row['delegates']['ours']} / {row['delegates']['theirs']}; {kinds}")
        lines.append(f"| {row['model']} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def _delegation_cells(row: dict[str, Any], thread_counts: list[int]) -> dict[str, Any]:
    """One results row of `--delegation`: per thread count ours, ExecuTorch's, the ratio and the load."""
    if "error" in row:
        return {"model": row["model"], "error": row["error"]}
    cells: dict[str, Any] = {"model": row["model"]}
    for t in thread_counts:
        c = row["threads"][t]
        cells |= {f"{t}t ours us": c["ours_us"], f"{t}t ET us": c["theirs_us"], f"{t}t ratio": c["ratio"],
                  f"{t}t load": f"{c['load'][0]:.1f}-{c['load'][1]:.1f}"}
    return cells | {"delegates ours / ET": f"{row['delegates']['ours']} / {row['delegates']['theirs']}"}


def delegation_main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        rows = []
        for name in args.names or list(ARCHITECTURES):
            rows.append(delegation_row(name, root, args.rounds, args.runs, args.thread_counts))
            print(delegation_table(rows[-1:], args.thread_counts).splitlines()[-1], file=sys.stderr, flush=True)
            if args.json:  # each row as it comes: a long run stopped part-way keeps what it measured
                args.json.write_text(json.dumps(rows, indent=1))
    print(f"ExecuTorch's runtime, one fresh process per timing (median of {args.runs} calls), "
          f"{args.rounds} alternating rounds; load = 1-minute load average before–after\n")
    print(delegation_table(rows, args.thread_counts))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.results:
        results.save(args.results, [_delegation_cells(r, args.thread_counts) for r in rows],
                     title="Our XNNPACK delegation of the tier against ExecuTorch's, in ExecuTorch's runtime",
                     notes=[f"median of {args.runs} calls in a fresh process per timing, {args.rounds} alternating "
                            "rounds; ratio: ours / ExecuTorch's; load: 1-minute load average before and after"])
    return 0 if all("error" not in r for r in rows) else 1


def _probe_or_report(name: str, root: Path, runs: int) -> tuple[Result, Pending | None]:
    start = time.perf_counter()
    try:
        result, pending = probe(name, root, runs)
    except Exception:  # a probe crash is a finding to report, the next model still runs
        result, pending = Result(name, error=traceback.format_exc(limit=-3)), None
    print(f"{name}: builds {result.builds}, verifies {result.verifies} ({time.perf_counter() - start:.0f} s) "
          f"{result.error[:300]}", file=sys.stderr, flush=True)
    return result, pending


if __name__ == "__main__":
    sys.exit(main())
