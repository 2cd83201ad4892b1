"""Prefill and decode-step cost of runner-contract `.pte` files in ExecuTorch's runtime, side by side.

    python benchmarks/llm_step.py A.pte B.pte [--rounds 4] [--steps 150] [--prompt 64] [--prefills 20]
                                              [--threads 1]

Each round loads every program afresh, in turn. Prefill: the fixed prompt is fed at position 0 (in chunks
of the forward's bound on the token count: one call for a dynamic program, one token a call for a static
one) `--prefills` times, and the CPU time per whole prompt is reported (the first feed, which binds and
faults pages in, is not counted). Decode: after the prompt, `--steps` one-token greedy calls are timed.
Per program and round it prints the CPU time per prompt and per step (user + system, all threads: less
sensitive to other processes than wall time), the fastest and the median wall time of each, and the
1-minute load average. Alternating the programs within each round lets a shared machine's load fall on all
of them alike. `--threads` sets ExecuTorch's threadpool and torch's (0: their defaults). Needs executorch
(the oracle) with its `llama::` and quantized kernels.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import results  # benchmarks/results.py (the script's folder is on sys.path)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(call: Callable[[], Any], times: int) -> tuple[float, list[float]]:
    """CPU ms per call over `times` calls, and each call's wall ms."""
    walls, cpu = [], _cpu_seconds()
    for _ in range(times):
        begin = time.perf_counter()
        call()
        walls.append((time.perf_counter() - begin) * 1e3)
    return (_cpu_seconds() - cpu) / times * 1e3, walls


def step_costs(pte: Path, prompt: list[int], steps: int, prefills: int) -> dict[str, Any]:
    """Time feeding `prompt` at position 0 `prefills` times, then `steps` greedy one-token calls after it."""
    import torch
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(pte).load_method("forward")
    bound = int(method.metadata.input_tensor_meta(0).sizes()[1])
    chunks = [(torch.tensor([prompt[start:start + bound]]), torch.tensor([start]))
              for start in range(0, len(prompt), bound)]
    last: list[Any] = []

    def prefill() -> None:
        last[:] = [method.execute(list(chunk))[0] for chunk in chunks][-1:]

    prefill()
    prefill_cpu, prefill_walls = _timed(prefill, prefills)
    state = {"token": int(last[0].argmax()), "position": len(prompt)}

    def decode() -> None:
        out = method.execute([torch.tensor([[state["token"]]]), torch.tensor([state["position"]])])[0]
        state["token"], state["position"] = int(out.argmax()), state["position"] + 1

    decode_cpu, decode_walls = _timed(decode, steps)
    return {"pte": str(pte), "bound": bound,
            "cpu_ms_per_prefill": round(prefill_cpu, 3), "min_prefill_ms": round(min(prefill_walls), 3),
            "median_prefill_ms": round(statistics.median(prefill_walls), 3),
            "cpu_ms_per_step": round(decode_cpu, 3), "min_ms": round(min(decode_walls), 3),
            "median_ms": round(statistics.median(decode_walls), 3),
            "load1": Path("/proc/loadavg").read_text().split()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ptes", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--prefills", type=int, default=20, help="timed feeds of the whole prompt")
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens (ids 3 ... 82, fixed)")
    parser.add_argument("--threads", type=int, default=1, help="ExecuTorch's and torch's threads (0: default)")
    results.add_option(parser, "llm-step")
    args = parser.parse_args()
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (llama:: kernels)
    import executorch.kernels.quantized  # noqa: F401
    import torch
    from executorch.extension.pybindings import _C

    if args.threads:
        torch.set_num_threads(args.threads)
        _C._unsafe_reset_threadpool(args.threads)
    prompt = [(7 * i) % 80 + 3 for i in range(args.prompt)]
    rows = []
    for k in range(args.rounds):
        for pte in args.ptes:
            rows.append({"round": k + 1, **step_costs(pte, prompt, args.steps, args.prefills)})
            print(json.dumps(rows[-1]), flush=True)
    if args.results:
        results.save(args.results, rows, title="Prefill and decode-step cost in ExecuTorch's runtime, side by side",
                     notes=[f"{args.prompt}-token prompt fed {args.prefills} times; {args.steps} one-token steps; "
                            f"threads {args.threads or 'default'}; CPU ms are user + system of all threads"])


if __name__ == "__main__":
    main()
