"""Our runtime as users see it: each program in a fresh process, at the default thread count and at one, on a quiet
machine and beside a busy process, next to ExecuTorch's runtime and eager torch measured in the same conditions.

    python benchmarks/runtime_speed.py [--models mlp,cnn,kws,gru,transformer] [--tier bert,vit,mobilenetv4]
        [--threads default,1] [--loads quiet,busy] [--runs 100] [--warmup 10] [--repeat 3]
        [--work /tmp/etbuild-runtime-speed] [--results [NAME]]

Programs: the zoo's recipes (recipes/<name>.yaml) and the real-model tier's architectures (tests/models/zoo.py,
random weights), each lowered by ExecuTorch itself (`to_edge_transform_and_lower` + XnnpackPartitioner, the
oracle) and cached under --work with its inputs as an .npz. Per program, thread setting and load, every contender
runs in a child process of its own (load, --warmup calls, the median of --runs calls), contenders alternating
process by process and the order reversed round by round; a figure is the median of the --repeat rounds' medians.

Contenders: ours (no torch in the process: it loads the inputs from the .npz) with the default BLAS (MKL when the
`mkl` extra is installed) and with numpy's (`blas="numpy"`), ExecuTorch's runtime (its XNNPACK threadpool reset
to the thread count) and the eager model under no_grad. "default" leaves every library at its own thread count;
"1" is `Program.load(threads=1)`, torch.set_num_threads(1) and ExecuTorch's threadpool at 1. "busy" runs the
children while one process started by this script spins on one core.

The JSON (docs/results/NAME.json with --results) holds every round and the load average; the table gives per
configuration the medians, ours / eager, ours / ExecuTorch, and ours / ours at one thread (a collapse shows there).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ZOO = ("mlp", "cnn", "kws", "gru", "transformer")
TIER = ("bert", "vit", "mobilenetv4")
COLUMNS = ["model", "threads", "load", "ours_us", "ours_numpy_us", "executorch_us", "eager_us", "ours_vs_eager",
           "ours_vs_executorch", "ours_vs_one_thread", "ours_numpy_vs_one_thread"]


def prepare(name: str, work: Path) -> dict[str, Path]:
    """The program's recipe, its inputs (`in0`, … in an .npz) and ExecuTorch's XNNPACK `.pte`, cached in work."""
    import numpy as np

    from etbuild.model import example_inputs
    from etbuild.recipe import load_recipe

    recipe_path = ROOT / "recipes" / f"{name}.yaml"
    if name not in ZOO:
        from tests.models.zoo import write_recipe

        (work / "recipes").mkdir(exist_ok=True)
        recipe_path = write_recipe(name, work / "recipes")
    recipe = load_recipe(recipe_path)
    files = {"recipe": recipe_path, "inputs": work / f"{name}.inputs.npz", "pte": work / f"{name}.xnnpack.pte"}
    if not files["inputs"].exists():
        method = recipe.model.methods[0].name
        np.savez(files["inputs"], **{f"in{k}": t.numpy() for k, t in enumerate(example_inputs(recipe, method))})
    if not files["pte"].exists():
        from etbuild.verify.oracle import executorch_build, xnnpack_partitioner

        print(f"{name}: ExecuTorch lowers it to XNNPACK ...", file=sys.stderr, flush=True)
        tmp = files["pte"].with_suffix(".tmp")
        executorch_build(recipe, tmp, xnnpack_partitioner())
        tmp.replace(files["pte"])
    return files


def contenders(files: dict[str, Path], threads: str, runs: int, warmup: int, mkl: bool) -> dict[str, list[str]]:
    """Each contender's child command line (after the interpreter)."""
    me, timing = str(Path(__file__).resolve()), str(ROOT / "benchmarks" / "timing.py")
    count = "0" if threads == "default" else threads
    common = [str(runs), str(warmup), count]
    found = {"ours": [me, "child-ours", str(files["pte"]), str(files["inputs"]), *common, "auto"],
             "executorch": [timing, "executorch", str(files["pte"]), str(files["inputs"]), *common],
             "eager": [me, "child-eager", str(files["recipe"]), *common]}
    if mkl:  # with the extra, "auto" is MKL: numpy's BLAS is a contender of its own
        found["ours_numpy"] = [*found["ours"][:-1], "numpy"]
    return found


def run_child(argv: list[str]) -> float:
    """A fresh child process; its median in µs."""
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, check=False, cwd=ROOT,
                          env={**_env(), "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise RuntimeError(f"{' '.join(argv[:3])}: {last}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["median_us"])


def _env() -> dict[str, str]:
    """The children's environment: the caller's, without thread or etbuild settings (each child sets its own)."""
    import os

    skip = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "ETBUILD_THREADS", "ETBUILD_BLAS",
            "ETBUILD_NATIVE")
    return {k: v for k, v in os.environ.items() if k not in skip}


