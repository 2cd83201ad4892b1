"""Load and run mutants in etbuild's runtime and tally what happens (torch-free).

    python -m tests.fuzz.harness --mutator bytes --count 1000 --seed 0 [--start 0] A.pte B.pte … [--json]

Mutant k of a campaign is sample `k % len(samples)` mutated with `random.Random(f"{seed}:{k}")`,
so any mutant can be rebuilt from its seed and number (`mutant(...)`). Each mutant is loaded
(every method) and each method is called twice on seeded inputs of its planned shapes.

Outcomes: `ok` (outputs equal the original program's on the same inputs), `ok, other outputs`
(a mutant the format cannot tell from a valid program, such as a changed weight or scalar),
or the name of the etbuild error raised, or a contract breach: `untyped`
(any other exception), `memory` (a MemoryError, raw or inside a KernelError), `slow` (a call
over `SLOW_S` of CPU time: on a shared machine wall time counts other processes' work too),
`hang` (stopped by the watchdog, after `WATCHDOG_S` of wall time). A KernelError that wraps a raw Python
exception is tallied by that exception's type too (`raw_causes`): kernels fed arguments
they do not accept. A crash of the interpreter is seen by the parent process (test_fuzz.py),
which runs each campaign in a child.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from etbuild.backends.xnnpack.runtime import loops as xnnpack_loops
from etbuild.errors import EtbuildError, KernelError
from etbuild.kernels import native
from etbuild.runtime import Method, Program
from etbuild.runtime.format import program as fb
from etbuild.runtime.tensor import SCALAR_TYPE_TO_DTYPE
from tests.fuzz.blob_mutators import BlobByteMutator, BlobStructureMutator
from tests.fuzz.mutators import ByteMutator, Mutator, StructureMutator

MUTATORS: dict[str, Mutator] = {
    m.name: m for m in (ByteMutator(), StructureMutator(), BlobByteMutator(), BlobStructureMutator())
}
SLOW_S = 1.0  # a call taking more CPU seconds than this breaks the contract
WATCHDOG_S = 10.0  # a call is interrupted after this
MAX_PLANNED_BYTES = 256 << 20  # the caller's memory limit for every mutant
MAX_INPUT_ELEMENTS = 1 << 22
BREACHES = ("untyped", "memory", "slow", "hang")


class Hang(BaseException):
    """Raised by the watchdog; a BaseException, so that no `except Exception` swallows it."""


@dataclass
class Tally:
    """What a campaign's mutants did."""

    mutants: int = 0
    seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    raw_causes: Counter[str] = field(default_factory=Counter)
    breaches: list[str] = field(default_factory=list)  # "k: outcome: message" of each contract breach
    slowest_call_s: float = 0.0
    slowest_mutant: int = -1  # the number of the mutant that made the slowest call

    def as_json(self) -> str:
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)})

    def add(self, k: int, outcome: str, detail: str, cause: str | None, slowest: float) -> None:
        self.mutants += 1
        self.outcomes[outcome] += 1
        if slowest > self.slowest_call_s:
            self.slowest_call_s, self.slowest_mutant = slowest, k
        if cause:
            self.raw_causes[cause] += 1
        if outcome in BREACHES:
            self.breaches.append(f"{k}: {outcome}: {detail[:300]}")


def mutant(samples: list[bytes], mutator: Mutator, seed: int, k: int) -> bytes:
    """Mutant k of a campaign (see the module docstring)."""
    return mutator.mutate(samples[k % len(samples)], random.Random(f"{seed}:{k}"))


def inputs_for(method: Method, rng: random.Random) -> list[Any]:
    """Seeded inputs of each input value's planned shape and dtype (small stand-ins for absurd shapes); integer
    inputs are 0 or 1, so that token ids and cache positions reach the kernels behind them."""
    args: list[Any] = []
    for i in method.plan.inputs:
        v = method.plan.values[i].val
        if isinstance(v, fb.Tensor):
            dtype = SCALAR_TYPE_TO_DTYPE.get(v.scalar_type, np.dtype(np.float32))
            shape = tuple(v.sizes) if int(np.prod(v.sizes, dtype=np.float64)) <= MAX_INPUT_ELEMENTS else (1,)
            draw = np.random.default_rng(rng.randrange(1 << 30))
            if dtype.kind in "iu":  # token ids, positions, indices: 0 or 1 is valid for any table or cache
                args.append(draw.integers(0, 2, shape).astype(dtype))
            else:
                args.append((draw.standard_normal(shape) * 3).astype(dtype))
        else:
            args.append({fb.Int: 1, fb.Double: 0.5, fb.Bool: True}.get(type(v)))
    return args


