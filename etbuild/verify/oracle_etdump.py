"""ExecuTorch's runtime profiles a `.pte` into an ETDump: the oracle of the ETDump interop tests
(and a stand-in for a device, `python -m etbuild.verify.oracle_etdump PTE OUT.etdump [CALLS]`).

Loads the program with the pybindings' `_load_for_executorch(..., enable_etdump=True)`, calls
`method` on the inputs `calls` times and writes the ETDump with `write_etdump_result_to_file`
(and the intermediate outputs' bytes to `debug_buffer`, when given). Imported only when
called; `executorch` is the interop extra.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from etbuild.verify.oracle_samples import needs_quantized_kernels

DEBUG_BUFFER_BYTES = 64 << 20


def executorch_etdump(pte: Path, inputs: list[Any], out: Path, calls: int = 3, method: str = "forward",
                      debug_buffer: Path | None = None) -> Path:
    """Run the program in ExecuTorch's runtime with its ETDump on; the ETDump's path."""
    import torch
    from executorch.extension.pybindings import _C

    if needs_quantized_kernels(pte.read_bytes()):
        import executorch.kernels.quantized  # noqa: F401  (registers quantized_decomposed's kernels)
    module = _C._load_for_executorch(str(pte), enable_etdump=True,
                                     debug_buffer_size=DEBUG_BUFFER_BYTES if debug_buffer else 0)
    args = tuple(torch.from_numpy(np.asarray(x)) if isinstance(x, np.ndarray) else x for x in inputs)
    for _ in range(calls):
        module.run_method(method, args)
    module.write_etdump_result_to_file(str(out), str(debug_buffer) if debug_buffer else None)
    return out


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: python -m etbuild.verify.oracle_etdump PTE OUT.etdump [CALLS]")
    from etbuild.devtools.instrument import generated_inputs
    from etbuild.runtime.program import Program

    path = Path(sys.argv[1])
    executorch_etdump(path, generated_inputs(Program.load(path).load_method("forward")), Path(sys.argv[2]),
                      int(sys.argv[3]) if len(sys.argv) == 4 else 3)
