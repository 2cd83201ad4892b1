"""Load and call times of `.pte` files in etbuild's runtime (torch-free).

    python benchmarks/load.py build/*/*.pte [--runs 30] [--json out.json]

Per file and method: the median time of `Program.load` + `load_method` (the load-time
checks and binding included) and the median time of one call on zero inputs, after
warm-up. Files the runtime refuses are listed with their error instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import results  # benchmarks/results.py (the script's folder is on sys.path)
from timing import median_us  # benchmarks/timing.py (the script's folder is on sys.path)

from etbuild.errors import EtbuildError
from etbuild.runtime import Method, Program
from etbuild.runtime.format import program as fb
from etbuild.runtime.tensor import numpy_dtype


def zero_inputs(method: Method) -> list[Any]:
    """Zeros of each input's planned shape and dtype (scalars: 0 of their kind)."""
    args: list[Any] = []
    for i in method.plan.inputs:
        v = method.plan.values[i].val
        if isinstance(v, fb.Tensor):
            args.append(np.zeros(tuple(v.sizes), numpy_dtype(v.scalar_type)))
        else:
            args.append({fb.Int: 0, fb.Double: 0.0, fb.Bool: False}.get(type(v)))
    return args


def measure(path: Path, runs: int) -> list[dict[str, Any]]:
    """Load and call medians of every method of one file."""
    rows = []
    for name in Program.load(path).method_names:
        load_us = median_us(lambda name=name: Program.load(path).load_method(name), runs)
        method = Program.load(path).load_method(name)
        args = zero_inputs(method)
        call_us = median_us(lambda method=method, args=args: method(*args), runs)
        rows.append({"file": str(path), "method": name, "load_us": load_us, "call_us": call_us})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pte", nargs="+", type=Path)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--json", type=Path)
    results.add_option(p, "load")
    args = p.parse_args(argv)
    rows: list[dict[str, Any]] = []
    print(f"{'file':48} {'method':10} {'load µs':>10} {'call µs':>10}")
    for path in args.pte:
        try:
            measured = measure(path, args.runs)
        except EtbuildError as exc:
            print(f"{str(path):48} refused: {str(exc)[:100]}")
            rows.append({"file": str(path), "error": str(exc)})
            continue
        for r in measured:
            print(f"{r['file']:48} {r['method']:10} {r['load_us']:10.0f} {r['call_us']:10.1f}")
        rows += measured
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.results:
        results.save(args.results, rows, title="Load and call times of .pte files in etbuild's runtime",
                     columns=["file", "method", "load_us", "call_us", "error"],
                     notes=[f"median of {args.runs} loads and of {args.runs} calls on zero inputs, microseconds"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
