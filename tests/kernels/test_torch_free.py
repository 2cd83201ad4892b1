"""The kernel libraries import and run with torch made unimportable."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
sys.modules["torch"] = None
import numpy as np
from etbuild.runtime.kernel_registry import load_all
kernels = load_all()
out = np.empty(3, dtype=np.float32)
kernels["aten::relu.out"].fn(np.array([-1.0, 0.0, 2.0], dtype=np.float32), out)
assert out.tolist() == [0.0, 0.0, 2.0], out
assert "torch" not in {m.split(".")[0] for m in sys.modules if sys.modules[m] is not None}
print(len(kernels))
"""


def test_kernels_import_without_torch() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.strip()) >= 80
