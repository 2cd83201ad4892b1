"""Decode-step cost of runner-contract `.pte` files in ExecuTorch's runtime, side by side.

    python benchmarks/llm_step.py A.pte B.pte [--rounds 4] [--steps 150] [--prompt 64]

Each round loads every program afresh, in turn, prefills a fixed prompt (in chunks of the forward's bound on
the token count: one call for a dynamic program, one token a call for a static one), then times `--steps`
one-token calls. Per program and round it prints the CPU time per step (user + system, all threads: less
sensitive to other processes than wall time), the fastest and the median wall time of a step, and the
1-minute load average. Alternating the programs within each round lets a shared machine's load fall on all
of them alike. Needs executorch (the oracle) with its `llama::` and quantized kernels.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from pathlib import Path
from typing import Any


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def step_costs(pte: Path, prompt: list[int], steps: int) -> dict[str, Any]:
    """Prefill `prompt`, then time `steps` greedy one-token calls of `pte`'s forward."""
    import torch
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(pte).load_method("forward")
    bound = int(method.metadata.input_tensor_meta(0).sizes()[1])
    for start in range(0, len(prompt), bound):
        out = method.execute([torch.tensor([prompt[start:start + bound]]), torch.tensor([start])])[0]
    token, times = int(out.argmax()), []
    cpu = _cpu_seconds()
    for k in range(steps):
        begin = time.perf_counter()
        out = method.execute([torch.tensor([[token]]), torch.tensor([len(prompt) + k])])[0]
        times.append((time.perf_counter() - begin) * 1e3)
        token = int(out.argmax())
    return {"pte": str(pte), "bound": bound, "cpu_ms_per_step": round((_cpu_seconds() - cpu) / steps * 1e3, 3),
            "min_ms": round(min(times), 3), "median_ms": round(statistics.median(times), 3),
            "load1": Path("/proc/loadavg").read_text().split()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ptes", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens (ids 3 ... 82, fixed)")
    args = parser.parse_args()
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (llama:: kernels)
    import executorch.kernels.quantized  # noqa: F401

    prompt = [(7 * i) % 80 + 3 for i in range(args.prompt)]
    for _ in range(args.rounds):
        for pte in args.ptes:
            print(json.dumps(step_costs(pte, prompt, args.steps)), flush=True)


if __name__ == "__main__":
    main()
