"""Decode-step cost of `llm.attention: custom` against `portable` as the KV cache grows, in our runtime.

    python benchmarks/llm_attention.py [--contexts 64,512,2048] [--steps 40]

Per attention form and `max_context`, a seeded random tiny Llama (tests.llm_support.TINY) is exported as the
`model.llm` factory makes it (the export stage's state handling included), lowered into a `.pte`, loaded in
our runtime, prefilled with a fixed 6-token prompt, then decoded one token a call; the table gives the forward's
instruction count, the median and best decode step and the `.pte` bytes. Custom attention writes the cache in
place and attends over its filled part, so its step should not grow with the context; portable copies the cache
and attends over all of it. Say the machine's load (`/proc/loadavg`) with any number.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import results  # noqa: E402  (benchmarks/results.py: the script's folder is on sys.path)

from etbuild.llm.runner import decoder  # noqa: E402
from etbuild.lowering.mutated_constants import constants_to_state, snapshot_tensors  # noqa: E402
from etbuild.pipeline import compile_exported  # noqa: E402
from etbuild.runtime import Program  # noqa: E402
from etbuild.runtime.format.pte import read_program  # noqa: E402
from tests.llm_support import PROMPT, TINY  # noqa: E402


def build(max_context: int, attention: str) -> bytes:
    """The `.pte` of the tiny Llama with this cache length and attention form."""
    model = decoder(config=TINY, max_context=max_context, max_prefill=16, attention=attention)
    initial = snapshot_tensors(model)
    dynamic = ({1: torch.export.Dim("n", min=1, max=16)}, None)
    ep = torch.export.export(model, (torch.tensor([PROMPT]), torch.tensor([0])), dynamic_shapes=dynamic, strict=False)
    return compile_exported({"forward": constants_to_state(ep, initial)}).pte


def decode_ms(data: bytes, steps: int) -> tuple[float, float]:
    """Median and best decode step, in milliseconds, after a prefill of the prompt."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.pte"
        path.write_bytes(data)
        forward = Program.load(path).load_method("forward")
        forward(np.array([PROMPT], dtype=np.int64), np.array([0], dtype=np.int64))
        times = []
        for position in range(len(PROMPT), len(PROMPT) + steps):
            start = time.perf_counter()
            forward(np.array([[7]], dtype=np.int64), np.array([position], dtype=np.int64))
            times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3, min(times) * 1e3


def instructions(data: bytes) -> int:
    program, _ = read_program(data)
    plan = next(plan for plan in program.execution_plan if plan.name == "forward")
    return len(plan.chains[0].instructions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", default="64,512,2048")
    parser.add_argument("--steps", type=int, default=40)
    results.add_option(parser, "llm-attention")
    args = parser.parse_args()
    print(f"load average: {Path('/proc/loadavg').read_text().split()[:3]}")
    print("| attention | max_context | instructions | decode median ms | decode best ms | .pte bytes |")
    print("|---|---|---|---|---|---|")
    rows = []
    for attention in ("custom", "portable"):
        for context in map(int, args.contexts.split(",")):
            data = build(context, attention)
            median, best = decode_ms(data, args.steps)
            print(f"| {attention} | {context} | {instructions(data)} | {median:.2f} | {best:.2f} | {len(data):,} |")
            rows.append({"attention": attention, "max_context": context, "instructions": instructions(data),
                         "decode_median_ms": median, "decode_best_ms": best, "pte_bytes": len(data)})
    if args.results:
        results.save(args.results, rows, title="Decode step of the tiny Llama in our runtime, by attention and context",
                     notes=[f"median and best of {args.steps} decode steps"])


if __name__ == "__main__":
    main()
