"""Decode speed at real shapes: wall ms per token in our runtime and ExecuTorch's, the weight bytes each token
reads, the GB/s that makes, and the machine's own bandwidth measured in the same run.

    python benchmarks/llm_decode.py [--shapes anchor,smollm2,qwen05] [--forms fp32,8da4w] [--flows export_llm]
        [--threads default,1] [--new 32] [--repeat 2] [--cache DIR] [--build-only] [--results [NAME]]

Shapes (Llama-3 layout, seeded random weights: speed does not depend on their values):
- anchor: issue 46's 32.5 M-parameter decoder (dim 512, 8 layers, GQA 8/2, SwiGLU 1536, vocabulary 8,192);
- smollm2: SmolLM2-135M's shape (576 wide, 30 layers, GQA 9/3, SwiGLU 1536, vocabulary 49,152);
- qwen05: Qwen2.5-0.5B's shape (896 wide, 24 layers, GQA 14/2, SwiGLU 4864, vocabulary 151,936).
Programs: export_llm's (KV cache, custom SDPA, XNNPACK with extended ops; fp32 and 8da4w: 8-bit dynamic activations,
4-bit weights in groups of 32, 4-bit embeddings), built once per shape and form under --cache
(etbuild.verify.export_llm), and with `--flows export_llm,etbuild` our recipe's program of the same checkpoint.
Building is most of a first run's time (export_llm's export and XNNPACK partitioning of every layer: at qwen05's
shape tens of minutes a program on a busy 2-core machine), so build once with `--build-only` (each program's build
seconds printed; nothing timed) and time later runs from the same --cache: a program in the cache is never rebuilt.

Each timing is a child process of its own (ours imports no torch): load, 8 warm-up tokens, then --new tokens decoded
greedily one call each from position 8; the figure is the median per-token wall time, the best of --repeat children
(alternating ours and ExecuTorch's); peak_MB is a child's peak resident memory (VmHWM), the largest of its
runtime's children (ExecuTorch's child holds torch, ours numba's compiled loops: ~100 MB of it is the runtime's own
code, not the program's). Threads: "default" leaves each runtime at its default, "1" is
`Program.load(threads=1)` and ExecuTorch's threadpool at one thread. Bandwidth: the best of numpy streaming reads
(max, sum and a dot product over 512 MB of float32), median of 5 each. Weight bytes per token: every linear layer's
weights (the output head included) and one embedding row: 4 bytes a weight for fp32, 0.5 + a float32 scale per 32
weights for 8da4w.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {
    "anchor": dict(dim=512, n_layers=8, n_heads=8, n_kv_heads=2, vocab_size=8192, hidden_dim=1536),
    "smollm2": dict(dim=576, n_layers=30, n_heads=9, n_kv_heads=3, vocab_size=49152, hidden_dim=1536),
    "qwen05": dict(dim=896, n_layers=24, n_heads=14, n_kv_heads=2, vocab_size=151936, hidden_dim=4864),
}
CONTEXT = 128  # the KV cache's positions: enough for the warm-up and --new tokens
WARM = 8
COLUMNS = ["shape", "form", "flow", "params_M", "weight_MB_per_token", "threads", "ours_ms", "executorch_ms",
           "ours_vs_executorch", "ours_GBps", "ours_share_of_bandwidth", "executorch_GBps", "program_MB",
           "ours_peak_MB", "executorch_peak_MB"]


def bandwidth_gbps() -> float:
    """The machine's streaming-read bandwidth: the best of numpy's max, sum and dot over 512 MB (median of 5)."""
    import numpy as np

    a = np.ones(128 << 20, np.float32)
    best = 0.0
    for read in (a.max, a.sum, lambda: a.dot(a)):
        read()
        times = []
        for _ in range(5):
            t = time.perf_counter()
            read()
            times.append(time.perf_counter() - t)
        best = max(best, a.nbytes / statistics.median(times) / 1e9)
    return best


def weight_bytes(shape: Any, form: str) -> float:
    """Bytes of weights one decode step reads: the linear layers (head included) and one embedding row."""
    linear = shape.parameters - shape.vocab_size * shape.dim - shape.dim * (2 * shape.n_layers + 1)
    per_weight = 4.0 if form == "fp32" else 0.5 + 4 / 32
    return linear * per_weight + shape.dim * per_weight


def program(name: str, form: str, flow: str, cache: Path) -> tuple[Path, Any]:
    """The `.pte` of shape `name` in `form` by `flow` (built once under cache, its build time printed), and its
    LlamaShape."""
    from etbuild.verify.export_llm import LlamaShape, export_llm

    shape = LlamaShape(**SHAPES[name], max_seq_len=CONTEXT, max_context_len=CONTEXT)
    start = time.perf_counter()
    if flow == "etbuild":  # our recipe's program of the checkpoint export_llm's fp32 build writes (same seed)
        from llm_runtime import recipe_program

        pte = recipe_program(export_llm(shape, "fp32", cache).parent, form, CONTEXT)
    else:
        pte = export_llm(shape, form, cache)
    seconds = time.perf_counter() - start
    if seconds > 30:  # built now: a cached program takes a second or a few (our flow's build checks it is up to date)
        print(f"built {name} {form} {flow} in {seconds:.0f} s: {pte}", flush=True)
    return pte, shape


def run_child(runtime: str, pte: Path, threads: str, new: int) -> dict[str, float]:
    """One child's median ms per decoded token and its peak resident memory."""
    argv = [sys.executable, str(Path(__file__).resolve()), "child", runtime, str(pte), threads, str(new)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=_env())
    if proc.returncode != 0:
        raise RuntimeError(f"{runtime} child failed on {pte}: {proc.stderr.strip().splitlines()[-3:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _env() -> dict[str, str]:
    import os

    skip = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "ETBUILD_THREADS", "ETBUILD_BLAS")
    env = {k: v for k, v in os.environ.items() if k not in skip}
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))}