Calls = dict[str, tuple[list[Any], list[Any]]]  # method -> (inputs, outputs of the last call)


def run(data: bytes, original: bytes, rng: random.Random) -> tuple[str, str, str | None, float]:
    """(outcome, message, raw cause, slowest call in CPU s) of loading and calling one program;
    a program that runs is `ok` when its outputs are the original's, else `ok, other outputs`."""
    slowest, calls = 0.0, {}
    try:
        program = Program.from_bytes(data)
        for name in program.method_names:
            method = program.load_method(name, max_planned_bytes=MAX_PLANNED_BYTES)
            args = inputs_for(method, rng)
            for _ in range(2):
                start = time.process_time()
                outs = method(*args)
                slowest = max(slowest, time.process_time() - start)
            calls[name] = (args, outs)
    except MemoryError as exc:
        return "memory", repr(exc), None, slowest
    except EtbuildError as exc:
        cause = exc.__cause__
        if isinstance(cause, MemoryError):
            return "memory", str(exc), None, slowest
        raw = type(cause).__name__ if isinstance(exc, KernelError) and cause is not None else None
        return type(exc).__name__, str(exc), raw, slowest
    except Exception as exc:  # the contract: only etbuild errors
        return "untyped", f"{type(exc).__name__}: {exc}", None, slowest
    if slowest > SLOW_S:
        return "slow", f"a call took {slowest:.2f} s of CPU time", None, slowest
    return ("ok" if _same_outputs(original, calls) else "ok, other outputs"), "", None, slowest


def _same_outputs(original: bytes, calls: Calls) -> bool:
    """Whether the original program, given the same inputs, gives the same outputs."""
    try:
        program = Program.from_bytes(original)
        for name, (args, outs) in calls.items():
            method = program.load_method(name)
            method(*args)
            expected = method(*args)
            if len(expected) != len(outs) or not all(map(_equal, expected, outs)):
                return False
    except EtbuildError:
        return False
    return True


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    return type(a) is type(b) and a == b


def campaign(samples: list[bytes], mutator: Mutator, count: int, seed: int, progress: Path | None = None,
             start: int = 0) -> Tally:
    """Run mutants start .. start+count-1 of the samples (see the module docstring): a campaign
    run in chunks sees the same mutants. `progress` holds the number of the mutant being run,
    for a parent process to name the one that crashed the interpreter."""
    tally = Tally()
    began = time.perf_counter()

    def watchdog(signum: int, frame: Any) -> None:
        raise Hang()

    previous = signal.signal(signal.SIGALRM, watchdog)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            for k in range(start, start + count):
                if progress is not None:
                    progress.write_text(str(k))
                data = mutant(samples, mutator, seed, k)
                signal.setitimer(signal.ITIMER_REAL, WATCHDOG_S)
                try:
                    tally.add(k, *run(data, samples[k % len(samples)], random.Random(k)))
                except Hang:
                    tally.add(k, "hang", f"stopped after {WATCHDOG_S} s", None, WATCHDOG_S)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    tally.seconds = time.perf_counter() - began
    return tally


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz.harness", description=__doc__.splitlines()[0])
    p.add_argument("samples", nargs="+", type=Path)
    p.add_argument("--mutator", choices=sorted(MUTATORS), required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0, help="the first mutant's number (to run a campaign in chunks)")
    p.add_argument("--json", action="store_true", help="print the tally as JSON")
    p.add_argument("--progress", type=Path, help="a file that holds the number of the mutant being run")
    args = p.parse_args(argv)
    samples = [s.read_bytes() for s in args.samples]
    native.warm()  # numba compiles its loops once per machine: a cost of the first call, not of a mutant
    xnnpack_loops.warm()
    tally = campaign(samples, MUTATORS[args.mutator], args.count, args.seed, args.progress, args.start)
    if args.json:
        print(tally.as_json())
    else:
        print(f"{tally.mutants} mutants in {tally.seconds:.1f} s: {dict(tally.outcomes.most_common())}")
        print(f"raw causes inside KernelErrors: {dict(tally.raw_causes.most_common())}")
        print("\n".join(tally.breaches[:20]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
