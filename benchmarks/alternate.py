"""Several `.pte` files of one model in ExecuTorch's runtime, each timing in a fresh process, alternating.

    python benchmarks/alternate.py INPUTS.npz A.pte [B.pte ...] BASELINE.pte [--rounds 6] [--runs 100] [--threads 2]

For comparing builds of one model that differ in one choice (a partitioning rule, a layout) against ExecuTorch's
own program: every round times each program once (`timing.executorch_fresh_us`: the median of --runs calls in a
fresh process, the XNNPACK threadpool reset to --threads), the order reversed every other round so that neither
side always runs first. Each program's line gives the median of its rounds and the median, min and max of its
per-round ratios to the last program (the baseline). INPUTS.npz holds `in0`, `in1`, … (`real_models.py --keep`
writes one per model beside the programs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import results  # benchmarks/results.py (the script's folder is on sys.path)
from timing import executorch_fresh_us  # benchmarks/timing.py (the script's folder is on sys.path)


def alternate(inputs: Path, ptes: list[Path], rounds: int, runs: int, threads: int,
              warmup: int = 5) -> dict[Path, list[float]]:
    """Each program's per-round median µs, the programs alternating round by round (the order reversed every
    other round)."""
    times: dict[Path, list[float]] = {pte: [] for pte in ptes}
    for r in range(rounds):
        for pte in ptes if r % 2 == 0 else ptes[::-1]:
            times[pte].append(executorch_fresh_us(pte, inputs, runs, warmup=warmup, threads=threads))
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", type=Path)
    parser.add_argument("ptes", type=Path, nargs="+", help="programs to compare; the last is the baseline")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    results.add_option(parser, "alternate")
    args = parser.parse_args(argv)
    if len(args.ptes) < 2:
        parser.error("give at least two programs: the last is the baseline")
    times = alternate(args.inputs, args.ptes, args.rounds, args.runs, args.threads)
    baseline = times[args.ptes[-1]]
    rows = []
    for pte, own in times.items():
        ratios = [a / b for a, b in zip(own, baseline)]
        print(f"{str(pte):60s} {statistics.median(own):10.1f} µs  {statistics.median(ratios):.3f}× "
              f"({min(ratios):.2f}–{max(ratios):.2f})")
        rows.append({"program": str(pte), "median us": statistics.median(own), "ratio": statistics.median(ratios),
                     "least ratio": min(ratios), "largest ratio": max(ratios)})
    if args.results:
        results.save(args.results, rows, title="Builds of one model in ExecuTorch's runtime, alternating",
                     notes=[f"{args.rounds} rounds of {args.runs} calls in a fresh process, {args.threads} thread(s); "
                            "ratio: to the last program, the median of the rounds' ratios"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