@contextlib.contextmanager
def load(kind: str) -> Iterator[None]:
    """"busy": one process spinning on one core for the block's duration; "quiet": nothing."""
    if kind == "quiet":
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def measure(names: list[str], files: dict[str, dict[str, Path]], args: argparse.Namespace,
            mkl: bool) -> list[dict[str, Any]]:
    """Every configuration's rounds: per load, per round, per program and thread setting, each contender once."""
    rounds: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for kind in args.loads.split(","):
        with load(kind):
            for i in range(args.repeat):
                for name in names:
                    for threads in args.threads.split(","):
                        cmds = contenders(files[name], threads, args.runs, args.warmup, mkl)
                        order = list(cmds) if i % 2 == 0 else list(cmds)[::-1]
                        cell = rounds.setdefault((name, threads, kind), {})
                        for who in order:
                            cell.setdefault(who, []).append(run_child(cmds[who]))
                        print(f"  {kind} round {i + 1} {name} threads={threads}: "
                              + ", ".join(f"{w} {cell[w][-1]:,.0f} us" for w in cmds), file=sys.stderr, flush=True)
    return [row(key, cell, rounds) for key, cell in rounds.items()]


def row(key: tuple[str, str, str], cell: dict[str, list[float]],
        rounds: dict[tuple[str, str, str], dict[str, list[float]]]) -> dict[str, Any]:
    """One configuration's medians and ratios (ours at one thread in the same load as the reference)."""
    name, threads, kind = key
    med = {who: statistics.median(values) for who, values in cell.items()}
    one = rounds.get((name, "1", kind), {})
    one_med = {who: statistics.median(values) for who, values in one.items()}
    found: dict[str, Any] = {"model": name, "threads": threads, "load": kind, "rounds_us": cell}
    for who in ("ours", "ours_numpy", "executorch", "eager"):
        found[f"{who}_us"] = round(med[who], 1) if who in med else None
    found["ours_vs_eager"] = round(med["ours"] / med["eager"], 2)
    found["ours_vs_executorch"] = round(med["ours"] / med["executorch"], 2)
    for who in ("ours", "ours_numpy"):
        ratio = med[who] / one_med[who] if who in med and who in one_med else None
        found[f"{who}_vs_one_thread"] = None if ratio is None else round(ratio, 2)
    return found


def parse_args() -> argparse.Namespace:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from results import add_option

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(ZOO), help="zoo recipes (recipes/<name>.yaml)")
    parser.add_argument("--tier", default=",".join(TIER), help="real-model tier architectures (tests/models/zoo.py)")
    parser.add_argument("--threads", default="default,1")
    parser.add_argument("--loads", default="quiet,busy")
    for option, default in (("--runs", 100), ("--warmup", 10), ("--repeat", 3)):
        parser.add_argument(option, type=int, default=default)
    parser.add_argument("--work", type=Path, default=Path("/tmp/etbuild-runtime-speed"), help="cache of programs")
    add_option(parser, "runtime-speed")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    sys.path.insert(0, str(ROOT))
    from results import save

    from etbuild.kernels.numerics import blas

    args.work.mkdir(parents=True, exist_ok=True)
    names = [n for n in (*args.models.split(","), *args.tier.split(",")) if n]
    files = {name: prepare(name, args.work) for name in names}
    mkl = blas.library() is not None
    rows = measure(names, files, args, mkl)
    for r in rows:
        print(json.dumps({k: v for k, v in r.items() if k != "rounds_us"}))
    if args.results:
        notes = [f"ours' default BLAS: {'MKL (the mkl extra is installed)' if mkl else 'numpy (no mkl extra)'}; "
                 "ours_numpy: blas='numpy'", f"medians of {args.runs} calls after {args.warmup}, median of "
                 f"{args.repeat} rounds, each timing in a fresh process; busy: one core spinning"]
        path = save(args.results, rows, title="Runtime speed: ours, ExecuTorch's runtime, eager torch",
                    columns=COLUMNS, notes=notes)
        print(f"wrote {path}")


def _ours_child(pte: str, npz: str, runs: str, warmup: str, threads: str, blas: str) -> None:
    """Load the program in our runtime (no torch in this process), warm up, time, print one JSON line."""
    import numpy as np
    from timing import median_us

    from etbuild.runtime import Program

    program = Program.load(Path(pte), threads=int(threads) or None, blas=blas)
    method = program.load_method(program.method_names[0])
    with np.load(npz) as data:
        arrays = [data[f"in{k}"] for k in range(len(data.files))]
    us = median_us(lambda: method(*arrays), int(runs), int(warmup))
    if "torch" in sys.modules:
        raise SystemExit("our runtime's child imported torch")
    print(json.dumps({"median_us": us}))


def _eager_child(recipe_path: str, runs: str, warmup: str, threads: str) -> None:
    """The recipe's model called eagerly under no_grad, at `threads` intra-op threads (0: torch's default)."""
    import torch
    from timing import median_us

    from etbuild.model import build_model, example_inputs, method_callable
    from etbuild.recipe import load_recipe

    if int(threads):
        torch.set_num_threads(int(threads))
    recipe = load_recipe(Path(recipe_path))
    method = recipe.model.methods[0].name
    fn = method_callable(build_model(recipe).eval(), method, recipe)
    inputs = example_inputs(recipe, method)
    with torch.no_grad():
        us = median_us(lambda: fn(*inputs), int(runs), int(warmup))
    print(json.dumps({"median_us": us}))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "benchmarks"))
    if len(sys.argv) > 1 and sys.argv[1] == "child-ours":
        _ours_child(*sys.argv[2:8])
    elif len(sys.argv) > 1 and sys.argv[1] == "child-eager":
        _eager_child(*sys.argv[2:6])
    else:
        main()
