"""Runs a program's samples in ExecuTorch's runtime, in the subprocess that
`etbuild.verify.oracle.run_samples_in_executorch` starts.

    python -m etbuild.verify.oracle_samples PTE IN.npz OUT.npz METHOD [PTD]

It imports only numpy, torch and the pybindings' extension module, which
`executorch.extension.pybindings.portable_lib` re-exports after importing all of
`executorch.exir` (8 s of CPU here, for nothing a run needs); and, when the program calls
`quantized_decomposed::` operators outside its delegates, `executorch.kernels.quantized`,
which registers their kernels (5 s).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch


def run_samples(pte: str, inputs_npz: str, out_npz: str, method: str, ptd: str | None = None) -> None:
    """Each sample's outputs, in order on one loaded method (with the `.ptd` data file `ptd`: ExecuTorch 1.5.1
    takes one from Python)."""
    from executorch.extension.pybindings import _C

    data = Path(pte).read_bytes()  # ExecuTorch's program reads these bytes, not a copy: keep them alive
    if needs_quantized_kernels(data):
        import executorch.kernels.quantized  # noqa: F401  (registers quantized_decomposed's kernels)
    if calls_namespace(data, "llama::"):
        import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (registers the llama:: kernels)
    weights = Path(ptd).read_bytes() if ptd else None  # kept alive beside the program's bytes
    loaded = _C._load_for_executorch_from_buffer(data, *([weights] if weights else []))
    with np.load(inputs_npz) as npz:
        arity = len([k for k in npz.files if k.startswith("s0_in")])
        count = len(npz.files) // arity if arity else 0
        samples = [[torch.from_numpy(npz[f"s{j}_in{k}"]) for k in range(arity)] for j in range(count)]
    outputs = {}
    for j, sample in enumerate(samples):
        for k, out in enumerate(loaded.run_method(method, tuple(sample))):
            outputs[f"s{j}_out{k}"] = out.numpy() if isinstance(out, torch.Tensor) else np.asarray(out)
    np.savez(out_npz, **outputs)


def needs_quantized_kernels(data: bytes) -> bool:
    """Whether a program calls any `quantized_decomposed::` operator (their kernels are not in
    ExecuTorch's runtime until `executorch.kernels.quantized` is imported)."""
    return calls_namespace(data, "quantized_decomposed::")


def calls_namespace(data: bytes, prefix: str) -> bool:
    """Whether a program calls any operator whose name starts with `prefix` (`llama::`: ExecuTorch
    registers those kernels when `executorch.extension.llm.custom_ops.custom_ops` is imported)."""
    from etbuild.runtime.format.pte import read_program

    program, _ = read_program(data)
    return any(op.name.startswith(prefix) for plan in program.execution_plan for op in plan.operators)


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6):
        sys.exit("usage: python -m etbuild.verify.oracle_samples PTE IN.npz OUT.npz METHOD [PTD]")
    run_samples(*sys.argv[1:])
