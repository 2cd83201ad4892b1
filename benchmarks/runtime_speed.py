"""Our runtime as users see it: each timing in its own fresh process, at the default thread count and at one.

    python benchmarks/runtime_speed.py [RECIPE ...] [--portable gru,kws] [--work /tmp/rt] [--runs 200]
                                       [--warmup 20] [--repeat 3] [--threads default,1] [--json out.json]

Per zoo recipe (default mlp, cnn, kws, gru, transformer), ExecuTorch lowers the model with
`to_edge_transform_and_lower` + XnnpackPartitioner (the oracle); for the --portable recipes etbuild
builds its portable `.pte` (`etbuild build`). Both are cached under --work (delete it to rebuild).
Then, for each thread setting and --repeat rounds, every contender runs in a fresh child process
(load the program, --warmup calls, the median of --runs calls), contenders alternating process by
process, who goes first alternating round by round:

- ours on ExecuTorch's XNNPACK program, ExecuTorch's runtime on the same program, eager torch;
- ours on our portable build, eager torch (for the --portable recipes).

A contender's figure is the median of its rounds' medians. "1" thread means OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS and MKL_NUM_THREADS at 1 in every child, torch.set_num_threads(1) in the
eager child and ExecuTorch's threadpool reset to 1 (`_unsafe_reset_threadpool`); "default" leaves
every library at its own default. The load average (/proc/loadavg) is printed before and after.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZOO = ("mlp", "cnn", "kws", "gru", "transformer")
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass
class Row:
    """One program and its contenders' timings (µs per round) at one thread setting."""

    recipe: str
    kind: str  # "xnnpack" (ExecuTorch's program) or "portable" (our build)
    threads: str
    rounds: dict[str, list[float]] = field(default_factory=dict)

    def median(self, name: str) -> float:
        return statistics.median(self.rounds[name]) if self.rounds.get(name) else float("nan")


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def prepare(name: str, work: Path, portable: bool) -> dict[str, Path]:
    """The inputs (`in0`, … in an .npz), ExecuTorch's XNNPACK `.pte` and, if asked, our portable one."""
    import numpy as np

    from etbuild.model import example_inputs
    from etbuild.recipe import load_recipe

    path = ROOT / "recipes" / f"{name}.yaml"
    recipe = load_recipe(path)
    method = recipe.model.methods[0].name
    files = {"inputs": work / f"{name}.inputs.npz", "xnnpack": work / f"{name}.xnnpack.pte"}
    if not files["inputs"].exists():
        np.savez(files["inputs"], **{f"in{k}": t.numpy() for k, t in enumerate(example_inputs(recipe, method))})
    if not files["xnnpack"].exists():
        from etbuild.verify.oracle import executorch_build, xnnpack_partitioner

        print(f"{name}: ExecuTorch lowers it to XNNPACK ...", file=sys.stderr, flush=True)
        tmp = files["xnnpack"].with_suffix(".tmp")
        executorch_build(recipe, tmp, xnnpack_partitioner())
        tmp.replace(files["xnnpack"])
    if portable:
        from etbuild.build.driver import build

        result = build([path], work / "build", stream=io.StringIO())
        if result.exit_code:
            raise SystemExit(f"etbuild build failed for {name}: {result.failed}")
        files["portable"] = work / "build" / name / f"{name}.pte"
    return files


def child_env(threads: str) -> dict[str, str]:
    env = dict(os.environ)
    for var in THREAD_VARS:
        if threads == "default":
            env.pop(var, None)
        else:
            env[var] = threads
    return env


