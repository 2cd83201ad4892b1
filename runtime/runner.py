"""Run a `.pte` on arrays from an `.npz` file and write the outputs to another (torch-free).

Used by `etbuild run` and, in a subprocess without torch, by the verify stage:

    python -m etbuild.runtime.runner calls   X.pte IN.npz OUT.npz [--method M] [--calls N]
    python -m etbuild.runtime.runner samples X.pte IN.npz OUT.npz [--method M]

`calls`: inputs are `in0`, `in1`, … in method order; one call writes `out0`, `out1`, …;
N calls on one loaded method (state persists) write `call0_out0`, `call1_out0`, ….
`samples`: inputs are `s<j>_in<k>`; sample j's outputs are written as `s<j>_out<k>`.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from etbuild.errors import EtbuildError, MethodInputError
from etbuild.runtime.program import Method, Program

_KEY = re.compile(r"^(?:s(\d+)_)?in(\d+)$")


def _ordered(npz: Any, prefix: str) -> list[np.ndarray]:
    keys = [k for k in npz.files if re.fullmatch(rf"{prefix}in\d+", k)]
    keys.sort(key=lambda k: int(k.rsplit("in", 1)[1]))
    expected = [f"{prefix}in{i}" for i in range(len(keys))]
    if keys != expected:
        names = ", ".join(expected) or f"{prefix}in0"
        raise MethodInputError(f"inputs must be named {names}, …; found {', '.join(npz.files)}")
    return [npz[k] for k in keys]


def _save(out: Path, arrays: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp.npz")
    payload: dict[str, Any] = {k: np.asarray(v) for k, v in arrays.items()}
    np.savez(tmp, **payload)
    tmp.replace(out)


def _call(method: Method, inputs: list[Any]) -> list[Any]:
    try:
        return method(*inputs)
    except MethodInputError as exc:
        raise MethodInputError(f"method {method.name!r}: {exc}") from None


def run_calls(pte: Path, inputs: Path, out: Path, method: str = "forward", calls: int = 1) -> None:
    """Load once, call `calls` times on the same inputs, write the outputs."""
    m = Program.load(pte).load_method(method)
    with np.load(inputs) as npz:
        args = _ordered(npz, "")
    results: dict[str, Any] = {}
    for c in range(calls):
        outs = _call(m, args)
        prefix = f"call{c}_" if calls > 1 else ""
        results.update({f"{prefix}out{k}": v for k, v in enumerate(outs)})
    _save(out, results)


def run_samples(pte: Path, inputs: Path, out: Path, method: str = "forward") -> None:
    """Run each sample `s<j>_in*` through one loaded method, in order."""
    m = Program.load(pte).load_method(method)
    results: dict[str, Any] = {}
    with np.load(inputs) as npz:
        count = len({int(m_.group(1)) for k in npz.files if (m_ := _KEY.match(k)) and m_.group(1)})
        for j in range(count):
            outs = _call(m, _ordered(npz, f"s{j}_"))
            results.update({f"s{j}_out{k}": v for k, v in enumerate(outs)})
    _save(out, results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m etbuild.runtime.runner")
    parser.add_argument("mode", choices=["calls", "samples"])
    parser.add_argument("pte", type=Path)
    parser.add_argument("inputs", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--method", default="forward")
    parser.add_argument("--calls", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        if args.mode == "calls":
            run_calls(args.pte, args.inputs, args.out, args.method, args.calls)
        else:
            run_samples(args.pte, args.inputs, args.out, args.method)
    except EtbuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
