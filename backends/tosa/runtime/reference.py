"""Running a TOSA flatbuffer in the TOSA reference model (tosa-tools, the `ethos-u` extra). Torch-free.

A functional simulation: integer results as the TOSA specification defines them, no NPU timing. The
reference model binds inputs by position to the block's inputs and checks only their byte counts. It runs
in a child process of its own, as a simulator would: on an invalid graph it forks a debugger before
raising, and a trimmed runtime imports nothing but numpy and flatbuffers (the child is a plain
interpreter of this installation, which needs the extra).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from etbuild.errors import InvalidProgram, KernelError

EXTRA = "ethos-u"
SIMULATION = "TOSA graphs run in the TOSA reference model, in a child process"
"""What a delegate run here is (a handle's `simulation`, which `etbuild profile` and `generate` report)."""
CHILD = """
import sys, numpy as np, tosa_reference_model as trm
folder = sys.argv[1]
with np.load(folder + "/inputs.npz") as f:
    inputs = [f[f"a{k}"] for k in range(len(f.files))]
outputs, status = trm.run(open(folder + "/graph.tosa", "rb").read(), inputs, initialize_variable_tensor_from_numpy=True)
np.savez(folder + "/outputs.npz", *outputs, status=np.array(int(status)))
"""


class ReferenceGraph:
    """One TOSA graph, run in the reference model."""

    def __init__(self, tosa: bytes) -> None:
        if len(tosa) < 8 or tosa[4:8] != b"TOSA":
            raise InvalidProgram("a TOSA graph must be a flatbuffer with file identifier 'TOSA'")
        self.tosa = tosa

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The graph's outputs on `inputs` (int8 arrays, bound by position)."""
        with tempfile.TemporaryDirectory(prefix="etbuild-tosa-") as tmp:
            Path(tmp, "graph.tosa").write_bytes(self.tosa)
            np.savez(Path(tmp, "inputs.npz"), **{f"a{k}": np.ascontiguousarray(a) for k, a in enumerate(inputs)})
            done = subprocess.run([sys.executable, "-c", CHILD, tmp], capture_output=True, text=True, check=False)
            result = Path(tmp, "outputs.npz")
            if done.returncode != 0 or not result.exists():
                raise KernelError(_failure(done.stderr))
            with np.load(result) as f:
                status = int(f["status"])
                outputs = [f[f"arr_{k}"] for k in range(len(f.files) - 1)]
        if status != 0:
            raise KernelError(f"the TOSA reference model returned status {status} (0 is TOSA_VALID)")
        return outputs


def _failure(stderr: str) -> str:
    if "No module named 'tosa_reference_model'" in stderr:
        return f"running a TOSA graph needs the TOSA reference model: pip install 'etbuild[{EXTRA}]'"
    said = " | ".join([line for line in stderr.splitlines() if "rror" in line][-3:]) or stderr[-500:]
    return f"the TOSA reference model refused the graph: {said}"


def write_outputs(outputs: Sequence[np.ndarray], targets: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Copy each result into the caller's array (same element count: delegate I/O is raw bytes)."""
    for result, target in zip(outputs, targets):
        if result.size != target.size:
            raise KernelError(f"a TOSA graph output of {result.size} elements for a {target.size}-element value")
        np.copyto(target, result.reshape(target.shape).astype(target.dtype, copy=False))
    return list(targets)
