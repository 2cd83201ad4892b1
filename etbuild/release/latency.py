"""Latency of a product on the runtime it ships with: the median of timed calls, measured in an
isolated subprocess where only that runtime (a wheel or a tree), numpy and flatbuffers import."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from etbuild.errors import VerificationError
from etbuild.model import example_inputs
from etbuild.recipe import Recipe
from etbuild.verify.trimmed import run_isolated

CALLS, WARMUP = 20, 3

_TIMER = """
import json, sys, time
import numpy as np
from etbuild.runtime import Program
pte, inputs, method, calls, warmup = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
with np.load(inputs) as npz:
    args = [npz[f"in{k}"] for k in range(len(npz.files))]
m = Program.load(pte, sys.argv[6:]).load_method(method)
for _ in range(warmup):
    m(*args)
times = []
for _ in range(calls):
    start = time.perf_counter()
    m(*args)
    times.append(time.perf_counter() - start)
times.sort()
print(json.dumps({"median_ms": times[len(times) // 2] * 1e3, "min_ms": times[0] * 1e3, "calls": calls}))
"""


def measure_latency(recipe: Recipe, pte: Path, runtime: Path, calls: int = CALLS,
                    data: Sequence[Path] = ()) -> dict[str, Any]:
    """`{"method", "median_ms", "min_ms", "calls"}` for the recipe's first method on its example inputs (its keys
    looked up in the `.ptd` files `data`)."""
    method = recipe.model.methods[0].name
    with tempfile.TemporaryDirectory(prefix="etbuild-latency-") as tmp:
        inputs = Path(tmp) / "in.npz"
        np.savez(inputs, **{f"in{k}": t.detach().numpy() for k, t in enumerate(example_inputs(recipe, method))})
        proc = run_isolated(runtime, code=_TIMER, argv=[pte, inputs, method, calls, WARMUP, *data])
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-4:])
        raise VerificationError(f"{pte.name} could not be timed on {runtime.name}: {tail}")
    return {"method": method, **json.loads(proc.stdout.strip().splitlines()[-1])}