def measure(pte: Path, threads: str, new: int, repeat: int) -> tuple[dict[str, float], dict[str, float]]:
    """The best of `repeat` children per runtime, ours and ExecuTorch's alternating; and each runtime's largest
    peak resident memory (MB) over its children."""
    runs: dict[str, list[dict[str, float]]] = {"ours": [], "executorch": []}
    for i in range(repeat):
        for runtime in (("ours", "executorch") if i % 2 == 0 else ("executorch", "ours")):
            runs[runtime].append(run_child(runtime, pte, threads, new))
    return ({runtime: min(r["ms_per_token"] for r in found) for runtime, found in runs.items()},
            {runtime: max(r["peak_MB"] for r in found) for runtime, found in runs.items()})


def row(name: str, form: str, flow: str, threads: str, args: argparse.Namespace, bandwidth: float) -> dict[str, Any]:
    pte, shape = program(name, form, flow, args.cache)
    ms, peak = measure(pte, threads, args.new, args.repeat)
    read = weight_bytes(shape, form)
    ours_gbps, et_gbps = read / ms["ours"] / 1e6, read / ms["executorch"] / 1e6
    found = {"shape": name, "form": form, "flow": flow, "params_M": round(shape.parameters / 1e6, 1),
             "weight_MB_per_token": round(read / 1e6, 1), "threads": threads, "ours_ms": round(ms["ours"], 2),
             "executorch_ms": round(ms["executorch"], 2), "ours_vs_executorch": round(ms["ours"] / ms["executorch"], 2),
             "ours_GBps": round(ours_gbps, 1), "ours_share_of_bandwidth": round(ours_gbps / bandwidth, 2),
             "executorch_GBps": round(et_gbps, 1), "program_MB": round(pte.stat().st_size / 1e6, 1),
             "ours_peak_MB": round(peak["ours"]), "executorch_peak_MB": round(peak["executorch"])}
    print(json.dumps(found), flush=True)
    return found


