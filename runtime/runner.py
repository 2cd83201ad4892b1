"""Run a `.pte` on arrays from an `.npz` file and write the outputs to another (torch-free); the command line's
numerics options from the environment (`environment_options`: ETBUILD_THREADS, ETBUILD_BLAS, ETBUILD_NATIVE).

Used by `etbuild run` and, in a subprocess without torch, by the verify stage:

    python -m etbuild.runtime.runner calls   X.pte IN.npz OUT.npz [--method M] [--calls N]
    python -m etbuild.runtime.runner samples X.pte IN.npz OUT.npz [--method M]

`calls`: inputs are `in0`, `in1`, … in method order; one call writes `out0`, `out1`, …;
N calls on one loaded method (state persists) write `call0_out0`, `call1_out0`, ….
`samples`: inputs are `s<j>_in<k>`; sample j's outputs are written as `s<j>_out<k>`.
An inputs file that is not an `.npz` of plain arrays (object arrays included: nothing is
unpickled) is a MethodInputError naming it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from etbuild.errors import EtbuildError, MethodInputError
from etbuild.runtime.program import Method, Program

_KEY = re.compile(r"^(?:s(\d+)_)?in(\d+)$")

ENVIRONMENT = {"ETBUILD_THREADS": "threads", "ETBUILD_BLAS": "blas", "ETBUILD_NATIVE": "native"}


def environment_options(environ: dict[str, str] | None = None) -> dict[str, object]:
    """The numerics options a command-line entry point takes from its environment (ETBUILD_THREADS=N,
    ETBUILD_BLAS=openblas|numpy|mkl|PATH, ETBUILD_NATIVE=0), as keyword arguments of Program.load. Only entry points
    read them: a program loaded by a library call takes its options as parameters."""
    env = os.environ if environ is None else environ
    found: dict[str, object] = {}
    for var, key in ENVIRONMENT.items():
        value = env.get(var, "").strip()
        if not value:
            continue
        if key == "threads":
            if not value.isdigit() or int(value) < 1:
                from etbuild.errors import UsageError  # here: a trimmed runtime's errors module may not hold it

                raise UsageError(f"{var}={value!r}: expected a whole number of threads, at least 1")
            found[key] = int(value)
        else:
            found[key] = value != "0" if key == "native" else value
    return found



_SIZE = re.compile(r"([0-9]+) ?(B|KiB|MiB|GiB|)")
_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_bytes(text: str) -> int:
    """`"8GiB"` -> 8589934592 (bytes, or a number with a B/KiB/MiB/GiB unit)."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 1048576, 512MiB or 8GiB")
    return int(m.group(1)) * _UNITS[m.group(2)]


_UNREADABLE = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile)


def load_inputs(path: Path) -> dict[str, np.ndarray]:
    """Every array of an `.npz` file; MethodInputError when it is not one (nothing is unpickled)."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except _UNREADABLE:
        raise MethodInputError(f"{path}: not an .npz file (a zip archive of .npy arrays)") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise MethodInputError(f"{path}: expected an .npz file of arrays, found a single array")
    with loaded as npz:
        try:
            return {k: npz[k] for k in npz.files}
        except _UNREADABLE as exc:
            raise MethodInputError(f"{path}: not an .npz file of plain arrays ({exc})") from None


def _ordered(arrays: dict[str, np.ndarray], prefix: str) -> list[np.ndarray]:
    keys = [k for k in arrays if re.fullmatch(rf"{prefix}in\d+", k)]
    keys.sort(key=lambda k: int(k.rsplit("in", 1)[1]))
    expected = [f"{prefix}in{i}" for i in range(len(keys))]
    if keys != expected:
        names = ", ".join(expected) or f"{prefix}in0"
        raise MethodInputError(f"inputs must be named {names}, …; found {', '.join(arrays)}")
    return [arrays[k] for k in keys]


def call_inputs(path: Path) -> list[np.ndarray]:
    """The inputs `in0`, `in1`, … of an `.npz` file, in method order."""
    return _ordered(load_inputs(path), "")


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


def run_calls(
    pte: Path, inputs: Path, out: Path, method: str = "forward", calls: int = 1, max_planned_bytes: int | None = None,
    data: Sequence[Path] = (),
) -> None:
    """Load once (with the `.ptd` data files `data`), call `calls` times on the same inputs, write the outputs."""
    m = Program.load(pte, data, **environment_options()).load_method(method, max_planned_bytes=max_planned_bytes)
    args = call_inputs(inputs)
    results: dict[str, Any] = {}
    for c in range(calls):
        outs = _call(m, args)
        prefix = f"call{c}_" if calls > 1 else ""
        results.update({f"{prefix}out{k}": v for k, v in enumerate(outs)})
    _save(out, results)


def run_samples(pte: Path, inputs: Path, out: Path, method: str = "forward", data: Sequence[Path] = ()) -> None:
    """Run each sample `s<j>_in*` through one loaded method (with the data files `data`), in order."""
    m = Program.load(pte, data, **environment_options()).load_method(method)
    results: dict[str, Any] = {}
    arrays = load_inputs(inputs)
    count = len({int(m_.group(1)) for k in arrays if (m_ := _KEY.match(k)) and m_.group(1)})
    for j in range(count):
        outs = _call(m, _ordered(arrays, f"s{j}_"))
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
    parser.add_argument("--data", type=Path, action="append", default=[], help="a .ptd data file (repeatable)")
    args = parser.parse_args(argv)
    try:
        if args.mode == "calls":
            run_calls(args.pte, args.inputs, args.out, args.method, args.calls, data=args.data)
        else:
            run_samples(args.pte, args.inputs, args.out, args.method, args.data)
    except EtbuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