def run_child(argv: list[str], threads: str) -> float:
    """A fresh `python benchmarks/runtime_speed.py child ...` (or timing.py's); its median in µs."""
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, check=False,
                          env=child_env(threads), cwd=ROOT)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise RuntimeError(f"{' '.join(argv[:3])}: {last}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["median_us"])


def contenders(
    name: str, kind: str, files: dict[str, Path], runs: int, warmup: int, threads: str,
) -> dict[str, list[str]]:
    """Each contender's child command line (after the interpreter)."""
    me = str(Path(__file__).resolve())
    pte, npz = str(files[kind]), str(files["inputs"])
    common = [str(runs), str(warmup), "0" if threads == "default" else threads]
    found = {"ours": [me, "child-ours", pte, npz, *common], "eager": [me, "child-eager", name, *common]}
    if kind == "xnnpack":
        found["executorch"] = [str(ROOT / "benchmarks" / "timing.py"), "executorch", pte, npz, *common]
    return found


def measure(rows: list[Row], files: dict[str, dict[str, Path]], args: argparse.Namespace) -> None:
    """Every row's contenders, one fresh process each, alternating, --repeat rounds."""
    for i in range(args.repeat):
        for row in rows:
            cmds = contenders(row.recipe, row.kind, files[row.recipe], args.runs, args.warmup, row.threads)
            order = list(cmds) if i % 2 == 0 else list(cmds)[::-1]
            for who in order:
                us = run_child(cmds[who], row.threads)
                row.rounds.setdefault(who, []).append(us)
                print(f"  round {i + 1} {row.recipe} {row.kind} threads={row.threads} {who}: {us:,.0f} us",
                      file=sys.stderr, flush=True)


def table(rows: list[Row]) -> list[str]:
    lines = ["| model | program | threads | ours µs | ExecuTorch µs | eager µs | ours / eager | ours / ExecuTorch |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        o, x, e = r.median("ours"), r.median("executorch"), r.median("eager")
        xs, ratio_x = (f"{x:,.0f}", f"{o / x:.2f}x") if r.kind == "xnnpack" else ("–", "–")
        lines.append(f"| {r.recipe} | {'ExecuTorch XNNPACK' if r.kind == 'xnnpack' else 'etbuild portable'} | "
                     f"{r.threads} | {o:,.0f} | {xs} | {e:,.0f} | {o / e:.2f}x | {ratio_x} |")
    return lines


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipes", nargs="*", default=list(ZOO))
    parser.add_argument("--portable", default="gru,kws", help="recipes also timed on our portable build (a, b, ...)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/etbuild-runtime-speed"), help="cache of .pte files")
    for option, default in (("--runs", 200), ("--warmup", 20), ("--repeat", 3)):
        parser.add_argument(option, type=int, default=default)
    parser.add_argument("--threads", default="default,1", help="comma-separated: default and/or counts")
    parser.add_argument("--json", type=Path)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    portable = {p for p in args.portable.split(",") if p}
    files = {name: prepare(name, args.work, name in portable) for name in dict.fromkeys([*args.recipes, *portable])}
    rows = [Row(name, kind, t) for t in args.threads.split(",") for name in files
            for kind in ("xnnpack", "portable") if kind in files[name] and (kind == "portable" or name in args.recipes)]
    before = loadavg()
    measure(rows, files, args)
    after = loadavg()
    print(f"fresh process per timing; median of {args.runs} calls after {args.warmup}, median of {args.repeat} "
          f"rounds; load average {before} before, {after} after; {os.cpu_count()} cores\n")
    print("\n".join(table(rows)))
    if args.json:
        out = [{"recipe": r.recipe, "program": r.kind, "threads": r.threads, "rounds_us": r.rounds,
                "median_us": {k: r.median(k) for k in r.rounds}} for r in rows]
        args.json.write_text(json.dumps({"load_before": before, "load_after": after, "rows": out}, indent=2))


def _ours_child(pte: str, npz: str, runs: str, warmup: str, threads: str) -> None:
    """Load the program in our runtime (no torch in this process), warm up, time, print one JSON line."""
    import numpy as np
    from timing import median_us

    from etbuild.runtime import Program

    program = Program.load(Path(pte))
    method = program.load_method(program.method_names[0])
    with np.load(npz) as data:
        arrays = [data[f"in{k}"] for k in range(len(data.files))]
    print(json.dumps({"median_us": median_us(lambda: method(*arrays), int(runs), int(warmup)),
                      "torch_loaded": "torch" in sys.modules}))


def _eager_child(name: str, runs: str, warmup: str, threads: str) -> None:
    """The recipe's model called eagerly under no_grad, at `threads` intra-op threads (0: torch's default)."""
    import torch
    from timing import median_us

    from etbuild.model import build_model, example_inputs, method_callable
    from etbuild.recipe import load_recipe

    if int(threads):
        torch.set_num_threads(int(threads))
    recipe = load_recipe(ROOT / "recipes" / f"{name}.yaml")
    method = recipe.model.methods[0].name
    fn = method_callable(build_model(recipe).eval(), method, recipe)
    inputs = example_inputs(recipe, method)
    with torch.no_grad():
        us = median_us(lambda: fn(*inputs), int(runs), int(warmup))
    print(json.dumps({"median_us": us, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "benchmarks"))
    if len(sys.argv) > 1 and sys.argv[1] == "child-ours":
        _ours_child(*sys.argv[2:7])
    elif len(sys.argv) > 1 and sys.argv[1] == "child-eager":
        _eager_child(*sys.argv[2:6])
    else:
        main()