def build_all(args: argparse.Namespace) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Every (shape, form, flow) asked for, built into --cache first (a cached program is not rebuilt), so that
    the timings and the bandwidth around them are measured together; and a note for each that failed to build."""
    from etbuild.errors import StageError

    built, failed = [], []
    only = set(args.only.split(",")) if args.only else set()
    for name in args.shapes.split(","):
        for form in args.forms.split(","):
            for flow in args.flows.split(","):
                if only and f"{form}:{flow}" not in only and f"{name}:{form}:{flow}" not in only:
                    continue
                try:
                    program(name, form, flow, args.cache)
                    built.append((name, form, flow))
                except StageError as exc:  # export_llm's 8da4w build fails now and then: say so, measure the rest
                    failed.append(f"{name} {form} {flow}: not built: {str(exc).splitlines()[-1]}")
                    print(failed[-1], flush=True)
    return built, failed


def main() -> None:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from results import add_option, save

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--forms", default="fp32,8da4w")
    p.add_argument("--flows", default="export_llm", help="export_llm and/or etbuild (our recipe's program)")
    p.add_argument("--only", default="", help="form:flow pairs, or shape:form:flow triples, to measure (default: "
                   "every shape, form and flow)")
    p.add_argument("--threads", default="default,1")
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--cache", type=Path, default=Path("/tmp/etbuild-llm-decode"))
    p.add_argument("--build-only", action="store_true", help="build every program into --cache, time nothing")
    add_option(p, "llm-decode")
    args = p.parse_args()
    built, failed = build_all(args)
    if args.build_only:
        return
    before = bandwidth_gbps()
    rows = [row(*which, threads, args, before) for which in built for threads in args.threads.split(",")]
    after = bandwidth_gbps()
    print(f"bandwidth {before:.1f} GB/s before, {after:.1f} after")
    if args.results:
        notes = [f"measured bandwidth (numpy streaming read): {before:.1f} GB/s before the runs, {after:.1f} after; "
                 "ours_share_of_bandwidth uses the first", f"median ms per token of {args.new} greedy tokens after "
                 f"{WARM}, the best of {args.repeat} fresh processes per runtime", *failed]
        save(args.results, rows, title="Decode speed at real shapes", columns=COLUMNS, notes=notes,
             extra={"bandwidth_GBps_before": round(before, 1), "bandwidth_GBps_after": round(after, 1)})


def child(runtime: str, pte: str, threads: str, new: int) -> dict[str, float]:
    """Load `pte` in `runtime`, decode WARM tokens, then time `new` one-token calls."""
    import numpy as np

    count = 0 if threads == "default" else int(threads)
    if runtime == "ours":
        from etbuild.tools.runner import load_runner

        runner = load_runner(pte, **({"threads": count} if count else {}))
    else:
        import torch
        from executorch.extension.pybindings import _C

        from etbuild.tools.textgen import executorch_runner

        if count:
            torch.set_num_threads(count)
            _C._unsafe_reset_threadpool(count)
        runner = executorch_runner(Path(pte))
    token, times = 5, []
    for step in range(WARM + new):
        t = time.perf_counter()
        logits = runner.feed([token])
        if step >= WARM:
            times.append(time.perf_counter() - t)
        token = int(np.argmax(np.asarray(logits).reshape(-1)))
    if runtime == "ours" and "torch" in sys.modules:
        raise SystemExit("our runtime's child imported torch")
    return {"ms_per_token": 1e3 * statistics.median(times), "peak_MB": _peak_mb()}


def _peak_mb() -> float:
    """This process's peak resident memory in MB: VmHWM (ru_maxrss would count the parent's peak, kept across
    exec), or ru_maxrss where /proc is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1e3
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "child":
        print(json.dumps(child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))))
    else:
        main()
