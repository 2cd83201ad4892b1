"""Running a TOSA flatbuffer in the TOSA reference model (tosa-tools, the `ethos-u` extra). Torch-free.

A functional simulation: integer results as the TOSA specification defines them, no NPU timing. The
reference model binds inputs by position to the block's inputs and checks only their byte counts. On an
invalid graph it forks a debugger before raising, so a graph's first run happens in a child process;
once it ran there, later runs are in this process.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from etbuild.errors import InvalidProgram, KernelError

EXTRA = "ethos-u"
CHILD = """
import sys, numpy as np, tosa_reference_model as trm
folder = sys.argv[1]
with np.load(folder + "/inputs.npz") as f:
    inputs = [f[f"a{k}"] for k in range(len(f.files))]
outputs, status = trm.run(open(folder + "/graph.tosa", "rb").read(), inputs, initialize_variable_tensor_from_numpy=True)
np.savez(folder + "/outputs.npz", *outputs, status=np.array(int(status)))
"""


def reference_model() -> Any:
    try:
        return importlib.import_module("tosa_reference_model")
    except ImportError:
        raise KernelError(f"running a TOSA graph needs the TOSA reference model: pip install 'etbuild[{EXTRA}]'"
                          ) from None


class ReferenceGraph:
    """One TOSA graph, run in the reference model."""

    def __init__(self, tosa: bytes) -> None:
        if len(tosa) < 8 or tosa[4:8] != b"TOSA":
            raise InvalidProgram("a TOSA graph must be a flatbuffer with file identifier 'TOSA'")
        self.tosa, self.proven = tosa, False

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The graph's outputs on `inputs` (int8 arrays, bound by position)."""
        inputs = [np.ascontiguousarray(a) for a in inputs]
        if not self.proven:
            outputs = self._run_in_child(inputs)
            self.proven = True
            return outputs
        outputs, status = reference_model().run(self.tosa, inputs, initialize_variable_tensor_from_numpy=True)
        if int(status) != 0:
            raise KernelError(f"the TOSA reference model returned status {status} (0 is TOSA_VALID)")
        return list(outputs)

    def _run_in_child(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        reference_model()
        with tempfile.TemporaryDirectory(prefix="etbuild-tosa-") as tmp:
            Path(tmp, "graph.tosa").write_bytes(self.tosa)
            np.savez(Path(tmp, "inputs.npz"), **{f"a{k}": a for k, a in enumerate(inputs)})
            done = subprocess.run([sys.executable, "-c", CHILD, tmp], capture_output=True, text=True)
            result = Path(tmp, "outputs.npz")
            if done.returncode != 0 or not result.exists():
                tail = [line for line in done.stderr.splitlines() if "rror" in line][-3:]
                said = " | ".join(tail) or done.stderr[-500:]
                raise KernelError(f"the TOSA reference model refused the graph: {said}")
            with np.load(result) as f:
                status = int(f["status"])
                outputs = [f[f"arr_{k}"] for k in range(len(f.files) - 1)]
        if status != 0:
            raise KernelError(f"the TOSA reference model returned status {status} (0 is TOSA_VALID)")
        return outputs


def write_outputs(outputs: Sequence[np.ndarray], targets: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Copy each result into the caller's array (same element count: delegate I/O is raw bytes)."""
    for result, target in zip(outputs, targets):
        if result.size != target.size:
            raise KernelError(f"a TOSA graph output of {result.size} elements for a {target.size}-element value")
        np.copyto(target, result.reshape(target.shape).astype(target.dtype, copy=False))
    return list(targets)
